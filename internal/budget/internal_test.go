package budget

import (
	"testing"
	"time"

	"github.com/platformkit/grpcbackoff"
)

// TestBudgetStopsCountingWhenFull checks the point of Budget.full: calls
// started while the budget is full write nothing shared, and a budget that
// calls alone refill is seen to be full again without an Allow.
func TestBudgetStopsCountingWhenFull(t *testing.T) {
	b, err := New(grpcbackoff.DefaultThrottle(), time.Now()) // Ratio 0.1, Burst 10
	if err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		b.Started()
	}
	if n := b.started.Load(); n != 0 {
		t.Fatalf("a full budget counted %d calls, want 0", n)
	}

	b.mu.Lock()
	b.acc.pool = 9 * Token // as after one Allow
	b.full.Store(false)
	b.mu.Unlock()
	// Ten calls refill the token, but they are credited only every
	// creditEvery calls (or at the next Allow or Tokens).
	for range creditEvery - 1 {
		b.Started()
	}
	if b.full.Load() {
		t.Fatalf("full after %d calls, want not yet credited", creditEvery-1)
	}
	b.Started()
	if !b.full.Load() {
		t.Fatalf("not full after %d calls (%v µtokens), want full", creditEvery, b.acc.pool)
	}
	for range 1000 {
		b.Started()
	}
	if n := b.started.Load(); n != creditEvery {
		t.Errorf("started = %d after the budget was full again, want %d", n, creditEvery)
	}
}
