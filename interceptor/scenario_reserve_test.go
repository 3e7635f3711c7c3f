package interceptor_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
)

// TestReserveAfterRamp: a client quiet for 5 minutes, then 500 calls a
// second for 10 s, then a 1 s restart (every call answered UNAVAILABLE).
// The reserve counts the successes of the last 10 s whenever the last
// retry decision was, so the calls the restart catches are retried, as
// with steady traffic, whether or not a gauge polls Retrier.States. Before
// issue 20 the ramp's successes were spread over the 5 quiet minutes: 324
// of the 500 calls were refused by the budget.
func TestReserveAfterRamp(t *testing.T) {
	for _, polled := range []bool{false, true} {
		t.Run(fmt.Sprintf("States polled %v", polled), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var down atomic.Bool
				srv := newFaultyServer(t, func(context.Context, int) error {
					if down.Load() {
						return status.Error(codes.Unavailable, "restarting")
					}
					return nil
				}, respSize(1))
				r, err := interceptor.New(grpcbackoff.DefaultPolicy())
				if err != nil {
					t.Fatal(err)
				}
				c := srv.Client(t, r.DialOptions()...)
				ctx, stop := context.WithCancel(t.Context())
				defer stop()
				var poller sync.WaitGroup
				if polled {
					poller.Go(func() { // a gauge reading the budgets every second
						for {
							r.States()
							select {
							case <-ctx.Done():
								return
							case <-time.After(time.Second):
							}
						}
					})
				}
				if _, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
					t.Fatal(err)
				}
				time.Sleep(5 * time.Minute) // quiet

				const rate = 500
				var wg sync.WaitGroup
				var caught, throttled, failed atomic.Int64
				restartAt := time.Now().Add(10 * time.Second)
				for i := range 11 * rate {
					at := time.Now()
					if at.Equal(restartAt) {
						down.Store(true)
						time.AfterFunc(time.Second, func() { down.Store(false) })
					}
					inRestart := !at.Before(restartAt) && at.Before(restartAt.Add(time.Second))
					wg.Go(func() {
						_, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{})
						if inRestart {
							caught.Add(1)
						}
						var e *grpcbackoff.Error
						switch {
						case errors.As(err, &e) && e.Reason == grpcbackoff.ReasonThrottled:
							throttled.Add(1)
						case err != nil:
							failed.Add(1)
						}
					})
					if i%2 == 1 {
						time.Sleep(4 * time.Millisecond) // two calls every 4 ms: 500 a second
					}
				}
				wg.Wait()
				stop()
				poller.Wait()
				t.Logf("%d calls caught by the restart: %d refused by the budget, %d failed otherwise", caught.Load(), throttled.Load(), failed.Load())
				if caught.Load() != rate {
					t.Fatalf("the restart caught %d calls, want %d", caught.Load(), rate)
				}
				if n := throttled.Load(); n*50 > rate || failed.Load() != 0 {
					t.Errorf("%d of %d calls refused by the budget (want at most 2%%), %d failed otherwise", n, rate, failed.Load())
				}
			})
		})
	}
}
