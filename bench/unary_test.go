package bench

import (
	"context"
	"testing"
)

// TestMechanisms checks that every mechanism is set up as the benchmarks
// say: one attempt for a call that succeeds, two for a flaky one, so that
// the benchmarks compare equal work.
func TestMechanisms(t *testing.T) {
	ctx := t.Context()
	for _, s := range []setting{defaults, fast} {
		for _, m := range newMechs(t, s, unaryNames...) {
			srv.reset()
			start := srv.attempts.Load()
			if err := m.unary(ctx, successRequest()); err != nil {
				t.Fatalf("%s (setting %d): unary: %v", m.name, s, err)
			}
			if got := srv.attempts.Load() - start; got != 1 {
				t.Errorf("%s (setting %d): unary made %d attempts, want 1", m.name, s, got)
			}
			if s != fast {
				continue
			}
			start = srv.attempts.Load()
			if err := m.unaryRetried(ctx, flakyRequest()); err != nil {
				t.Fatalf("%s: flaky unary: %v", m.name, err)
			}
			if got := srv.attempts.Load() - start; got != 2 {
				t.Errorf("%s: flaky unary made %d attempts, want 2", m.name, got)
			}
		}
	}
}

// BenchmarkUnary is a successful unary call.
func BenchmarkUnary(b *testing.B) {
	ms := newMechs(b, defaults, unaryNames...)
	for _, i := range order(b, len(ms)) {
		m := ms[i]
		b.Run("mech="+m.name, func(b *testing.B) {
			ctx, req := context.Background(), successRequest()
			op := func() error { return m.unary(ctx, req) }
			warmUp(b, 100, op)
			b.ReportAllocs()
			for b.Loop() {
				if err := op(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkUnaryRetry is a unary call whose first attempt fails with
// UNAVAILABLE and whose second succeeds, with every backoff 1 ns. The bare
// column makes the two calls itself: the limit of a call retried once.
func BenchmarkUnaryRetry(b *testing.B) {
	ms := newMechs(b, fast, unaryNames...)
	for _, i := range order(b, len(ms)) {
		m := ms[i]
		b.Run("mech="+m.name, func(b *testing.B) {
			ctx, req := context.Background(), flakyRequest()
			op := func() error { return m.unaryRetried(ctx, req) }
			srv.reset()
			warmUp(b, 100, op)
			b.ReportAllocs()
			for b.Loop() {
				if err := op(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkUnaryParallel is BenchmarkUnary from 4 goroutines per core,
// sharing one connection and so, for ours, one throttle.
func BenchmarkUnaryParallel(b *testing.B) {
	ms := newMechs(b, defaults, unaryNames...)
	for _, i := range order(b, len(ms)) {
		m := ms[i]
		b.Run("mech="+m.name, func(b *testing.B) {
			ctx, req := context.Background(), successRequest()
			warmUp(b, 100, func() error { return m.unary(ctx, req) })
			b.ResetTimer()
			b.ReportAllocs()
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				ctx, req := context.Background(), successRequest()
				for pb.Next() {
					if err := m.unary(ctx, req); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
