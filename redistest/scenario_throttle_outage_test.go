package redistest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/redis/apiv1/redispb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/redistest"
)

// TestThrottleHoldsRetriesDuringAnOutage runs many callers through one
// interceptor set against a fake that is down from 10 s to 40 s. While it is
// down, the retries it sees stay within the budget's bound (the reserve
// earned before the outage, then about 10% of the calls started); once it is
// back, calls succeed and a lone failing call gets every retry of its Policy
// again.
func TestThrottleHoldsRetriesDuringAnOutage(t *testing.T) {
	const (
		rate      = 50 // calls started per second
		duration  = 60 * time.Second
		downAt    = 10 * time.Second
		upAt      = 40 * time.Second
		perCallTO = 30 * time.Second
	)
	th := grpcbackoff.DefaultThrottle()
	synctest.Test(t, func(t *testing.T) {
		srv := redistest.NewServer()
		defer srv.Close()
		r, err := interceptor.New(grpcbackoff.DefaultPolicy(), interceptor.WithThrottle(th))
		if err != nil {
			t.Fatal(err)
		}
		client := redispb.NewCloudRedisClient(srv.Conn(r.DialOptions()...))
		start := time.Now()
		time.AfterFunc(downAt, srv.Down)
		time.AfterFunc(upAt, srv.Up)

		var (
			wg                   sync.WaitGroup
			mu                   sync.Mutex
			ok, failed, throttle int
		)
		tick := time.NewTicker(time.Second / rate)
		for time.Since(start) < duration {
			<-tick.C
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), perCallTO)
				defer cancel()
				_, err := client.ListInstances(ctx, &redispb.ListInstancesRequest{Parent: parent})
				mu.Lock()
				defer mu.Unlock()
				var e *grpcbackoff.Error
				switch {
				case err == nil:
					ok++
				case errors.As(err, &e) && e.Reason == grpcbackoff.ReasonThrottled:
					throttle++
				default:
					failed++
				}
			})
		}
		tick.Stop()
		wg.Wait()

		// Count what the server saw while it was down, and the successes of
		// the reserve's Window before.
		var started, retries, before int
		for _, a := range srv.Attempts() {
			at := a.Time.Sub(start)
			if at < downAt && at >= downAt-th.Window && a.Code == codes.OK {
				before++
			}
			if at < downAt || at >= upAt {
				continue
			}
			if len(a.Metadata.Get(interceptor.PreviousAttemptsKey)) == 0 {
				started++
			} else {
				retries++
			}
		}
		down := (upAt - downAt).Seconds()
		reserve := float64(th.MinReserve) + th.Reserve*float64(before)
		bound := reserve + float64(th.Burst) + th.Ratio*float64(started) + th.PerSecond*down
		t.Logf("outage of %vs: %d calls started, %d retries (%.1f%%), bound %.0f (reserve %.0f); calls: %d ok, %d throttled, %d failed otherwise",
			down, started, retries, 100*float64(retries)/float64(started), bound, reserve, ok, throttle, failed)
		if float64(retries) > bound {
			t.Errorf("retries during the outage = %d, want at most MinReserve + Reserve·S + Burst + Ratio·started + PerSecond·T = %.0f", retries, bound)
		}
		if float64(retries) < bound/2 {
			t.Errorf("retries during the outage = %d, want the budget used (bound %.0f), not every retry refused", retries, bound)
		}
		if throttle == 0 {
			t.Errorf("no call was throttled during a %vs outage of %d calls/s", down, rate)
		}

		// After the outage, the budget refills: a lone call failing seven
		// times gets all seven retries.
		<-time.After(time.Minute) // fake time: the bubble is idle
		srv.ResetAttempts()
		srv.FailNext(redistest.MethodListInstances, 7, codes.Unavailable)
		if _, err := client.ListInstances(t.Context(), &redispb.ListInstancesRequest{Parent: parent}); err != nil {
			t.Errorf("lone call after the outage: %v (%v), want success on attempt 8", err, status.Code(err))
		}
		if n := len(srv.Attempts()); n != 8 {
			t.Errorf("lone call after the outage made %d attempts, want 8", n)
		}
	})
}

// TestThrottleShortOutage: at 100 calls/s, a 2 s outage (a restart or a
// failover) after 20 s of success. With DefaultThrottle the reserve earned
// by the calls before it pays for their retries: at most 2% of the calls
// the outage catches fail. With the long-run allowance alone (the budget as
// it was) most of them failed.
func TestThrottleShortOutage(t *testing.T) {
	const (
		rate   = 100
		downAt = 20 * time.Second
		upAt   = 22 * time.Second
		end    = 30 * time.Second
	)
	cases := []struct {
		name    string
		th      grpcbackoff.Throttle
		maxLost float64 // share of the caught calls
		minLost float64
	}{
		{"DefaultThrottle", grpcbackoff.DefaultThrottle(), 0.02, 0},
		{"long-run allowance alone", grpcbackoff.Throttle{Ratio: 0.1, PerSecond: 0.5, Burst: 10}, 1, 0.5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := redistest.NewServer()
				defer srv.Close()
				r, err := interceptor.New(grpcbackoff.DefaultPolicy(), interceptor.WithThrottle(tc.th))
				if err != nil {
					t.Fatal(err)
				}
				client := redispb.NewCloudRedisClient(srv.Conn(r.DialOptions()...))
				start := time.Now()
				time.AfterFunc(downAt, srv.Down)
				time.AfterFunc(upAt, srv.Up)

				var (
					wg           sync.WaitGroup
					mu           sync.Mutex
					caught, lost int
				)
				tick := time.NewTicker(time.Second / rate)
				for time.Since(start) < end {
					<-tick.C
					wg.Go(func() {
						at := time.Since(start)
						ctx, cancel := context.WithTimeout(context.Background(), 600*time.Second)
						defer cancel()
						_, err := client.ListInstances(ctx, &redispb.ListInstancesRequest{Parent: parent})
						mu.Lock()
						defer mu.Unlock()
						if at >= downAt && at < upAt {
							caught++
							if err != nil {
								lost++
							}
						} else if err != nil {
							t.Errorf("a call at %v, outside the outage, failed: %v", at, err)
						}
					})
				}
				tick.Stop()
				wg.Wait()
				var attempts, retries int
				for _, a := range srv.Attempts() {
					attempts++
					if len(a.Metadata.Get(interceptor.PreviousAttemptsKey)) > 0 {
						retries++
					}
				}
				share := float64(lost) / float64(caught)
				t.Logf("2 s outage at %d calls/s: %d calls caught, %d lost (%.1f%%); %d attempts, %d retries",
					rate, caught, lost, 100*share, attempts, retries)
				if caught < 2*rate-1 {
					t.Errorf("the outage caught %d calls, want about %d", caught, 2*rate)
				}
				if share > tc.maxLost || share < tc.minLost {
					t.Errorf("%.1f%% of the caught calls failed, want between %.0f%% and %.0f%%", 100*share, 100*tc.minLost, 100*tc.maxLost)
				}
			})
		})
	}
}

// TestThrottleFreshClientDownThroughout: 100 callers make 10 calls each,
// one a second after the previous one ended, through one new Retrier with
// DefaultThrottle, against a server down the whole time: the retries stay
// below 0.3 per call (the reserve of a new budget, MinReserve, and the
// long-run allowance: 10% of the calls, Burst, PerSecond).
func TestThrottleFreshClientDownThroughout(t *testing.T) {
	const callers, calls = 100, 10
	synctest.Test(t, func(t *testing.T) {
		srv := redistest.NewServer()
		defer srv.Close()
		srv.Down()
		r, err := interceptor.New(grpcbackoff.DefaultPolicy(), interceptor.WithThrottle(grpcbackoff.DefaultThrottle()))
		if err != nil {
			t.Fatal(err)
		}
		client := redispb.NewCloudRedisClient(srv.Conn(r.DialOptions()...))
		start := time.Now()
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				for i := range calls {
					if i > 0 {
						<-time.After(time.Second)
					}
					ctx, cancel := context.WithTimeout(context.Background(), 600*time.Second)
					_, err := client.ListInstances(ctx, &redispb.ListInstancesRequest{Parent: parent})
					cancel()
					if status.Code(err) != codes.Unavailable {
						t.Errorf("a call = %v, want UNAVAILABLE", err)
					}
				}
			})
		}
		wg.Wait()
		attempts := len(srv.Attempts())
		perCall := float64(attempts) / (callers * calls)
		t.Logf("%d calls against a server down throughout: %d attempts (%.3f per call) over %v",
			callers*calls, attempts, perCall, time.Since(start))
		if perCall > 1.3 {
			t.Errorf("%.3f attempts per call, want at most 1.3", perCall)
		}
	})
}
