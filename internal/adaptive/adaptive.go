// Package adaptive is the running state of a grpcbackoff.AdaptiveThrottle:
// counts of the requests a backend accepted over a sliding window, from
// which adaptive client-side throttling rejects calls locally.
//
// Its arithmetic takes the time as an argument (Allow(now, u), Record(now,
// ok)), so that the interceptors drive it with the real clock and the
// simulators with a virtual one.
package adaptive

import (
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
)

// Accepted reports whether an attempt that ended with code c counts as
// accepted by the backend (see grpcbackoff.AdaptiveThrottle): every code but
// UNAVAILABLE, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED and CANCELED.
func Accepted(c codes.Code) bool {
	switch c {
	case codes.Unavailable, codes.ResourceExhausted, codes.DeadlineExceeded, codes.Canceled:
		return false
	}
	return true
}

// adaptiveBuckets is the number of buckets of the window.
const adaptiveBuckets = 120

// Limiter is the running state of an AdaptiveThrottle: counts of requests
// and accepts over the recent window, in a ring of buckets. Time is an
// argument of every method, so that it can be driven by a virtual clock. It
// is safe for concurrent use.
//
// Allow and Record cost a few atomic operations and allocate nothing; a
// mutex is taken only when time enters a new bucket. Times before the
// current bucket count in the current bucket; times must be after 1970 (the
// buckets are numbered from the Unix epoch).
type Limiter struct {
	k     float64
	width int64 // nanoseconds per bucket

	cur      atomic.Int64 // number of the current bucket (time / width)
	requests atomic.Int64 // sum over the buckets
	accepts  atomic.Int64 // sum over the buckets
	buckets  [adaptiveBuckets]adaptiveBucket

	mu sync.Mutex // held to move to a new bucket
}

type adaptiveBucket struct {
	requests, accepts atomic.Int64
}

// New returns the state of a, with nothing counted, or a's validation
// error.
func New(a grpcbackoff.AdaptiveThrottle) (*Limiter, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	return &Limiter{k: a.K, width: int64(a.Window / adaptiveBuckets)}, nil
}

// Allow reports whether to send a request at time now. u is a uniform draw
// in [0, 1): the request is rejected when u is less than RejectProbability.
// A rejected request counts as a request not accepted; one allowed is
// counted when Record is told how it ended.
//
// Counting sent requests at their end rather than at Allow keeps requests
// still in flight out of the ratio: otherwise a client starting many calls
// at once, with no accepts counted yet, would reject its own calls.
func (a *Limiter) Allow(now time.Time, u float64) bool {
	b := a.bucket(now)
	if !(u < a.probability(a.requests.Load(), a.accepts.Load())) {
		return true
	}
	b.requests.Add(1)
	a.requests.Add(1)
	return false
}

// Record counts at time now a request that was sent (allowed, or exempt
// from throttling) and how it ended: accepted or not, as Accepted says of
// its code.
func (a *Limiter) Record(now time.Time, accepted bool) {
	b := a.bucket(now)
	b.requests.Add(1)
	if accepted {
		b.accepts.Add(1)
		a.accepts.Add(1)
	}
	a.requests.Add(1)
}

// RejectProbability returns the probability with which Allow would reject a
// request at time now, before counting it.
func (a *Limiter) RejectProbability(now time.Time) float64 {
	a.bucket(now)
	return a.probability(a.requests.Load(), a.accepts.Load())
}

// Counts returns the requests and accepts counted over the window at time now.
func (a *Limiter) Counts(now time.Time) (requests, accepts int64) {
	a.bucket(now)
	return a.requests.Load(), a.accepts.Load()
}

func (a *Limiter) probability(requests, accepts int64) float64 {
	p := (float64(requests) - a.k*float64(accepts)) / float64(requests+1)
	return max(p, 0)
}

// bucket returns the bucket for now, first emptying the buckets that left
// the window if now is in a new bucket.
func (a *Limiter) bucket(now time.Time) *adaptiveBucket {
	n := now.UnixNano() / a.width
	cur := a.cur.Load()
	if n > cur {
		a.advance(n)
		cur = a.cur.Load()
	}
	return &a.buckets[uint64(cur)%adaptiveBuckets]
}

// advance makes n the current bucket, emptying those that left the window.
// A count added concurrently to a bucket being emptied is either subtracted
// now or stays in the bucket until it leaves the window again: the sums stay
// the sums of the buckets.
func (a *Limiter) advance(n int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	cur := a.cur.Load()
	if n <= cur {
		return
	}
	steps := min(n-cur, adaptiveBuckets)
	for i := int64(1); i <= steps; i++ {
		b := &a.buckets[uint64(cur+i)%adaptiveBuckets]
		a.requests.Add(-b.requests.Swap(0))
		a.accepts.Add(-b.accepts.Swap(0))
	}
	a.cur.Store(n)
}
