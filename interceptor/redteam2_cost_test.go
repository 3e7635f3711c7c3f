package interceptor_test

import (
	"errors"
	"strconv"
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

// TestRedteam2SmallBurstThrottledRetries (red team 2, issue 44): a Throttle
// that Validate accepts (Burst 2, the long-run allowance alone: Reserve,
// MinReserve and Window zero, as Throttle's doc allows) never pays a
// RESOURCE_EXHAUSTED retry: the retry costs 3 and the pool is capped at 2.
// 20 calls a second apart, each failing RESOURCE_EXHAUSTED once and then
// served: with the budget full (States says 2 retries) every call is
// refused its one retry (ReasonThrottled), where the same calls failing
// UNAVAILABLE are all served, and before issue 44 the RESOURCE_EXHAUSTED
// ones were too. Throttle's doc promises RESOURCE_EXHAUSTED retries at a
// third of the cost, not none; a Throttle that cannot pay one should be
// refused by Validate (naming Burst) or the cost bounded by what the
// budget can ever hold.
func TestRedteam2SmallBurstThrottledRetries(t *testing.T) {
	th := grpcbackoff.Throttle{Ratio: 0.1, PerSecond: 0.5, Burst: 2}
	if err := th.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v: the premise is a valid Throttle", th, err)
	}
	for _, code := range []codes.Code{codes.Unavailable, codes.ResourceExhausted} {
		t.Run(code.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := bufconntest.NewServer(t, func(_ string, n int) bufconntest.Step {
					if n == 0 {
						return bufconntest.Fail(status.Error(code, "once"))
					}
					return bufconntest.Succeed(1)
				})
				r, err := interceptor.New(grpcbackoff.DefaultPolicy(), testService, interceptor.WithThrottle(th))
				if err != nil {
					t.Fatal(err)
				}
				c := srv.Client(t, r.DialOptions()...)
				const calls = 20
				failed, throttled := 0, 0
				var full float64
				for i := range calls {
					time.Sleep(time.Second) // synctest's clock: the pool refills, to Burst
					if s := r.States(); len(s) > 0 {
						full = s[0].Retries
					}
					ctx := metadata.AppendToOutgoingContext(t.Context(), bufconntest.StreamKey, strconv.Itoa(i))
					_, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{})
					if err != nil {
						failed++
						var e *grpcbackoff.Error
						if errors.As(err, &e) && e.Reason == grpcbackoff.ReasonThrottled {
							throttled++
						}
					}
				}
				if failed > 0 {
					t.Errorf("%v once then served, Throttle %+v (budget before each call: %v retries): %d of %d calls failed (%d ReasonThrottled); want 0 (a full budget pays the call's one retry)",
						code, th, full, failed, calls, throttled)
				}
			})
		})
	}
}
