package guardcore

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestExpected checks the ring of expected retries: failures let through
// are expected until a retry matches them, the oldest first, or until they
// are horizon buckets old.
func TestExpected(t *testing.T) {
	t.Run("matched", func(t *testing.T) {
		var x Expected
		for range 3 {
			x.let(5)
		}
		for i := range 4 {
			if got, want := x.arrive(6), i < 3; got != want {
				t.Errorf("retry %d: arrive = %v, want %v", i, got, want)
			}
		}
		if n := x.sum(6); n != 0 {
			t.Errorf("sum = %d after every failure's retry came, want 0", n)
		}
	})
	t.Run("oldest first", func(t *testing.T) {
		var x Expected
		x.let(1)
		x.let(3)
		x.arrive(4)
		// Epoch 1 has left the horizon at 6: had the retry matched epoch
		// 3's failure, nothing would be expected.
		if n := x.sum(6); n != 1 {
			t.Errorf("sum(6) = %d, want 1: the retry matches the oldest failure", n)
		}
	})
	t.Run("expires", func(t *testing.T) {
		var x Expected
		x.let(0)
		if n := x.sum(horizon - 1); n != 1 {
			t.Errorf("sum(%d) = %d, want 1", horizon-1, n)
		}
		if n := x.sum(horizon); n != 0 {
			t.Errorf("sum(%d) = %d, want 0: a failure let through %d buckets ago is expected no more", horizon, n, horizon)
		}
		if x.arrive(horizon) {
			t.Error("a retry after the horizon matched an expired failure")
		}
	})
	t.Run("slot reused", func(t *testing.T) {
		var x Expected
		x.let(0)
		x.let(0)
		x.let(buckets)
		if n, gone := x.sum(buckets), x.expired(buckets); n != 1 || gone != 0 {
			t.Errorf("sum, expired = %d, %d; want 1, 0: the slot's old epoch starts from zero", n, gone)
		}
	})
	t.Run("expired", func(t *testing.T) {
		// Three failures at 0, one retried; one at 2: past the horizon the
		// two of 0 whose retries never came are calls that ended, until
		// the window leaves epoch 0.
		var x Expected
		for range 3 {
			x.let(0)
		}
		x.arrive(1)
		x.let(2)
		for _, tc := range []struct{ at, pending, expired int64 }{
			{horizon - 1, 3, 0}, {horizon, 1, 2}, {horizon + 2, 0, 3}, {buckets, 0, 1}, {buckets + 2, 0, 0},
		} {
			if p, g := x.sum(tc.at), x.expired(tc.at); p != tc.pending || g != tc.expired {
				t.Errorf("at %d: sum, expired = %d, %d; want %d, %d", tc.at, p, g, tc.pending, tc.expired)
			}
		}
		if n := x.lets(2); n != 4 {
			t.Errorf("lets(2) = %d, want 4", n)
		}
	})
}

// TestExpectedConcurrent: 8 goroutines let 1000 failures through each in
// epochs 10 and 11, while 8 others send 900 retries each in epoch 12: every
// retry finds a failure to match, none matches one twice, and 800 remain
// expected.
func TestExpectedConcurrent(t *testing.T) {
	var x Expected
	var wg sync.WaitGroup
	var matched atomic.Int64
	for g := range 8 {
		wg.Go(func() {
			for range 1000 {
				x.let(10 + int64(g%2))
			}
		})
	}
	wg.Wait()
	for range 8 {
		wg.Go(func() {
			for range 900 {
				if x.arrive(12) {
					matched.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n, s := matched.Load(), x.sum(12); n != 7200 || s != 800 {
		t.Errorf("%d retries matched, %d expected; want 7200 and 800", n, s)
	}
}
