package guardcore

import "sync/atomic"

// A schedule hands out the times of paced retries, one slot at a time, in
// nanoseconds since the Core was made. Its zero value has every slot free.
type schedule struct {
	next atomic.Int64 // the first free slot
}

// slot takes the first free slot at or after now, the next one then coming
// spacing later, and returns the wait until it; or, if that wait would be
// more than limit, takes none and returns false.
func (s *schedule) slot(now, spacing, limit int64) (wait int64, ok bool) {
	for {
		n := s.next.Load()
		at := max(n, now)
		if at-now > limit {
			return 0, false
		}
		if s.next.CompareAndSwap(n, at+spacing) {
			return at - now, true
		}
	}
}
