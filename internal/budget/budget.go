// Package budget is the running state of a grpcbackoff.Throttle: the retry
// budget that every call through one set of interceptors shares.
//
// Its arithmetic takes the time as an argument (Allow(now), Tokens(now)), so
// that it can be tested, and simulated, without a clock.
package budget

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/platformkit/grpcbackoff"
)

// Budget is the running state of a grpcbackoff.Throttle. It is safe for
// concurrent use.
//
// It holds two pools, and a retry is paid from the reserve first:
//
//   - the long-run pool: Ratio per call started and PerSecond, saved up to
//     Burst; a new budget starts with Burst;
//   - the reserve: Reserve per successful call, each deposit living for the
//     Window (between 9/10 of it and all of it: the window moves in tenths),
//     plus a floor of MinReserve retries, of which no more than MinReserve
//     are paid within one Window, nor since the last success: a quiet spell
//     keeps the floor whole, and an outage, in which nothing succeeds, is
//     paid MinReserve once. The retries it paid count against it for the
//     Window too.
//
// Started and Succeeded are on every call's path. Started writes no shared
// memory while the long-run pool is known to be full and is otherwise a
// single atomic addition. Succeeded is a single atomic addition to one of
// Stripes counters, each on a cache line of its own: a caller that keeps
// to one stripe per processor (SucceededOn) writes no line another
// processor writes; every datingEvery successes on a stripe it reads the
// clock to date those since the last dating. Both are allocation-free. The
// counts are turned into tokens under a mutex by Allow and Tokens, the slow
// path.
type Budget struct {
	t         grpcbackoff.Throttle
	noReserve bool // Reserve and MinReserve are 0: successes are not counted

	full atomic.Bool // the long-run pool holds Burst; set and cleared under mu; read by every call
	_    [64]byte    // the counters below are written: keep them off full's cache line

	started atomic.Int64 // calls started while the long-run pool was not full
	_       [64]byte

	succeeded [Stripes]stripe // successful calls, turned into deposits when dated

	clock func() time.Time

	mu       sync.Mutex
	tokens   float64   // the long-run pool, at most Burst
	credited int64     // value of started already turned into tokens
	last     time.Time // the latest time seen; PerSecond is credited up to it

	created time.Time        // the budget's start: the tenths of the Window count from it
	floor   float64          // retries the floor paid since the last success was put in buckets
	seen    time.Time        // when successes were last put in buckets
	counted int64            // successes already put in buckets
	width   time.Duration    // a tenth of the Window
	buckets [nBuckets]bucket // the reserve's Window, in tenths
}

// Stripes is the number of counters of successes.
const Stripes = 32

// stripe is a counter of successes on a cache line of its own.
type stripe struct {
	n atomic.Int64
	_ [56]byte
}

// nBuckets is the number of parts of the reserve's Window.
const nBuckets = 10

// bucket is one tenth of the reserve's Window: the successes attributed to
// it, what is left of their earnings, and the retries MinReserve paid in it.
type bucket struct {
	index  int64   // which tenth since the budget's start; stale if not current
	earned float64 // successful calls attributed to this tenth
	left   float64 // Reserve·earned less the retries it paid
	floor  float64 // retries MinReserve paid in this tenth
}

// creditEvery is how many uncredited calls make Started credit them, so that
// a long-run pool refilled by calls alone is seen to be full again without
// waiting for the next Allow.
const creditEvery = 64

// datingEvery is how many successes on one stripe make Succeeded date them:
// a success is dated at the latest datingEvery successes on each stripe
// (Stripes·datingEvery in all, or an Allow or Tokens) after it, so that a
// burst of traffic after a quiet spell is counted in the Window it fell
// in, at the cost of one clock read every datingEvery calls.
const datingEvery = 64

// Revived returns a budget for t as a target's budget comes back after it
// was dropped for disuse: its long-run pool full, no success in its Window
// and its floor paid, until a call succeeds. Then the floor of an outage
// under way is not paid twice.
func Revived(t grpcbackoff.Throttle, now time.Time) (*Budget, error) {
	b, err := New(t, now)
	if err == nil {
		b.floor = float64(t.MinReserve)
	}
	return b, err
}

// NewWithClock is New for a budget that starts at clock() and reads clock
// where it reads the time itself (to date successes), as a simulation
// needs.
func NewWithClock(t grpcbackoff.Throttle, clock func() time.Time) (*Budget, error) {
	b, err := New(t, clock())
	if err == nil {
		b.clock = clock
	}
	return b, err
}

// New returns a budget for t that starts at now, with its long-run pool
// full, or t's validation error.
func New(t grpcbackoff.Throttle, now time.Time) (*Budget, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	b := &Budget{t: t, noReserve: t.Reserve == 0 && t.MinReserve == 0, tokens: float64(t.Burst), created: now, last: now, seen: now, clock: time.Now,
		width: max(t.Window/nBuckets, 1)} // 1 ns: no reserve, the buckets are unused
	b.full.Store(true)
	return b, nil
}

// Started records that a call started (its first attempt).
//
// A call that finds the long-run pool full is not counted. That gives the
// same tokens as counting it: had it been counted, the next refill would
// have added its Ratio to a full pool and capped it away. (Allow clears full
// after that refill and before it spends a token, so a call that still saw
// full is ordered before the spending.)
func (b *Budget) Started() {
	if b.full.Load() || b.t.Ratio == 0 {
		return
	}
	if b.started.Add(1)%creditEvery == 0 && b.mu.TryLock() {
		b.creditCalls()
		b.mu.Unlock()
	}
}

// Succeeded records that a call succeeded, which feeds the reserve. The
// successes since the last dating are spread evenly over the time since it.
func (b *Budget) Succeeded() { b.SucceededOn(0) }

// SucceededOn is Succeeded, counted on stripe i (taken modulo Stripes).
func (b *Budget) SucceededOn(i int) {
	if b.noReserve {
		return
	}
	if b.succeeded[uint(i)%Stripes].n.Add(1)%datingEvery == 0 {
		b.date()
	}
}

// date puts the successes counted so far in their tenths of the Window,
// unless another goroutine holds the mutex (it will).
func (b *Budget) date() {
	if b.mu.TryLock() {
		b.observe(b.advance(b.clock()))
		b.mu.Unlock()
	}
}

// Allow reports whether a retry may be sent at time now, and if so pays for
// it: from the reserve if it can, else from the long-run pool.
func (b *Budget) Allow(now time.Time) bool { return b.allow(now, true) }

// AllowLongRun is Allow for a retry the reserve does not pay for: it reports
// whether the long-run pool can pay for it at time now, and if so pays.
func (b *Budget) AllowLongRun(now time.Time) bool { return b.allow(now, false) }

func (b *Budget) allow(now time.Time, reserve bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now = b.advance(now)
	b.creditCalls()
	k := b.observe(now)
	if reserve && b.reserve(k) >= 1 {
		b.spend(k)
		return true
	}
	if b.tokens < 1 {
		return false
	}
	b.full.Store(false)
	b.tokens--
	return true
}

// Tokens returns the retries the budget could pay for at time now: the
// reserve's and the long-run pool's.
func (b *Budget) Tokens(now time.Time) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	now = b.advance(now)
	b.creditCalls()
	return b.reserve(b.observe(now)) + b.tokens
}

// advance returns the time the budget is at: now, or the latest time seen
// if now is earlier (callers on other goroutines read the clock a moment
// apart). It credits PerSecond for the time passed.
func (b *Budget) advance(now time.Time) time.Time {
	if !now.After(b.last) {
		return b.last
	}
	b.tokens += now.Sub(b.last).Seconds() * b.t.PerSecond
	b.last = now
	return now
}

// creditCalls turns the calls counted since the last credit into tokens, caps
// the tokens at Burst and records whether the pool is full. b.mu is held.
// Only additions happen between two credits (advance adds PerSecond), so
// capping once here gives the same result as capping after each one.
func (b *Budget) creditCalls() {
	started := b.started.Load()
	b.tokens += float64(started-b.credited) * b.t.Ratio
	b.credited = started
	b.tokens = min(b.tokens, float64(b.t.Burst))
	b.full.Store(b.tokens >= float64(b.t.Burst))
}

// index returns the tenth of the Window that holds time t.
func (b *Budget) index(t time.Time) int64 { return int64(t.Sub(b.created) / b.width) }

// at returns the bucket of tenth k, emptied if it held an older tenth.
func (b *Budget) at(k int64) *bucket {
	bk := &b.buckets[k%nBuckets]
	if bk.index != k {
		*bk = bucket{index: k}
	}
	return bk
}

// observe puts the successes counted since the last observation into the
// buckets, spread evenly over the time from the previous observation (or
// the start) to now, keeping only the part inside the Window. It returns
// now's tenth. b.mu is held; now is the latest time seen.
func (b *Budget) observe(now time.Time) int64 {
	k := b.index(now)
	if b.t.Reserve == 0 && b.t.MinReserve == 0 {
		return k
	}
	var total int64
	for i := range b.succeeded {
		total += b.succeeded[i].n.Load()
	}
	n := total - b.counted
	b.counted = total
	if n > 0 {
		b.floor = 0 // a success: the floor is paid anew
	}
	// The successes happened at unknown times since the previous
	// observation: spread them evenly over that span.
	from := b.seen
	b.seen = now
	span := now.Sub(from)
	switch {
	case n == 0:
		return k
	case span <= 0:
		b.earn(k, float64(n))
		return k
	}
	// In offsets from the start, to compare them as durations.
	f, t := from.Sub(b.created), now.Sub(b.created)
	for j := max(b.index(from), k-nBuckets+1); j <= k; j++ {
		lo := max(time.Duration(j)*b.width, f)
		hi := min(time.Duration(j+1)*b.width, t)
		if hi > lo {
			b.earn(j, float64(n)*float64(hi-lo)/float64(span))
		}
	}
	return k
}

// earn attributes n successes to tenth j.
func (b *Budget) earn(j int64, n float64) {
	bk := b.at(j)
	bk.earned += n
	bk.left += b.t.Reserve * n
}

// live calls f on each bucket of the Window that ends with tenth k, oldest
// first.
func (b *Budget) live(k int64, f func(*bucket)) {
	for j := max(k-nBuckets+1, 0); j <= k; j++ {
		if bk := &b.buckets[j%nBuckets]; bk.index == j {
			f(bk)
		}
	}
}

// reserve returns the retries the reserve can pay for in tenth k: what is
// left of the earnings of the Window's successes, plus what is left of
// MinReserve, less the larger of the retries the floor paid in the Window
// and since the last success.
func (b *Budget) reserve(k int64) float64 {
	if b.t.Reserve == 0 && b.t.MinReserve == 0 {
		return 0
	}
	var left, floor float64
	b.live(k, func(bk *bucket) {
		left += bk.left
		floor += bk.floor
	})
	return left + max(float64(b.t.MinReserve)-max(floor, b.floor), 0)
}

// spend pays one retry in tenth k from the reserve, which can pay it: from
// the oldest earnings first, those closest to expiring, then from
// MinReserve.
func (b *Budget) spend(k int64) {
	cost := 1.0
	b.live(k, func(bk *bucket) {
		paid := min(bk.left, cost)
		bk.left -= paid
		cost -= paid
	})
	if cost > 0 {
		b.at(k).floor += cost
		b.floor += cost
	}
}
