// Package lease is the arithmetic of a fleet-wide retry budget: the Ledger
// that the fleet shares (package fleetbudget keeps it in Redis, where a Lua
// script carries out Ledger.Renew step for step), and the Local lease that
// each process spends without asking anyone. It reads no clock and does no
// I/O: every method takes the time as an argument, so that tests are tables
// and cmd/fleetsim runs 10 000 processes on a virtual clock with this very
// code.
//
// The fleet follows one grpcbackoff.Throttle as one process would: the
// reserve is Reserve per success of the fleet in the last Window plus one
// MinReserve, the long-run allowance Ratio per call the fleet started plus
// one PerSecond, saved up to one Burst. Each process renews its lease every
// three quarters of a lease period: it reports the calls it started and
// those that succeeded, gives back what it did not spend of its reserve,
// and asks for its share of the reserve and for as many tokens as it
// wanted in the last interval. The Ledger grants what it holds, first come
// first served; a lease is valid for one lease period. A process whose
// lease expired, because the Ledger could not be reached, spends from its
// share of the budget instead: the same Throttle on its own calls with the
// fleet's floors (PerSecond, Burst, MinReserve) divided by the last fleet
// size it saw. See fleetbudget's README for the bound this keeps.
package lease

import (
	"math"
	"time"

	"github.com/platformkit/grpcbackoff"
)

// Units of the Ledger: tokens in millionths, times and durations in
// microseconds. Every quantity is an integer that a Lua number (a double)
// holds exactly, so that the Redis script and Ledger agree to the unit.
const (
	// Token is one retry, in the Ledger's unit.
	Token = 1_000_000
	// tenths is the number of parts of the reserve's Window.
	tenths = 10
	// maxIdle bounds the time credited at once to the long-run pool.
	maxIdle = int64(time.Hour / time.Microsecond)
)

// Params is a grpcbackoff.Throttle in the Ledger's units, with the renewal
// interval that the fleet's size is counted over.
type Params struct {
	Ratio      int64 // per call started
	PerSecond  int64 // per second
	Burst      int64
	Reserve    int64 // per success
	MinReserve int64 // per Window
	Window     int64 // µs; 0: no reserve
	Interval   int64 // µs between two renewals of one process
}

// ParamsOf returns t's Params with its floors (PerSecond, Burst and
// MinReserve) divided by share, for renewals every interval: share 1 for
// the fleet's Ledger, the fleet's size for one process's part of it.
func ParamsOf(t grpcbackoff.Throttle, interval time.Duration, share int64) Params {
	share = max(share, 1)
	tok := func(f float64) int64 { return int64(math.Round(f * Token)) }
	return Params{
		Ratio:      tok(t.Ratio),
		PerSecond:  tok(t.PerSecond) / share,
		Burst:      int64(t.Burst) * Token / share,
		Reserve:    tok(t.Reserve),
		MinReserve: int64(t.MinReserve) * Token / share,
		Window:     int64(t.Window / time.Microsecond),
		Interval:   max(int64(interval/time.Microsecond), 1),
	}
}

// Ledger is the state of a budget: the long-run pool, the reserve's Window
// in tenths, and the renewals counted in the last two intervals. Its zero
// value is a budget not yet made (a missing key): the first Renew makes it.
// It is not safe for concurrent use.
type Ledger struct {
	born, last int64 // µs: made at; the long-run pool credited up to
	pool       int64
	tenth      [tenths]tenth
	count      [2]count
}

// tenth is one tenth of the Window: the successes reported in it, and what
// the reserve paid in it from those earnings and from MinReserve, net of
// what came back.
type tenth struct{ index, earned, paid, floor int64 }

// count is the number of renewals in one interval.
type count struct{ index, n int64 }

// Request is what a process sends at a renewal.
type Request struct {
	// Started and Succeeded are the calls the process started and those
	// that succeeded since its last renewal, over the last Span µs.
	Started, Succeeded, Span int64
	// Return is the lease it gives back.
	Return Return
	// AskReserve and AskLongRun are what it asks for.
	AskReserve, AskLongRun int64
	// Born is the Ledger's Born as the process last saw it, 0 if never:
	// a Ledger lost with Redis's memory is made again as old as it was.
	Born int64
}

// Return is what a process gives back of a lease granted in tenth Tenth:
// reserve tokens from earnings and from MinReserve, and long-run tokens.
type Return struct{ Tenth, Earned, Floor, LongRun int64 }

// Grant is the Ledger's answer to a renewal.
type Grant struct {
	// Earned and Floor are the reserve granted, from the fleet's earnings
	// and from MinReserve, in tenth Tenth; LongRun from the long-run pool.
	Earned, Floor, LongRun, Tenth int64
	// Size is the fleet's size: the most renewals counted in the current
	// or the last whole interval.
	Size int64
	// Reserve and Pool are what the reserve and the long-run pool hold
	// after the grant.
	Reserve, Pool int64
	// Born is when the Ledger was made, and Now the time of the grant, in
	// µs.
	Born, Now int64
}

// Renew applies r at time now (µs) with p, and grants what r asks for as
// far as the budget holds it, in whole tokens: the long-run pool is credited for the time
// passed and the calls started (and capped at Burst after the grant, since
// the calls of an interval are reported at once, and the retries they paid
// for were asked for during it), r's successes are counted in the tenth of
// the middle of their span, its return is given back to the tenth it came
// from if that tenth is still in the Window, and then the reserve is
// granted from earnings first, then from MinReserve, and the long-run ask
// from the pool. The Redis script (fleetbudget) is this function in Lua.
func (l *Ledger) Renew(now int64, p Params, r Request) Grant {
	now = l.start(now, p, r.Born)
	l.credit(now, p, r.Started, r.Return.LongRun)
	l.earn(now, p, r.Succeeded, r.Span)
	g := Grant{Born: l.born, Now: now}
	if p.Window > 0 {
		w := width(p)
		k := (now - l.born) / w
		if t := r.Return.Tenth; t > k-tenths && t <= k && l.tenth[t%tenths].index == t {
			b := &l.tenth[t%tenths]
			b.paid -= min(b.paid, max(r.Return.Earned, 0))
			b.floor -= min(b.floor, max(r.Return.Floor, 0))
		}
		earned, floor := l.reserve(k, p)
		ask := whole(min(max(r.AskReserve, 0), earned+floor))
		g.Earned = min(ask, earned)
		g.Floor = ask - g.Earned
		b := l.at(k)
		b.paid += g.Earned
		b.floor += g.Floor
		g.Tenth, g.Reserve = k, earned+floor-g.Earned-g.Floor
	}
	g.LongRun = whole(min(max(r.AskLongRun, 0), max(l.pool, 0)))
	l.pool = min(l.pool-g.LongRun, p.Burst)
	g.Pool = l.pool

	i := now / p.Interval
	c := &l.count[i%2]
	if c.index != i {
		*c = count{index: i}
	}
	c.n++
	g.Size = c.n
	if o := l.count[(i+1)%2]; o.index == i-1 {
		g.Size = max(g.Size, o.n)
	}
	return g
}

// Take pays one retry at time now if the budget can, from the reserve first
// if reserve is set, else from the long-run pool alone, as a process's own
// Throttle would: it is how a process spends its share of the budget when
// the Ledger cannot be reached.
func (l *Ledger) Take(now int64, p Params, reserve bool) bool {
	now = l.start(now, p, 0)
	l.credit(now, p, 0, 0)
	if reserve && p.Window > 0 {
		k := (now - l.born) / width(p)
		if earned, floor := l.reserve(k, p); earned+floor >= Token {
			l.spend(k, Token, earned)
			return true
		}
	}
	if l.pool < Token {
		return false
	}
	l.pool -= Token
	return true
}

// Charge counts against the budget, at time now, one retry paid from
// elsewhere (a lease of the fleet's), from the reserve if reserve is set,
// else from the long-run pool. Unlike Take it always pays: what the budget
// does not hold it owes, and pays back from its next earnings.
func (l *Ledger) Charge(now int64, p Params, reserve bool) {
	now = l.start(now, p, 0)
	l.credit(now, p, 0, 0)
	if reserve && p.Window > 0 {
		k := (now - l.born) / width(p)
		earned, _ := l.reserve(k, p)
		l.spend(k, Token, earned)
		return
	}
	l.pool -= Token
}

// Count adds calls started and succeeded over the last span µs, as a
// renewal reports them, without asking for anything. The long-run pool may
// then hold Burst plus what those calls earned: the retries until the next
// Count spend the earnings of this interval as they would have been
// earned.
func (l *Ledger) Count(now int64, p Params, started, succeeded, span int64) {
	now = l.start(now, p, 0)
	before := min(l.pool+perSecond(p, now-l.last), p.Burst)
	l.credit(now, p, started, 0)
	l.pool = min(l.pool, before+p.Ratio*started)
	l.earn(now, p, succeeded, span)
}

// Available returns the tokens the budget holds at time now: its reserve
// and its long-run pool (not less than 0).
func (l *Ledger) Available(now int64, p Params) int64 {
	if l.born == 0 {
		return p.Burst + p.MinReserve
	}
	now = max(now, l.last)
	pool := min(l.pool+perSecond(p, now-l.last), max(p.Burst, l.pool))
	if p.Window == 0 {
		return max(pool, 0)
	}
	earned, floor := l.reserve((now-l.born)/width(p), p)
	return earned + floor + max(pool, 0)
}

// Earned returns the successes counted in the Window at time now.
func (l *Ledger) Earned(now int64, p Params) int64 {
	if l.born == 0 || p.Window == 0 {
		return 0
	}
	var e int64
	l.live((max(now, l.last)-l.born)/width(p), func(b *tenth) { e += b.earned })
	return e
}

// start makes the Ledger if it is not made yet, as old as born if the
// process saw it before (0: a new budget, its long-run pool full), and
// returns the time it is at: now, or the latest time it saw.
func (l *Ledger) start(now int64, p Params, born int64) int64 {
	if l.born == 0 {
		l.born, l.last, l.pool = now, now, p.Burst
		if born > 0 && born <= now {
			l.born, l.pool = born, 0
		}
	}
	return max(now, l.last)
}

// credit adds PerSecond for the time since the last credit (the pool held
// at most Burst meanwhile), Ratio per call started and a returned long-run
// lease to the pool. The caller caps it.
func (l *Ledger) credit(now int64, p Params, started, returned int64) {
	l.pool = min(l.pool+perSecond(p, now-l.last), max(p.Burst, l.pool))
	l.pool += p.Ratio*started + max(returned, 0)
	l.last = now
}

// earn puts succeeded successes in the tenth of the middle of their span.
func (l *Ledger) earn(now int64, p Params, succeeded, span int64) {
	if p.Window == 0 || succeeded == 0 {
		return
	}
	w := width(p)
	k := (now - l.born) / w
	l.at(max((now-span/2-l.born)/w, k-tenths+1, 0)).earned += succeeded
}

// perSecond is what PerSecond earns in dt µs (at most maxIdle), rounded
// down; the Lua script computes it with the same floating-point operations.
func perSecond(p Params, dt int64) int64 {
	return int64(math.Floor(float64(p.PerSecond) * float64(min(dt, maxIdle)) / 1e6))
}

func width(p Params) int64 { return max(p.Window/tenths, 1) }

// whole rounds n down to whole tokens: a lease holds no fraction of a
// token, which the process could not spend, while the fleet could.
func whole(n int64) int64 { return n - n%Token }

// at returns the bucket of tenth j, emptied if it held an older one.
func (l *Ledger) at(j int64) *tenth {
	b := &l.tenth[j%tenths]
	if b.index != j {
		*b = tenth{index: j}
	}
	return b
}

// live calls f on each bucket of the Window that ends with tenth k.
func (l *Ledger) live(k int64, f func(*tenth)) {
	for j := max(k-tenths+1, 0); j <= k; j++ {
		if b := &l.tenth[j%tenths]; b.index == j {
			f(b)
		}
	}
}

// reserve returns what the reserve can pay in tenth k: from the Window's
// earnings, Reserve per success less what they paid, and from MinReserve,
// what it did not pay in the Window if a call succeeded in it or the budget
// is younger than it.
func (l *Ledger) reserve(k int64, p Params) (earned, floor int64) {
	var e, paid, fl int64
	l.live(k, func(b *tenth) { e, paid, fl = e+b.earned, paid+b.paid, fl+b.floor })
	earned = max(p.Reserve*e-paid, 0)
	if e > 0 || k < tenths {
		floor = max(p.MinReserve-fl, 0)
	}
	return earned, floor
}

// spend pays n in tenth k: from earnings as far as they hold (earned),
// then from MinReserve.
func (l *Ledger) spend(k, n, earned int64) {
	b := l.at(k)
	e := min(n, earned)
	b.paid += e
	b.floor += n - e
}
