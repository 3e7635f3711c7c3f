package settings

import (
	"math/bits"
	"sync"
	"time"
)

// latencyTracker keeps the latencies of a method's recent calls, to find a
// quantile of them: the adaptive delay of hedging. It is a histogram of
// fixed log-scale buckets, eight per power of two of nanoseconds (so a
// bucket is at most 1/8 wide relative to its lower bound), over a window that
// slides in slots of a quarter of it. Recording and reading take a mutex,
// allocate nothing, and cost a few hundred additions at most. Its zero value
// is not usable: see newLatencyTracker.
type latencyTracker struct {
	slot time.Duration // width of a slot: window/slots

	mu     sync.Mutex
	epoch  int64 // the slot number (time / slot) of slots[epoch%slots]
	counts [latencySlots][latencyBuckets]uint32
	total  [latencyBuckets]uint32 // sum of counts over the slots
	n      uint64                 // sum of total
}

const (
	latencySlots   = 4
	latencySubBits = 3 // 2^3 buckets per power of two
	// latencyBuckets covers 0 to 2^38 ns (about 275 s); longer latencies
	// count in the last bucket.
	latencyBuckets = 38 << latencySubBits
)

func newLatencyTracker(window time.Duration) *latencyTracker {
	return &latencyTracker{slot: max(window/latencySlots, 1), epoch: -1}
}

// latencyBucket returns the bucket of d: for d in [2^k, 2^(k+1)) ns with
// k ≥ 3, bucket 8k + the next three bits of d below its top bit.
func latencyBucket(d time.Duration) int {
	if d < 1<<latencySubBits {
		return max(0, int(d))
	}
	k := bits.Len64(uint64(d)) - 1
	sub := int(uint64(d)>>(k-latencySubBits)) & (1<<latencySubBits - 1)
	return min(k<<latencySubBits|sub, latencyBuckets-1)
}

// latencyUpper returns the upper bound (exclusive) of bucket b.
func latencyUpper(b int) time.Duration {
	switch {
	case b < 1<<latencySubBits:
		return time.Duration(b + 1)
	case b < latencySubBits<<latencySubBits: // no latency falls here
		return 1 << latencySubBits
	}
	k, sub := b>>latencySubBits, b&(1<<latencySubBits-1)
	return time.Duration(uint64(1<<latencySubBits+sub+1) << (k - latencySubBits))
}

// advance drops the slots that fell out of the window at now. t.mu is held.
func (t *latencyTracker) advance(now time.Time) {
	e := now.UnixNano() / int64(t.slot)
	if e <= t.epoch {
		return // the same slot, or a clock that went back: keep counting here
	}
	for i := t.epoch + 1; i <= e && i <= t.epoch+latencySlots; i++ {
		s := &t.counts[i%latencySlots]
		for b, c := range s {
			if c != 0 {
				t.total[b] -= c
				t.n -= uint64(c)
			}
		}
		*s = [latencyBuckets]uint32{}
	}
	t.epoch = e
}

// record counts a call that took d, ending at now.
func (t *latencyTracker) record(now time.Time, d time.Duration) {
	b := latencyBucket(d)
	t.mu.Lock()
	t.advance(now)
	if t.total[b] != ^uint32(0) {
		t.counts[t.epoch%latencySlots][b]++
		t.total[b]++
		t.n++
	}
	t.mu.Unlock()
}

// quantile returns the latency that a share q (in (0, 1)) of the calls of
// the window ending at now did not exceed, rounded up to its bucket's upper
// bound, and false while the window holds fewer than minCount calls.
func (t *latencyTracker) quantile(now time.Time, q float64, minCount uint64) (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(now)
	if t.n == 0 || t.n < minCount {
		return 0, false
	}
	// The rank, from 1, of the sample at quantile q: ⌈q·n⌉.
	rank := uint64(q * float64(t.n))
	if float64(rank) < q*float64(t.n) {
		rank++
	}
	rank = max(rank, 1)
	var seen uint64
	for b, c := range t.total {
		seen += uint64(c)
		if seen >= rank {
			return latencyUpper(b), true
		}
	}
	return latencyUpper(latencyBuckets - 1), true
}
