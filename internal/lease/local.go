package lease

import (
	"time"

	"github.com/platformkit/grpcbackoff"
)

// Local is one process's side of a fleet budget: the lease it spends, what
// it asks for at its next renewal, and its share of the budget (the
// Throttle on its own calls, with the fleet's floors divided by the fleet's
// size), which pays for retries when it holds no valid lease. Every retry
// it pays, from either, is charged to its share, so that a process that
// falls back has spent there what it spent of the fleet's.
//
// A lease is valid for one Period after the request that brought it was
// sent; a process renews every Interval() = 3/4 of the Period, so a
// renewal that answers within a quarter of the Period keeps it joined.
// Local is not safe for concurrent use; it reads no clock.
type Local struct {
	t      grpcbackoff.Throttle
	period int64 // µs

	joined  bool
	expires int64  // µs: the lease is spent until then
	lease   Return // held: reserve from earnings and floor granted in lease.Tenth, long-run
	stale   Return // an expired lease's, given back at the next renewal

	share   Ledger // the process's share of the budget
	size    int64  // the fleet's size, as last seen (or assumed)
	born    int64  // the fleet Ledger's Born, as last seen
	allows  int64  // Allow calls since the last request
	longRun int64  // retries the reserve could not pay since the last request
	last    int64  // µs: the last request

	leases, fallbacks int64
}

// NewLocal returns the lease of a process that starts at now with t, lease
// period, and assumes a fleet of size processes until the Ledger tells it
// one. It holds no lease: it spends its share until its first renewal.
func NewLocal(t grpcbackoff.Throttle, period time.Duration, size int, now time.Time) *Local {
	l := &Local{t: t, period: max(int64(period/time.Microsecond), 4), size: max(int64(size), 1), last: micros(now)}
	l.share.start(micros(now), l.shareParams(), 0)
	return l
}

// Interval returns the time between two renewals: 3/4 of the lease period.
func (l *Local) Interval() time.Duration {
	return time.Duration(l.period*3/4) * time.Microsecond
}

// Params returns the Params of the fleet's Ledger.
func (l *Local) Params() Params {
	return ParamsOf(l.t, l.Interval(), 1)
}

func (l *Local) shareParams() Params { return ParamsOf(l.t, l.Interval(), l.size) }

// Joined reports whether the process holds a valid lease at now.
func (l *Local) Joined(now time.Time) bool {
	l.expire(micros(now))
	return l.joined
}

// Request returns the renewal to send at now, for the calls started and
// succeeded since the last one. The reserve it gives back can no longer be
// spent, whatever becomes of the request; the long-run lease is given back
// too if no retry asked for it since the last request, else kept and topped
// up. The calls are counted in the process's share as well.
func (l *Local) Request(now time.Time, started, succeeded int64) Request {
	n := micros(now)
	l.expire(n)
	span := max(n-l.last, 0)
	l.share.Count(n, l.shareParams(), started, succeeded, span)
	r := Request{Started: started, Succeeded: succeeded, Span: span, Born: l.born, Return: l.stale}
	l.stale = Return{}
	if l.joined {
		// One tenth is given back at a time: the current lease's, unless
		// it holds no reserve (an expired one's reserve is lost then).
		if l.lease.Earned+l.lease.Floor > 0 {
			r.Return.Tenth, r.Return.Earned, r.Return.Floor = l.lease.Tenth, l.lease.Earned, l.lease.Floor
		}
		l.lease.Earned, l.lease.Floor = 0, 0
		if l.longRun == 0 {
			r.Return.LongRun += l.lease.LongRun
			l.lease.LongRun = 0
		}
	}
	sp := l.shareParams()
	r.AskReserve = sp.Reserve*l.share.Earned(n, sp) + l.allows*Token
	r.AskLongRun = max(l.longRun*Token-l.lease.LongRun, 0)
	l.allows, l.longRun, l.last = 0, 0, n
	return r
}

// Apply takes g, the answer to the request sent at sent, at now: the
// process holds the lease until sent plus the period. A grant that comes
// after that is given back at the next renewal.
func (l *Local) Apply(now, sent time.Time, g Grant) {
	n := micros(now)
	l.expire(n)
	l.born, l.size = g.Born, max(g.Size, 1)
	expires := micros(sent) + l.period
	if expires <= n {
		l.stale = Return{Tenth: g.Tenth, Earned: g.Earned, Floor: g.Floor, LongRun: l.stale.LongRun + g.LongRun}
		return
	}
	l.lease.Tenth, l.lease.Earned, l.lease.Floor = g.Tenth, g.Earned, g.Floor
	l.lease.LongRun += g.LongRun
	l.expires, l.joined = expires, true
	l.leases++
}

// Allow pays for a retry at now if the lease (or the share, without a
// valid lease) can: from the reserve first, then from the long-run tokens.
func (l *Local) Allow(now time.Time) bool { return l.pay(micros(now), true) }

// AllowLongRun pays for a retry at now from the long-run tokens alone.
func (l *Local) AllowLongRun(now time.Time) bool { return l.pay(micros(now), false) }

func (l *Local) pay(n int64, reserve bool) bool {
	l.expire(n)
	if reserve {
		l.allows++
	}
	if !l.joined {
		if !reserve || l.share.Available(n, l.shareParams()) < Token {
			l.longRun++ // what the fleet would have been asked for
		}
		return l.share.Take(n, l.shareParams(), reserve)
	}
	if reserve && l.lease.Earned+l.lease.Floor >= Token {
		e := min(l.lease.Earned, Token)
		l.lease.Earned -= e
		l.lease.Floor -= Token - e
		l.share.Charge(n, l.shareParams(), true)
		return true
	}
	l.longRun++
	if l.lease.LongRun < Token {
		return false
	}
	l.lease.LongRun -= Token
	l.share.Charge(n, l.shareParams(), false)
	return true
}

// expire ends the lease at its expiry: what is left of it is given back at
// the next renewal, and the process spends its share until then.
func (l *Local) expire(n int64) {
	if l.joined && n >= l.expires {
		l.joined = false
		l.stale, l.lease = l.lease, Return{}
		l.fallbacks++
	}
}

// LocalState is what a Local says of itself.
type LocalState struct {
	Joined            bool
	Tokens            float64 // retries it could pay for now
	LongRun           float64 // of which long-run tokens of a lease
	Size              int64   // the fleet's size as last seen (or assumed)
	Leases, Fallbacks int64   // leases applied; times the lease expired
}

// State returns l's state at now.
func (l *Local) State(now time.Time) LocalState {
	n := micros(now)
	l.expire(n)
	s := LocalState{Joined: l.joined, Size: l.size, Leases: l.leases, Fallbacks: l.fallbacks}
	if l.joined {
		s.Tokens = float64(l.lease.Earned+l.lease.Floor+l.lease.LongRun) / Token
		s.LongRun = float64(l.lease.LongRun) / Token
	} else {
		s.Tokens = float64(l.share.Available(n, l.shareParams())) / Token
	}
	return s
}

// micros returns t in µs since the Unix epoch.
func micros(t time.Time) int64 { return t.UnixMicro() }
