// Package budget is the running state of a grpcbackoff.Throttle: the retry
// budget that every call through one set of interceptors shares, and its
// arithmetic (Account), which a fleet's budget (package lease) shares too.
//
// Its arithmetic takes the time as an argument (Allow(now), Tokens(now)), so
// that it can be tested, and simulated, without a clock.
package budget

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/platformkit/grpcbackoff"
)

// Budget is the running state of a grpcbackoff.Throttle: an Account, and
// the calls started and succeeded that it has not counted yet. It is safe
// for concurrent use.
//
// Started and Succeeded are on every call's path. Started writes no shared
// memory while the long-run pool is known to be full and is otherwise a
// single atomic addition. Succeeded is a single atomic addition to one of
// Stripes counters, each on a cache line of its own: a caller that keeps
// to one stripe per processor (SucceededOn) writes no line another
// processor writes. The first success after the last dating stamps its
// time (a clock read); every datingEvery successes on a stripe date those
// counted, spread over the time since the stamp; and the first of a
// stripe's datingEvery reads the clock, to date them at once if the stamp
// is more than a tenth of the Window old (a quiet spell since). Both are
// allocation-free. The counts are turned into tokens under a mutex by
// Allow and Tokens, the slow path.
type Budget struct {
	p         Params
	noReserve bool // Reserve and MinReserve are 0: successes are not counted

	full atomic.Bool // the long-run pool holds Burst; set and cleared under mu; read by every call
	_    [64]byte    // the counters below are written: keep them off full's cache line

	started atomic.Int64 // calls started while the long-run pool was not full
	_       [64]byte

	pending atomic.Int64 // µs: when the first success not yet dated was counted; 0: none
	_       [64]byte

	succeeded [Stripes]stripe // successful calls, turned into earnings when dated

	clock func() time.Time

	mu       sync.Mutex
	acc      Account
	credited int64 // value of started already credited
	counted  int64 // successes already dated
	seen     int64 // µs: when successes were last dated
}

// Stripes is the number of counters of successes.
const Stripes = 32

// stripe is a counter of successes on a cache line of its own.
type stripe struct {
	n atomic.Int64
	_ [56]byte
}

// creditEvery is how many uncredited calls make Started credit them, so that
// a long-run pool refilled by calls alone is seen to be full again without
// waiting for the next Allow.
const creditEvery = 64

// datingEvery is how many successes on one stripe make Succeeded date them:
// those counted since the last dating are spread over the time since the
// first of them, so that a burst of traffic followed by a quiet spell is
// counted when it happened, at the cost of one clock read every
// datingEvery calls.
const datingEvery = 64

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
	b := &Budget{p: ParamsOf(t, 1), noReserve: t.Reserve == 0 && t.MinReserve == 0, clock: time.Now, seen: now.UnixMicro()}
	b.acc.Make(now.UnixMicro(), b.p, 0)
	b.full.Store(true)
	return b, nil
}

// Saved is what a budget dropped for disuse keeps of itself (Save), to be
// made again as it was (Restored): its long-run pool, and what its floor
// paid since the last success and in the Window. Its earnings are not kept:
// a budget restored has none.
type Saved struct{ pool, since, floor, at int64 }

// Save returns what b is at now, to be Restored later.
func (b *Budget) Save(now time.Time) Saved {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.update(now)
	s := Saved{pool: b.acc.pool, since: b.acc.since, at: n}
	if b.p.Window > 0 {
		b.acc.live(b.acc.Tenth(n, b.p), func(t *Tenth) { s.floor += t.Floor })
	}
	return s
}

// Restored returns a budget for t at now that is s, saved by a budget for
// t: its long-run pool refilled by PerSecond since, its floor still paid
// since the last success, and paid in the Window if s is younger than a
// Window.
func Restored(t grpcbackoff.Throttle, s Saved, now time.Time) (*Budget, error) {
	b, err := New(t, now)
	if err != nil {
		return nil, err
	}
	n := now.UnixMicro()
	b.acc.pool = min(s.pool+perSecond(b.p, n-s.at), b.p.Burst)
	b.acc.since = s.since
	if n-s.at < b.p.Window {
		b.acc.at(0).Floor = s.floor
	}
	b.full.Store(b.acc.pool >= b.p.Burst)
	return b, nil
}

// Started records that a call started (its first attempt).
//
// A call that finds the long-run pool full is not counted. That gives the
// same tokens as counting it: had it been counted, the next credit would
// have added its Ratio to a full pool and capped it away. (Allow clears full
// before it spends a token, so a call that still saw full is ordered
// before the spending.)
func (b *Budget) Started() {
	if b.full.Load() || b.p.Ratio == 0 {
		return
	}
	if b.started.Add(1)%creditEvery == 0 && b.mu.TryLock() {
		b.creditCalls(b.acc.last)
		b.mu.Unlock()
	}
}

// Succeeded records that a call succeeded, which feeds the reserve.
func (b *Budget) Succeeded() { b.SucceededOn(0) }

// SucceededOn is Succeeded, counted on stripe i (taken modulo Stripes).
func (b *Budget) SucceededOn(i int) {
	if b.noReserve {
		return
	}
	switch uint64(b.succeeded[uint(i)%Stripes].n.Add(1)) % datingEvery {
	case 0:
		if b.mu.TryLock() { // else another goroutine is counting them
			b.update(b.clock())
			b.mu.Unlock()
		}
	case 1:
		// The first of a stripe's datingEvery: it stamps its time if no
		// success since the last dating did; if the stamp is old (a quiet
		// spell since), it dates the successes now, so that this one and
		// those after it are not spread over the spell.
		now := b.clock()
		if p := b.pending.Load(); p == 0 {
			b.pending.CompareAndSwap(0, now.UnixMicro())
		} else if now.UnixMicro()-p > width(b.p) && b.mu.TryLock() {
			b.update(now)
			b.mu.Unlock()
		}
	default:
		if b.pending.Load() == 0 {
			// The first success since the last dating (by an Allow, or
			// another stripe): those counted before the next happened
			// after it.
			b.pending.CompareAndSwap(0, b.clock().UnixMicro())
		}
	}
}

// Allow reports whether a retry may be sent at time now, and if so pays for
// it: from the reserve if it can, else from the long-run pool.
func (b *Budget) Allow(now time.Time) bool { return b.allow(now, true) }

// AllowLongRun is Allow for a retry the reserve does not pay for: it reports
// whether the long-run pool can pay for it at time now, and if so pays.
func (b *Budget) AllowLongRun(now time.Time) bool { return b.allow(now, false) }

func (b *Budget) allow(now time.Time, reserve bool) bool {
	_, ok := b.AllowCost(now, !reserve, Token)
	return ok
}

// AllowCost is Allow, or AllowLongRun with longRun, for a retry that costs
// cost µtokens (Cost of the failure's code), and returns what paid for it,
// for Refund (internal/gate prices a retry and gives back one served).
func (b *Budget) AllowCost(now time.Time, longRun bool, cost int64) (Receipt, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.update(now)
	b.full.Store(false)
	// The long-run pool holds Burst at most: a retry that costs more (a
	// RESOURCE_EXHAUSTED one under a Throttle with a Burst of 1 or 2)
	// costs Burst, not a price the budget could never pay.
	cost = min(max(cost, 0), max(b.p.Burst, Token))
	r, ok := b.acc.Pay(n, b.p, !longRun, cost)
	b.full.Store(b.acc.pool >= b.p.Burst)
	return r, ok
}

// Refund gives back, at now, what paid for a retry (AllowCost's receipt)
// that the server then served: see Account.Refund.
func (b *Budget) Refund(now time.Time, r Receipt) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.acc.Refund(b.update(now), b.p, r)
	b.full.Store(b.acc.pool >= b.p.Burst)
}

// Tokens returns the retries the budget could pay for at time now: the
// reserve's and the long-run pool's.
func (b *Budget) Tokens(now time.Time) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return float64(b.acc.Available(b.update(now), b.p)) / Token
}

// update brings the Account to now (or the latest time it saw, if later:
// callers on other goroutines read the clock a moment apart), with the calls
// and successes counted since it last did, and returns that time in µs.
// b.mu is held.
func (b *Budget) update(now time.Time) int64 {
	n := b.acc.Now(now.UnixMicro())
	b.creditCalls(n)
	if b.noReserve {
		return n
	}
	// The stamp first, then the counters: a success counted after they
	// were read stamps the next span.
	var from int64
	if b.pending.Load() != 0 { // else no write: the line is read by every stripe's first success
		from = b.pending.Swap(0)
	}
	var total int64
	for i := range b.succeeded {
		total += b.succeeded[i].n.Load()
	}
	if succeeded := total - b.counted; succeeded > 0 {
		b.acc.Earn(n, b.p, succeeded, max(from, b.seen), math.MaxInt64)
	}
	b.counted, b.seen = total, n
	return n
}

// creditCalls credits the calls counted since the last credit and the time
// up to n, and records whether the long-run pool is full. b.mu is held.
func (b *Budget) creditCalls(n int64) {
	started := b.started.Load()
	b.acc.Credit(n, b.p, started-b.credited)
	b.credited = started
	b.full.Store(b.acc.pool >= b.p.Burst)
}
