package grpcbackoff

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
)

// AdaptiveThrottle configures adaptive client-side throttling, as described
// in Google's SRE book ("Handling Overload"): a client that sees its backend
// refuse or fail to answer most of its recent requests stops sending some of
// them, and fails them locally instead, with probability
//
//	max(0, (requests − K·accepts) / (requests + 1))
//
// where requests counts the requests that ended over the last Window (those
// rejected locally included) and accepts those the backend accepted. While the backend accepts at least 1/K of the requests nothing is
// rejected; past that, the client sends about K times what the backend
// accepts, so that it keeps learning when the backend comes back.
//
// Which outcomes are accepted (see Accepted): any answer the backend chose to
// send, OK or an application error (NOT_FOUND, INVALID_ARGUMENT, INTERNAL,
// ...). Not accepted: UNAVAILABLE and RESOURCE_EXHAUSTED (the backend, or the
// transport, refused the request) and DEADLINE_EXCEEDED, which covers both
// attempts cut by their own timeout and calls that ran out of the caller's
// deadline: no answer came in time. CANCELED is not accepted either (the
// caller gave up; the backend did not answer). A request rejected locally is
// counted as a request and never as accepted.
type AdaptiveThrottle struct {
	// K is the multiplier of accepts: the client sends up to K times as many
	// requests as the backend accepts. It must be a finite number ≥ 1;
	// lower is more aggressive. Default 2.
	K float64
	// Window is how far back requests and accepts are counted, in 120
	// buckets of Window/120 each. It must be at least 1 s. Default 2 min.
	Window time.Duration
}

// DefaultAdaptiveThrottle returns the SRE book's setting: K 2 over 2 minutes.
func DefaultAdaptiveThrottle() AdaptiveThrottle {
	return AdaptiveThrottle{K: 2, Window: 2 * time.Minute}
}

// Validate reports every field that makes a unusable, each with its value.
func (a AdaptiveThrottle) Validate() error {
	var errs []error
	if !(a.K >= 1) || math.IsInf(a.K, 0) {
		errs = append(errs, fmt.Errorf("grpcbackoff: AdaptiveThrottle.K (%v) must be a finite number ≥ 1", a.K))
	}
	if a.Window < time.Second {
		errs = append(errs, fmt.Errorf("grpcbackoff: AdaptiveThrottle.Window (%v) must be at least 1s", a.Window))
	}
	return errors.Join(errs...)
}

// Accepted reports whether an attempt that ended with code c counts as
// accepted by the backend (see AdaptiveThrottle): every code but
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

// Adaptive is the running state of an AdaptiveThrottle: counts of requests
// and accepts over the recent window, in a ring of buckets. Time is an
// argument of every method, so that it can be driven by a virtual clock. It
// is safe for concurrent use.
//
// Allow and Record cost a few atomic operations and allocate nothing; a
// mutex is taken only when time enters a new bucket. Times before the
// current bucket count in the current bucket; times must be after 1970 (the
// buckets are numbered from the Unix epoch).
type Adaptive struct {
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

// NewAdaptive returns the state of a, with nothing counted, or a's
// validation error.
func NewAdaptive(a AdaptiveThrottle) (*Adaptive, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	return &Adaptive{k: a.K, width: int64(a.Window / adaptiveBuckets)}, nil
}

// Allow reports whether to send a request at time now. u is a uniform draw
// in [0, 1): the request is rejected when u is less than RejectProbability.
// A rejected request counts as a request not accepted; one allowed is
// counted when Record is told how it ended.
//
// Counting sent requests at their end rather than at Allow keeps requests
// still in flight out of the ratio: otherwise a client starting many calls
// at once, with no accepts counted yet, would reject its own calls.
func (a *Adaptive) Allow(now time.Time, u float64) bool {
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
func (a *Adaptive) Record(now time.Time, accepted bool) {
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
func (a *Adaptive) RejectProbability(now time.Time) float64 {
	a.bucket(now)
	return a.probability(a.requests.Load(), a.accepts.Load())
}

// Counts returns the requests and accepts counted over the window at time now.
func (a *Adaptive) Counts(now time.Time) (requests, accepts int64) {
	a.bucket(now)
	return a.requests.Load(), a.accepts.Load()
}

func (a *Adaptive) probability(requests, accepts int64) float64 {
	p := (float64(requests) - a.k*float64(accepts)) / float64(requests+1)
	return max(p, 0)
}

// bucket returns the bucket for now, first emptying the buckets that left
// the window if now is in a new bucket.
func (a *Adaptive) bucket(now time.Time) *adaptiveBucket {
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
func (a *Adaptive) advance(n int64) {
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
