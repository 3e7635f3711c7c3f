package fleetbudget

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
)

// TestLoneProcess is issue 35's first reproduction, as a new user would try
// it: one process, a real Redis, New with its defaults but the tests'
// prefix, a Retrier with the recipe (its backoff capped at 1 s, to keep
// the test short) and the fleet's budgets, and 10 calls to a server whose
// first two attempts of each call fail. Every call succeeds, as with the
// process's own budget: alone in its fleet it holds the whole Throttle from
// its first renewal, and each retry is paid when its backoff ends, after
// the renewal that asked for it. (Before: 3 of 10 succeeded, "retry
// throttled", its lease holding only what it asked for at its last
// renewal.)
func TestLoneProcess(t *testing.T) {
	addr, _ := server(t)
	for _, after := range []string{"start-up", "a quiet spell"} {
		t.Run(after, func(t *testing.T) {
			l := &logs{}
			fleet, err := New(Options{URL: "redis://" + addr, Prefix: testPrefix(t), Logger: slog.New(slog.NewTextHandler(l, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer fleet.Close()
			p := grpcbackoff.DefaultPolicy()
			p.Max = time.Second
			r, err := interceptor.New(p, fleet.Option())
			if err != nil {
				t.Fatal(err)
			}
			// Each call's first two attempts fail; the interceptor tells the
			// attempt's number in its metadata.
			flaky := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
				md, _ := metadata.FromOutgoingContext(ctx)
				if v := md.Get(interceptor.PreviousAttemptsKey); len(v) == 0 || v[len(v)-1] != "2" {
					return status.Error(codes.Unavailable, "fails two attempts in three")
				}
				return nil
			}
			ok := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
			call := r.Unary()
			if after == "a quiet spell" {
				if err := call(t.Context(), "/pkg.Svc/Get", nil, nil, nil, ok); err != nil {
					t.Fatal(err)
				}
				time.Sleep(2 * period) // renewals that ask for nothing
			}
			var wg sync.WaitGroup
			var failed atomic.Int64
			for range 10 {
				wg.Go(func() {
					if err := call(t.Context(), "/pkg.Svc/Get", nil, nil, nil, flaky); err != nil {
						failed.Add(1)
						t.Log(err)
					}
				})
			}
			wg.Wait()
			// A renewal can time out on a loaded machine (a quarter of its
			// period): the process then spends its share, the whole budget
			// alone, and joins at the next renewal, which is waited for
			// here, three periods at most.
			s := r.States()[0].Shared
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for deadline := time.Now().Add(3 * period); !s.Joined && time.Now().Before(deadline); <-tick.C {
				s = r.States()[0].Shared
			}
			if n := failed.Load(); n != 0 || !s.Joined || s.FleetSize != 1 {
				t.Errorf("after %s: %d of 10 calls failed, state %+v; want none, joined alone (logs: %s)", after, n, s, l)
			}
		})
	}
}
