package bench

import (
	"context"
	"testing"
	"time"

	"github.com/platformkit/grpcbackoff"
)

// The hedged benchmarks measure what hedging costs a call whose first
// attempt answers at once, long before the hedge would be sent: the price
// of being ready to hedge.

// hedgedMethod is the method that mech=ours+hedge hedges.
const hedgedMethod = "/grpc.testing.TestService/UnaryCall"

// hedging is the hedging policy of mech=ours+hedge: a second attempt after
// 1 s, which a call over bufconn (~20 µs) never reaches, even on a machine
// busy with a whole CI run (10 ms was reached there). The delay's length
// costs nothing: the call arms one timer whatever it is.
var hedging = grpcbackoff.Hedging{MaxAttempts: 2, Delay: time.Second}

// hedgedNames are the mechanisms of the hedged benchmarks: ours+hedge beside
// bare and the unhedged ours.
var hedgedNames = []string{bare, ours, oursHedge}

// TestHedgedMechanism checks that a hedged call that succeeds at once sends
// one attempt, as the benchmarks assume.
func TestHedgedMechanism(t *testing.T) {
	m := newMechs(t, defaults, oursHedge)[0]
	for range 10 {
		start := srv.attempts.Load()
		if err := m.unary(t.Context(), successRequest()); err != nil {
			t.Fatalf("hedged unary: %v", err)
		}
		if got := srv.attempts.Load() - start; got != 1 {
			t.Fatalf("hedged unary made %d attempts, want 1", got)
		}
	}
}

// BenchmarkPairedUnaryHedged is BenchmarkPairedUnary for a hedged method
// (MaxAttempts 2, Delay 1 s) whose server answers at once: each op of
// mech=ours+hedge is one bare call and one hedged call.
func BenchmarkPairedUnaryHedged(b *testing.B) {
	ctx, req := context.Background(), successRequest()
	pairedMechs(b, "", newMechs(b, defaults, hedgedNames...), func(m *mech) func() error {
		return func() error { return m.unary(ctx, req) }
	})
}

// BenchmarkIsolatedHedged is BenchmarkIsolated for a hedged method: the
// interceptor alone, with a fake invoker that returns at once.
func BenchmarkIsolatedHedged(b *testing.B) {
	for _, i := range order(b, len(hedgedNames)) {
		name := hedgedNames[i]
		b.Run("opts=static/mech="+name, func(b *testing.B) {
			call, opts := isoMech(name, defaults, "static")
			ctx, req, reply := context.Background(), new(int), new(int)
			op := func() error { return call(ctx, req, reply, succeed, opts) }
			warmUp(b, 1000, op)
			b.ReportAllocs()
			for b.Loop() {
				if err := op(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
