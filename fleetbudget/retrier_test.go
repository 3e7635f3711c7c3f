package fleetbudget

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
)

// TestRetriersOfTwoProcesses: two processes' Retriers, their calls failing
// at once, share one fleet budget: together they retry as one process
// would (its MinReserve of 100 and Burst of 10), not twice that.
func TestRetriersOfTwoProcesses(t *testing.T) {
	addr, _ := server(t)
	prefix := testPrefix(t)
	p := grpcbackoff.DefaultPolicy()
	p.Initial, p.Max, p.Jitter = time.Nanosecond, time.Nanosecond, 0
	p.MaxAttempts = 1000
	failing := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		return status.Error(codes.Unavailable, "down")
	}
	var procs []*process
	var calls []grpc.UnaryClientInterceptor
	for range 2 {
		pr := newProcess(t, Options{URL: "redis://" + addr, Prefix: prefix, LeasePeriod: time.Minute})
		r, err := interceptor.New(p, pr.f.Option())
		if err != nil {
			t.Fatal(err)
		}
		procs, calls = append(procs, pr), append(calls, r.Unary())
	}
	ctx := context.Background()
	now := time.Now()
	paid := 0
	for round := range 4 { // renew, then each process makes calls that retry until refused
		for _, pr := range procs {
			pr.f.tick(ctx, now)
		}
		for _, call := range calls {
			for range 5 {
				err := call(ctx, "/pkg.Svc/Get", nil, nil, nil, failing)
				var ge *grpcbackoff.Error
				if !errors.As(err, &ge) || ge.Reason != grpcbackoff.ReasonThrottled {
					t.Fatalf("round %d: %v, want throttled", round, err)
				}
				paid += ge.Attempts - 1
			}
		}
		now = now.Add(45 * time.Second)
	}
	// At most a young budget's MinReserve 100 and Burst 10, and PerSecond's
	// 0.5/s over 3 × 45 s (67); a lease pays only what was asked for at the
	// renewal before (the refused retries of the round before).
	if paid == 0 || paid > 110+68 {
		t.Errorf("the two processes retried %d times, want at most 178 (one process's budget), not twice", paid)
	}
	t.Logf("%d retries paid in all", paid)
}
