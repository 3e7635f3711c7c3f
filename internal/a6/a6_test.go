package a6

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// TestPolicyWaitsAsGRPC: the Policy's delay before retry n spans grpc-go's,
// b·[0.8, 1.2] with b = min(initial·mult^n, maxBackoff), for the owners'
// policy (10 ms ×2 up to 100 ms) and for an initialBackoff above
// maxBackoff, which grpc-go caps at once.
func TestPolicyWaitsAsGRPC(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		initial, max time.Duration
		nominal      []time.Duration
	}{
		{10 * ms, 100 * ms, []time.Duration{10 * ms, 20 * ms, 40 * ms, 80 * ms, 100 * ms, 100 * ms}},
		{2 * time.Second, time.Second, []time.Duration{time.Second, time.Second}},
	} {
		p := Policy(4, c.initial, c.max, 2, []codes.Code{codes.Unavailable})
		if err := p.Validate(); err != nil {
			t.Fatalf("Policy(%v, %v): %v", c.initial, c.max, err)
		}
		for n, b := range c.nominal {
			if got := p.Nominal(n); got != b {
				t.Errorf("Policy(%v, %v).Nominal(%d) = %v, want %v", c.initial, c.max, n, got, b)
			}
			lo, hi := time.Duration(float64(b)*0.8), time.Duration(float64(b)*1.2)
			for range 100 {
				if d := p.Backoff(n); d < lo || d > hi {
					t.Fatalf("Policy(%v, %v).Backoff(%d) = %v, want %v to %v", c.initial, c.max, n, d, lo, hi)
				}
			}
		}
	}
}
