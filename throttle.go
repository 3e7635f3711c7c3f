package grpcbackoff

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Throttle is a retry budget: it lets the calls that share it retry at most
// Ratio times per call started, plus PerSecond retries per second, with up to
// Burst retries saved up. A retry the budget cannot pay for is not sent, and
// the call returns its last error at once.
//
// A budget, rather than gRFC A6's success/failure token bucket, because it
// bounds what matters in a storm (retries as a share of the traffic) whatever
// the failure rate, and because it leaves a lone unlucky call alone: an idle
// client starts with Burst saved retries, so one call can use every attempt
// of its Policy while retries by many calls at once are held to the ratio.
//
// During a total outage, calls started at rate R per second cause at most
// Burst + (Ratio·R + PerSecond)·T retries over T seconds.
type Throttle struct {
	// Ratio is the number of retries each call started earns, between 0
	// and 1 (a share of the traffic). Default 0.1.
	Ratio float64
	// PerSecond is the number of retries earned per second whatever the
	// traffic, so that a quiet client can still retry. It must not be
	// negative. Default 0.5.
	PerSecond float64
	// Burst is the largest number of retries that can be saved up, and the
	// number a new budget starts with. It must be at least 1. Default 10.
	Burst int
}

// DefaultThrottle returns the throttle the interceptors use unless told
// otherwise: 10% of the calls plus one retry every 2 s, with 10 saved up.
func DefaultThrottle() Throttle {
	return Throttle{Ratio: 0.1, PerSecond: 0.5, Burst: 10}
}

// Validate reports every field that makes t unusable, each with its value.
func (t Throttle) Validate() error {
	var errs []error
	if !(t.Ratio >= 0 && t.Ratio <= 1) {
		errs = append(errs, fmt.Errorf("grpcbackoff: Throttle.Ratio (%v) must be between 0 and 1", t.Ratio))
	}
	if !(t.PerSecond >= 0) || math.IsInf(t.PerSecond, 0) {
		errs = append(errs, fmt.Errorf("grpcbackoff: Throttle.PerSecond (%v) must be a finite number ≥ 0", t.PerSecond))
	}
	if t.Burst < 1 {
		errs = append(errs, fmt.Errorf("grpcbackoff: Throttle.Burst (%d) must be at least 1", t.Burst))
	}
	return errors.Join(errs...)
}

// Budget is the running state of a Throttle, shared by every call that goes
// through one set of interceptors. It is safe for concurrent use.
//
// Started is on every call's path, so it writes no shared memory while the
// budget is known to be full (a call's credit would be capped away) and is
// otherwise a single atomic addition: calls on many cores do not contend
// while no call retries. The budget is known to be full from the refill
// that fills it: calls credit themselves every 64, and Allow and Tokens
// credit calls and time.
type Budget struct {
	t       Throttle
	full    atomic.Bool  // tokens == Burst; set and cleared under mu
	started atomic.Int64 // calls started while the budget was not full

	mu       sync.Mutex
	tokens   float64   // retries saved up, at most Burst
	credited int64     // value of started already turned into tokens
	last     time.Time // when PerSecond was last credited
}

// creditEvery is how many uncredited calls make Started credit them, so that
// a budget refilled by calls alone is seen to be full again without waiting
// for the next Allow.
const creditEvery = 64

// NewBudget returns a full budget for t, or t's validation error.
func NewBudget(t Throttle) (*Budget, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	b := &Budget{t: t, tokens: float64(t.Burst)}
	b.full.Store(true)
	return b, nil
}

// Started records that a call started (its first attempt).
//
// A call that finds the budget full is not counted. That gives the same
// tokens as counting it: had it been counted, the next refill would have
// added its Ratio to a full budget and capped it away. (Allow clears full
// after that refill and before it spends a token, so a call that still saw
// full is ordered before the spending.)
func (b *Budget) Started() {
	if b.full.Load() || b.t.Ratio == 0 {
		return
	}
	b.count()
}

func (b *Budget) count() {
	if b.started.Add(1)%creditEvery == 0 && b.mu.TryLock() {
		b.creditCalls()
		b.mu.Unlock()
	}
}

// Allow reports whether a retry may be sent at time now, and if so pays for it.
func (b *Budget) Allow(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	if b.tokens < 1 {
		return false
	}
	b.full.Store(false)
	b.tokens--
	return true
}

// Tokens returns the retries the budget could pay for at time now.
func (b *Budget) Tokens(now time.Time) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	return b.tokens
}

// refill credits the calls started since the last refill and the time
// passed. Only additions happen between two refills, so capping once at the
// end gives the same result as capping after each one.
func (b *Budget) refill(now time.Time) {
	if !b.last.IsZero() && now.After(b.last) {
		b.tokens += now.Sub(b.last).Seconds() * b.t.PerSecond
	}
	if b.last.IsZero() || now.After(b.last) {
		b.last = now
	}
	b.creditCalls()
}

// creditCalls turns the calls counted since the last credit into tokens, caps
// the tokens at Burst and records whether the budget is full. b.mu is held.
func (b *Budget) creditCalls() {
	started := b.started.Load()
	b.tokens += float64(started-b.credited) * b.t.Ratio
	b.credited = started
	b.tokens = min(b.tokens, float64(b.t.Burst))
	b.full.Store(b.tokens >= float64(b.t.Burst))
}
