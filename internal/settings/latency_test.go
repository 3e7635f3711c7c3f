package settings

import (
	"sync"
	"testing"
	"time"
)

func TestLatencyBuckets(t *testing.T) {
	// Every latency lies in its bucket, whose width is at most 1/8 of its
	// lower bound (past the first 8 ns), and buckets increase with latency.
	prev := -1
	for _, d := range []time.Duration{0, 1, 7, 8, 9, 15, 16, 17, 1000, time.Microsecond, 9 * time.Millisecond,
		10 * time.Millisecond, 11 * time.Millisecond, time.Second, time.Minute, 4 * time.Minute} {
		b := latencyBucket(d)
		if b < prev {
			t.Errorf("bucket(%v) = %d, below the bucket of a shorter latency (%d)", d, b, prev)
		}
		prev = b
		upper := latencyUpper(b)
		lower := time.Duration(0)
		if b > 0 {
			lower = latencyUpper(b - 1)
			if b == 3<<latencySubBits { // after the unused buckets 8..23
				lower = 8
			}
		}
		if d < lower || d >= upper {
			t.Errorf("%v is in bucket %d = [%v, %v)", d, b, lower, upper)
		}
		if d >= 8 && float64(upper-lower) > float64(lower)/8 {
			t.Errorf("bucket %d = [%v, %v) is wider than 1/8", b, lower, upper)
		}
	}
	if b := latencyBucket(time.Hour); b != latencyBuckets-1 {
		t.Errorf("bucket(1h) = %d, want the last one (%d)", b, latencyBuckets-1)
	}
	if b := latencyBucket(-time.Second); b != 0 {
		t.Errorf("bucket(-1s) = %d, want 0", b)
	}
}

func TestLatencyTracker(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// upper(d) is the upper bound of d's bucket, what quantile returns.
	upper := func(d time.Duration) time.Duration { return latencyUpper(latencyBucket(d)) }
	type rec struct {
		at time.Duration // after t0
		d  time.Duration
		n  int
	}
	cases := []struct {
		name     string
		window   time.Duration
		recs     []rec
		at       time.Duration
		q        float64
		minCount uint64
		want     time.Duration
		wantOK   bool
	}{
		{"empty", time.Second, nil, 0, 0.5, 1, 0, false},
		{"too few", time.Second, []rec{{0, 10 * msec, 99}}, 0, 0.95, 100, 0, false},
		{"enough", time.Second, []rec{{0, 10 * msec, 100}}, 0, 0.95, 100, upper(10 * msec), true},
		{"p95 of 94 fast, 6 slow", time.Second, []rec{{0, 10 * msec, 94}, {0, time.Second, 6}}, 0, 0.95, 1, upper(time.Second), true},
		{"p95 of 95 fast, 5 slow", time.Second, []rec{{0, 10 * msec, 95}, {0, time.Second, 5}}, 0, 0.95, 1, upper(10 * msec), true},
		{"p50 in the middle", time.Second, []rec{{0, 1 * msec, 10}, {0, 2 * msec, 10}, {0, 4 * msec, 10}}, 0, 0.5, 1, upper(2 * msec), true},
		{"old slots slide out", time.Second, []rec{{0, time.Second, 100}, {time.Second, 10 * msec, 10}}, time.Second, 0.95, 1, upper(10 * msec), true},
		{"within the window", time.Second, []rec{{0, time.Second, 100}, {750 * msec, 10 * msec, 10}}, 750 * msec, 0.5, 1, upper(time.Second), true},
		{"a quarter later, the first slot is gone", time.Second, []rec{{0, time.Second, 100}, {750 * msec, 10 * msec, 10}}, 1000 * msec, 0.5, 1, upper(10 * msec), true},
		{"all gone after a long pause", time.Second, []rec{{0, time.Second, 100}}, time.Hour, 0.5, 1, 0, false},
		{"a clock going back counts in the current slot", time.Second, []rec{{500 * msec, 10 * msec, 10}, {0, time.Second, 30}}, 500 * msec, 0.5, 1, upper(time.Second), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := newLatencyTracker(tc.window)
			for _, r := range tc.recs {
				for range r.n {
					tr.record(t0.Add(r.at), r.d)
				}
			}
			got, ok := tr.quantile(t0.Add(tc.at), tc.q, tc.minCount)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("quantile = %v, %v; want %v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestLatencyTrackerConcurrent(t *testing.T) {
	tr := newLatencyTracker(time.Minute)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 1000 {
				tr.record(now, 10*msec)
				tr.quantile(now, 0.9, 1)
			}
		})
	}
	wg.Wait()
	if tr.n != 4000 {
		t.Errorf("%d latencies counted, want 4000", tr.n)
	}
}

func TestLatencyTrackerAllocatesNothing(t *testing.T) {
	tr := newLatencyTracker(time.Minute)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	allocs := testing.AllocsPerRun(100, func() {
		now = now.Add(time.Second)
		tr.record(now, 10*msec)
		tr.quantile(now, 0.95, 1)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per record and quantile, want 0", allocs)
	}
}

const msec = time.Millisecond
