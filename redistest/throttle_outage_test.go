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
// down, the retries it sees stay within the budget's bound (about 10% of the
// calls started); once it is back, calls succeed and a lone failing call
// gets every retry of its Policy again.
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

		// Count what the server saw while it was down.
		var started, retries int
		for _, a := range srv.Attempts() {
			at := a.Time.Sub(start)
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
		bound := float64(th.Burst) + th.Ratio*float64(started) + th.PerSecond*down
		t.Logf("outage of %vs: %d calls started, %d retries (%.1f%%), bound %.0f; calls: %d ok, %d throttled, %d failed otherwise",
			down, started, retries, 100*float64(retries)/float64(started), bound, ok, throttle, failed)
		if float64(retries) > bound {
			t.Errorf("retries during the outage = %d, want at most Burst + Ratio·started + PerSecond·T = %.0f", retries, bound)
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
