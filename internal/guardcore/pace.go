package guardcore

import (
	"slices"
	"sync"
	"sync/atomic"
)

// A schedule hands out the times of paced retries, each at least a spacing
// from every other one taken: the earliest such time at or after the time
// asked for, so that a retry asked to come later leaves the earlier times
// to others, and a smaller spacing lets new times in between the old ones
// at once. It keeps the times from a spacing before now on, in order, and
// takes a lock, on failures only; its zero value has every time free.
type schedule struct {
	mu sync.Mutex
	at []int64 // the times taken, in nanoseconds since the Core was made
}

// slot takes the earliest free time at or after from (itself at or after
// now), spacing from the others, and returns the wait from now until it;
// or, if that wait would be more than limit, takes none and returns false.
// A spacing of 0 takes nothing: every time is free.
func (s *schedule) slot(now, from, spacing, limit int64) (wait int64, ok bool) {
	if spacing <= 0 {
		return from - now, from-now <= limit
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	past, _ := slices.BinarySearch(s.at, now-spacing)
	s.at = s.at[past:]
	t := from
	i, _ := slices.BinarySearch(s.at, t-spacing+1) // the first time too near t, or after it
	for ; i < len(s.at) && s.at[i] < t+spacing; i++ {
		t = s.at[i] + spacing
	}
	if t-now > limit {
		return 0, false
	}
	s.at = slices.Insert(s.at, i, t)
	return t - now, true
}

// paces is a method's schedules, one per rank, each made on first need.
type paces [Ranks]atomic.Pointer[schedule]

// of returns rank r's schedule.
func (p *paces) of(r Rank) *schedule {
	if s := p[r].Load(); s != nil {
		return s
	}
	p[r].CompareAndSwap(nil, &schedule{})
	return p[r].Load()
}
