package interceptor_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// TestRedteam2RetriedStreamsInFlightBounded (red team 2, issue 44): the
// Throttle's doc says "as nothing is given back before a retry succeeds,
// the same bound holds, in any outage, of the retries that fail and of
// those in flight at any moment" (and budget.Account.Refund: "a refund
// comes after the retry ended"). A retried server stream is given back at
// its first response, while its attempt is still in flight: a watch or
// subscription stream stays open for hours. Throttle{Burst: 5} alone
// (Ratio, PerSecond and the reserve zero: the bound is 5). 20 server
// streams, one after the other, each first attempt failing UNAVAILABLE
// (a restart), each retry sending one response and staying open, as a
// watch does: the server ends up with 20 retried attempts in flight at
// once. The control, 20 unary calls whose retries the server holds, gets
// 5 retries in flight and the other 15 refused.
func TestRedteam2RetriedStreamsInFlightBounded(t *testing.T) {
	th := grpcbackoff.Throttle{Burst: 5}
	if err := th.Validate(); err != nil {
		t.Fatal(err)
	}
	const bound, calls = 5, 20
	for _, kind := range []string{"unary", "server stream"} {
		t.Run(kind, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var open, most atomic.Int64
				held := bufconntest.Step{Send: 1, After: func(ctx context.Context) error {
					n := open.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					defer open.Add(-1)
					return bufconntest.Pause(ctx, time.Hour)
				}}
				heldUnary := bufconntest.Step{Before: held.After}
				srv := bufconntest.NewServer(t, func(_ string, n int) bufconntest.Step {
					switch {
					case n == 0:
						return bufconntest.Fail(status.Error(codes.Unavailable, "restarting"))
					case kind == "unary":
						return heldUnary
					}
					return held
				})
				r, err := interceptor.New(grpcbackoff.DefaultPolicy(), testService, interceptor.WithThrottle(th))
				if err != nil {
					t.Fatal(err)
				}
				c := srv.Client(t, r.DialOptions()...)
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				refused := 0
				for i := range calls {
					cctx := metadata.AppendToOutgoingContext(ctx, bufconntest.StreamKey, strconv.Itoa(i))
					if kind == "unary" {
						done := make(chan error, 1)
						go func() {
							_, err := c.UnaryCall(cctx, &testgrpc.SimpleRequest{})
							done <- err
						}()
						synctest.Wait()
						select {
						case <-done:
							refused++
						default: // its retry is held by the server
						}
						time.Sleep(2 * time.Second) // past the retry's backoff
						synctest.Wait()
						select {
						case <-done:
							refused++
						default:
						}
						continue
					}
					st, err := c.StreamingOutputCall(cctx, &testgrpc.StreamingOutputCallRequest{})
					if err != nil {
						t.Fatal(err)
					}
					if _, err := st.Recv(); err != nil {
						refused++ // refused its retry by the budget
					}
				}
				synctest.Wait()
				t.Logf("%s: %d calls, %d refused, at most %d retried attempts in flight at once", kind, calls, refused, most.Load())
				if got := most.Load(); got > bound {
					t.Errorf("%s: %d retried attempts in flight at once under Throttle%+v; the Throttle's bound is %d (%d of %d calls refused)", kind, got, th, bound, refused, calls)
				}
				cancel()
				synctest.Wait()
			})
		})
	}
}
