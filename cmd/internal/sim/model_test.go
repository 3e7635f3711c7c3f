package sim

import (
	"testing"
	"time"
)

func TestLatency(t *testing.T) {
	m := DefaultModel()
	cases := []struct {
		concurrency int
		want        time.Duration
	}{
		{0, 100 * time.Millisecond},
		{30, 100 * time.Millisecond},
		{45, 105 * time.Millisecond},
		{60, 110250 * time.Microsecond},
		{1e9, maxLatency},
	}
	for _, tc := range cases {
		got := m.Latency(tc.concurrency)
		if d := got - tc.want; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("Latency(%d) = %v, want %v", tc.concurrency, got, tc.want)
		}
	}
}
