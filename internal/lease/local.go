package lease

import (
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/budget"
)

// Local is one process's side of a fleet budget: the lease it spends, what
// it asks for at its next renewal, and its share of the budget (the
// Throttle on its own calls, with the fleet's floors divided by the fleet's
// size), which pays for retries when it holds no valid lease. Every retry
// it pays, from either, is charged to its share, so that a process that
// falls back has spent there what it spent of the fleet's; and every retry
// it pays from its share, or from a lease it had given back beyond what
// the grant that replaced it could pay, it owes the fleet, which charges
// it at the next renewal answered (Request.Owed).
//
// At each renewal a process gives back what it holds and asks for its
// stock and for its demand. Its stock is what one process's Throttle would
// hold at its traffic, as a part of the fleet's: the reserve its own
// successes earned in the Window, and its share of the fleet's floors
// (MinReserve and Burst divided by the processes the Ledger saw renew), so
// that a lone process holds the whole Throttle and a new or quiet one its
// share at once. Its demand is the retries it wants: each retry a caller
// told it of with Want, when decided, that its lease could not pay for
// then, and as many as it paid without a Want since the last renewal. A
// retry wanted is asked for at the next renewal (before it is due with the
// recipe's backoff) and, if that one's grant cannot pay for it while other
// processes hold stock, at the one after, which pays for it or refuses it;
// if it is due before, it is refused then. It is so decided on the fleet's
// state when its attempt failed, the tokens parked in other processes'
// stocks included: within an interval, every process renews and gives them
// back, and the Ledger keeps what it refused out of the stocks it grants
// after.
//
// A lease is valid for one Period after the request that brought it was
// sent; a process renews every Interval() = 3/4 of the Period, so a
// renewal that answers within a quarter of the Period keeps it joined.
// Local is not safe for concurrent use; it reads no clock.
type Local struct {
	// NoStock, set before the first renewal, asks for no share of the
	// floors, only for the process's earnings and its demand (as before
	// issue 35; cmd/fleetsim compares the designs).
	NoStock bool

	t      grpcbackoff.Throttle
	period int64 // µs

	joined  bool
	expires int64  // µs: the lease is spent until then
	lease   Return // held: reserve from earnings and floor granted in lease.Tenth, long-run
	stale   Return // an expired lease's, given back at the next renewal
	out     bool   // a request gave the lease back; its answer has not come
	spent   Return // spent from the lease since then

	share   budget.Account // the process's share of the budget
	size    int64          // the fleet's size, as last seen (or assumed)
	born    int64          // the fleet Ledger's Born, as last seen
	paid    int64          // retries (Allow) paid or refused without a Want since the last request
	longRun int64          // and retries paid from the long-run tokens alone (AllowLongRun)
	last    int64          // µs: the last request
	early   int64          // µs: when a renewal before its time was last asked for
	wants   wants          // retries wanted, by when they are due

	held int64    // what the last grant held back for it (Grant.Held)
	id   string   // the process's name at the Ledger
	owed [2]int64 // retries paid from the share, or beyond a lease given back: [0] Allow, [1] AllowLongRun
	sent [2]int64 // of which the request in flight (or the last unanswered) charges

	leases, fallbacks int64
}

// NewLocal returns the lease of a process that starts at now with t, lease
// period, and assumes a fleet of size processes until the Ledger tells it
// one. It holds no lease: its retries are asked for at its first renewal,
// and paid from its share if none answers by the time they are due.
func NewLocal(t grpcbackoff.Throttle, period time.Duration, size int, now time.Time) *Local {
	l := &Local{t: t, period: max(int64(period/time.Microsecond), 4), size: max(int64(size), 1), last: micros(now),
		early: math.MinInt64, id: strconv.FormatUint(rand.Uint64(), 36)}
	l.share.Make(micros(now), l.shareParams().Params, 0)
	return l
}

// Interval returns the time between two renewals: 3/4 of the lease period.
func (l *Local) Interval() time.Duration {
	return time.Duration(l.interval()) * time.Microsecond
}

func (l *Local) interval() int64 { return max(l.period*3/4, 1) }

// Params returns the Params of the fleet's Ledger.
func (l *Local) Params() Params {
	return ParamsOf(l.t, l.Interval(), 1)
}

func (l *Local) shareParams() Params { return ParamsOf(l.t, l.Interval(), l.size) }

// count adds to the share the calls started and succeeded over the last
// span µs, as a renewal reports them. The long-run pool may then hold its
// Burst plus what those calls earned: the calls of an interval are counted
// at once, while the retries of the interval spent the pool as the calls
// would have refilled it (a share's Burst, the fleet's divided by its size,
// is often under one token, which a pool capped at it could never pay).
func (l *Local) count(n int64, p Params, started, succeeded, span int64) {
	n = l.share.Now(n)
	l.share.Credit(n, p.Params, 0)
	before := l.share.Pool()
	l.share.Add(n, p.Params, started, 0)
	l.share.Draw(max(l.share.Pool()-max(before+p.Ratio*started, p.Burst), 0))
	l.share.Earn(n, p.Params, succeeded, n-span, n-span)
}

// take is the share's budget.Account.Take at n. (Its pool is credited
// without being capped: it may hold the last interval's calls beyond Burst.)
func (l *Local) take(n int64, reserve bool) bool {
	p := l.shareParams().Params
	n = l.share.Now(n)
	l.share.Add(n, p, 0, 0)
	return l.share.Take(n, p, reserve)
}

// charge is the share's budget.Account.Charge at n.
func (l *Local) charge(n int64, reserve bool) {
	p := l.shareParams().Params
	n = l.share.Now(n)
	l.share.Add(n, p, 0, 0)
	l.share.Charge(n, p, reserve)
}

// Joined reports whether the process holds a valid lease at now.
func (l *Local) Joined(now time.Time) bool {
	l.expire(micros(now))
	return l.joined
}

// Request returns the renewal to send at now, for the calls started and
// succeeded since the last one: it gives back all the process holds, and
// asks for its stock and its demand. Until the answer comes (Apply) the
// process spends what it gave back, and the grant pays for it; if no answer
// comes, it has nothing left of it at the next request. The calls are
// counted in the process's share as well.
func (l *Local) Request(now time.Time, started, succeeded int64) Request {
	n := micros(now)
	l.expire(n)
	span := max(n-l.last, 0)
	sp := l.shareParams()
	l.count(n, sp, started, succeeded, span)
	r := Request{Started: started, Succeeded: succeeded, Span: span, Born: l.born, Return: l.stale, Stock: !l.NoStock, ID: l.id}
	l.stale = Return{}
	if l.joined {
		if l.out {
			l.lease = Return{} // given back with a request that got no answer
		}
		r.Return.Tenth, r.Return.Earned, r.Return.Floor, r.Return.Interval, r.Return.Shared = l.lease.Tenth, l.lease.Earned, l.lease.Floor, l.lease.Interval, l.lease.Shared
		r.Return.LongRun += l.lease.LongRun
		l.out, l.spent = true, Return{}
	}
	retries, longRun := l.wants.ask(n, l.interval())
	r.AskRetries = (retries + l.paid) * Token
	r.AskReserve = sp.Reserve * l.share.Earned(n, sp.Params)
	r.AskLongRun = (longRun + l.longRun) * Token
	// What it owes is charged until a grant answers a request that
	// charged it: a request with no answer may or may not have been
	// applied (charged twice, the fleet pays less, never more).
	l.sent = l.owed
	r.Owed, r.OwedLongRun, r.Held = l.owed[0]*Token, l.owed[1]*Token, l.held
	l.paid, l.longRun, l.last = 0, 0, n
	return r
}

// Leave returns the process's last renewal, to send at now when it stops
// using the fleet (fleetbudget's Fleet.Close): it reports the calls started
// and succeeded since the last one, gives back all the process holds, and
// asks for nothing; the Ledger does not count it in the fleet's size. From
// then on the process spends its share, as without a lease: its answer is
// not to be applied. The fleet's other processes (a successor, in a rolling
// restart) so get at their next renewal what the process held, rather than
// when the Window forgets it.
func (l *Local) Leave(now time.Time, started, succeeded int64) Request {
	r := l.Request(now, started, succeeded)
	r.AskRetries, r.AskReserve, r.AskLongRun, r.Stock, r.Leave = 0, 0, 0, false, true
	l.joined, l.out, l.lease, l.spent = false, false, Return{}, Return{}
	return r
}

// Apply takes g, the answer to the request sent at sent, at now: the
// process holds the lease until sent plus the period. A grant that comes
// after that is given back at the next renewal.
func (l *Local) Apply(now, sent time.Time, g Grant) {
	n := micros(now)
	l.expire(n)
	l.born, l.size, l.held = g.Born, max(g.Size, 1), g.Held
	for k := range l.owed {
		l.owed[k] -= min(l.owed[k], l.sent[k]) // charged
		l.sent[k] = 0
	}
	lease := Return{Tenth: g.Tenth, Earned: g.Earned, Floor: g.Floor, LongRun: g.LongRun, Interval: g.Now / l.interval(), Shared: g.Shared}
	expires := micros(sent) + l.period
	if expires <= n {
		l.wants.settle(n, l.interval(), nil, g.Parked >= Token) // the retries asked for are refused, or stay open
		l.stale.Tenth, l.stale.Earned, l.stale.Floor, l.stale.Interval, l.stale.Shared = lease.Tenth, lease.Earned, lease.Floor, lease.Interval, lease.Shared
		l.stale.LongRun += lease.LongRun
		return
	}
	if l.out {
		// Take from the grant what was spent of the lease it replaces
		// since it was given back: the Ledger took that lease back whole.
		// What the grant cannot pay for is owed, charged at the next
		// renewal (the Ledger keeps what a process gave back for its own
		// grant, so that one asking as much as it gave back is paid).
		reserve, longRun := l.spent.Earned+l.spent.Floor, l.spent.LongRun
		lease.LongRun, longRun = lease.LongRun-min(lease.LongRun, longRun), longRun-min(lease.LongRun, longRun)
		reserve += longRun
		e := min(lease.Earned, reserve)
		f := min(lease.Floor, reserve-e)
		lease.Earned, lease.Floor = lease.Earned-e, lease.Floor-f
		if short := reserve - e - f; short > 0 {
			l.owed[0] += (short + Token - 1) / Token
		}
		l.out, l.spent = false, Return{}
	}
	// Then it pays for the retries asked for, which keep their tokens
	// until they are due, in the order they are due.
	reserve, longRun := l.wants.settle(n, l.interval(), &lease, g.Parked >= Token)
	for range reserve {
		l.charge(n, true)
	}
	for range longRun {
		l.charge(n, false)
	}
	l.lease = lease
	l.expires, l.joined = expires, true
	l.leases++
}

// Want tells l, at now, of a retry decided and due at due, to be paid then
// (Allow, or AllowLongRun with longRun), and reports whether a renewal
// should be made now for it.
// Its lease pays for it now if it can; else (or without a lease: its first
// renewal, or the one that joins again) it is asked for at the next renewal
// and, if that one cannot pay for it while stock is parked, at the one
// after, which pays for it or refuses it; it is paid or refused when it is
// due (refused if it was not asked for again by then; if no renewal
// answers, paid then as a retry not told of, from the share if no lease is
// valid); a renewal is made now if the next would come after it is due (at
// most once an interval).
func (l *Local) Want(now, due time.Time, longRun bool) (renewNow bool) {
	n, d := micros(now), micros(due)
	l.expire(n)
	d = max(min(d, n+(wantSlots-2)*l.interval()), n)
	if l.joined && l.fromLease(n, !longRun) {
		l.wants.add(d, l.interval(), longRun, true)
		return false
	}
	// Asked for at the next renewal (even without a lease: it is the
	// first, or the one that joins again: a process pays from its share
	// only when it is due and no renewal answered, as a retry not told
	// of, so that processes starting in an outage are paid from the
	// fleet's budget, not from as many shares).
	l.wants.add(d, l.interval(), longRun, false)
	if n < l.early+l.interval() || micros(due) >= l.last+l.interval()+l.period/4 || micros(due) < n+l.period/4 {
		return false // once an interval; the next renewal's answer comes before it is due; or none would
	}
	l.early = n
	return true
}

// WantCost is Want for a retry that costs cost µtokens (budget.Cost of its
// failure's code: RESOURCE_EXHAUSTED's is 2 tokens): its tokens are told
// of, asked for and paid as so many retries due together, and AllowCost
// pays all of them or none.
func (l *Local) WantCost(now, due time.Time, longRun bool, cost int64) (renewNow bool) {
	for range tokens(cost) {
		renewNow = l.Want(now, due, longRun) || renewNow
	}
	return renewNow
}

// AllowCost is Allow, or AllowLongRun with longRun, for a retry that costs
// cost µtokens (WantCost): it pays all of it, or none (what it paid of it
// goes back, as Refund gives it).
func (l *Local) AllowCost(now time.Time, longRun bool, cost int64) bool {
	for i := range tokens(cost) {
		if !l.pay(micros(now), !longRun) {
			l.Refund(now, longRun, i*Token)
			return false
		}
	}
	return true
}

// Refund gives back, at now, the cost (µtokens) of a retry paid (Allow,
// AllowLongRun, AllowCost) that the server then served: a retry that
// succeeds costs nothing (budget.Account.Refund). What the process owes
// for retries paid from its share is owed less; the rest goes into its
// lease as long-run tokens, which it spends or gives back to the fleet's
// pool at its next renewal (the Ledger takes them back up to Burst, as a
// return: the reserve's tenth that paid for the retry keeps it paid until
// the Window forgets it, so that no token comes back twice); and its share,
// charged for every retry it paid, gets it back into its long-run pool.
func (l *Local) Refund(now time.Time, longRun bool, cost int64) {
	if cost <= 0 {
		return
	}
	n := micros(now)
	l.expire(n)
	t := tokens(cost)
	k := kind(longRun)
	owed := min(l.owed[k], t)
	l.owed[k] -= owed
	if rest := t - owed; rest > 0 && l.joined {
		l.lease.LongRun += rest * Token
	}
	p := l.shareParams().Params
	n = l.share.Now(n)
	l.share.Add(n, p, 0, 0)
	l.share.Refund(n, p, budget.Receipt{LongRun: t * Token})
}

// tokens returns cost's whole tokens, at least one.
func tokens(cost int64) int64 { return max(cost/Token, 1) }

// Allow pays for a retry at now if the lease (or the share, without a
// valid lease) can: from the reserve first, then from the long-run tokens.
func (l *Local) Allow(now time.Time) bool { return l.pay(micros(now), true) }

// AllowLongRun pays for a retry at now from the long-run tokens alone.
func (l *Local) AllowLongRun(now time.Time) bool { return l.pay(micros(now), false) }

func (l *Local) pay(n int64, reserve bool) bool {
	l.expire(n)
	switch l.wants.take(n, l.interval(), !reserve) {
	case wantPaid:
		return true
	case wantRefused:
		return false
	case wantNone:
		if reserve {
			l.paid++ // what the fleet is asked for at the next renewal
		} else {
			l.longRun++
		}
	}
	if !l.joined {
		if !l.take(n, reserve) {
			return false
		}
		l.owed[kind(!reserve)]++ // charged to the fleet when it joins again
		return true
	}
	return l.fromLease(n, reserve)
}

// fromLease pays for a retry from the lease, if it can: from the reserve
// first if reserve is set, then from the long-run tokens (Return.take).
func (l *Local) fromLease(n int64, reserve bool) bool {
	before := l.lease
	if !l.lease.take(reserve) {
		return false
	}
	if l.out {
		l.spent.Earned += before.Earned - l.lease.Earned
		l.spent.Floor += before.Floor - l.lease.Floor
		l.spent.LongRun += before.LongRun - l.lease.LongRun
	}
	l.charge(n, l.lease.LongRun == before.LongRun)
	return true
}

// expire ends the lease at its expiry: what is left of it is given back at
// the next renewal, and the process spends its share until then.
func (l *Local) expire(n int64) {
	if l.joined && n >= l.expires {
		l.joined = false
		if !l.out { // else given back already
			l.stale = l.lease
		} else if sp := l.spent.Earned + l.spent.Floor + l.spent.LongRun; sp > 0 {
			// Spent of a lease given back, which no grant paid for in time.
			l.owed[0] += (sp + Token - 1) / Token
		}
		l.lease, l.out = Return{}, false
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
		s.Tokens = float64(l.share.Available(n, l.shareParams().Params)) / Token
	}
	return s
}

// micros returns t in µs since the Unix epoch.
func micros(t time.Time) int64 { return t.UnixMicro() }

// wants counts the retries wanted (Local.Want) and not yet made, by the
// interval in which they are due (those due after the last slot are counted
// in it): those to ask for, those asked for, those paid for (by the lease
// when decided, or by a grant), and those refused. Wants due more than one
// interval ago are forgotten: their calls ended (a canceled context, a
// closed ClientConn), and what paid for them is lost to the fleet.
type wants struct {
	slot [wantSlots]wantSlot
}

// wantSlots intervals: 96 s at the default 750 ms, beyond the recipe's
// largest backoff (64 s).
const wantSlots = 128

// wantSlot is the wants due in interval index, each count by what pays for
// them: [0] Allow (the reserve, then the long-run pool), [1] AllowLongRun.
// A want is asked for (ask, then asked) at the next request; if its grant
// cannot pay for it while stock is parked, it stays open and is asked for
// again (again) at the request after, whose grant pays for it or refuses
// it; if it is due before, it is refused then. (The retries of one
// interval hold in an int32.)
type wantSlot struct {
	index              int64
	ask, paid, refused [2]int32
	asked, again       [2]int32 // by the last request: for the first time, for the second
	open               [2]int32 // refused once, to ask for again
}

// What take found.
const (
	wantNone    = iota // no want due: a retry not told of
	wantPaid           // paid for
	wantRefused        // refused by a grant
	wantWaiting        // asked for, not answered: the lease pays as for none
)

func kind(longRun bool) int {
	if longRun {
		return 1
	}
	return 0
}

// add counts a retry due at due, paid for already or to ask for.
func (w *wants) add(due, interval int64, longRun, paid bool) {
	s := w.at(due / interval)
	if paid {
		s.paid[kind(longRun)]++
	} else {
		s.ask[kind(longRun)]++
	}
}

// at returns the slot of interval i, emptied if it held another one.
func (w *wants) at(i int64) *wantSlot {
	s := w.slot0(i)
	if s.index != i {
		*s = wantSlot{index: i}
	}
	return s
}

func (w *wants) slot0(i int64) *wantSlot { return &w.slot[(i%wantSlots+wantSlots)%wantSlots] }

// ask returns the retries to ask for at now: those not asked for yet, those
// open, and those asked for by a request that got no answer, due from one
// interval before now on. They are asked for now.
func (w *wants) ask(now, interval int64) (retries, longRun int64) {
	from := now/interval - 1
	for i := from; i < from+wantSlots; i++ {
		if s := w.slot0(i); s.index == i {
			for k := range 2 {
				s.asked[k] += s.ask[k]
				s.again[k] += s.open[k]
				s.ask[k], s.open[k] = 0, 0
			}
			retries += int64(s.asked[0] + s.again[0])
			longRun += int64(s.asked[1] + s.again[1])
		}
	}
	return retries, longRun
}

// settle takes the retries asked for, in the order they are due (those
// asked for again first), out of lease, the grant that answered (nil: a
// grant too late to be used): each one it holds a token for is paid for;
// the others stay open, with again, if it was the first time they were
// asked for, and are refused otherwise. A retry paid from the reserve
// takes its earnings, then the floor, then a long-run token; one paid from
// the long-run pool, a long-run token. It returns the retries paid for, of
// each kind.
//
// again is the grant's saying that other processes hold stock (Parked): a
// retry refused then, at a process's first renewal or when a lone process
// held the whole Throttle, finds the fleet's tokens in other leases; by the
// process's next renewal, every process renewed once, gave them back, and
// left in the Ledger what it refused (Ledger.Renew). A retry refused when
// no stock is parked (an outage that spent the budget) is refused then, as
// one process's Throttle would refuse it when decided.
func (w *wants) settle(now, interval int64, lease *Return, again bool) (reserve, longRun int64) {
	from := now/interval - 1
	for i := from; i < from+wantSlots; i++ {
		s := w.slot0(i)
		if s.index != i {
			continue
		}
		for k := range 2 {
			for _, n := range []*int32{&s.again[k], &s.asked[k]} {
				for ; *n > 0; *n-- {
					switch {
					case lease != nil && lease.take(k == 0):
						s.paid[k]++
						if k == 0 {
							reserve++
						} else {
							longRun++
						}
					case again && n == &s.asked[k]:
						s.open[k]++
					default:
						s.refused[k]++
					}
				}
			}
		}
	}
	return reserve, longRun
}

// take takes one token out of r, if it holds one: from the reserve first
// with reserve, else from the long-run tokens alone.
func (r *Return) take(reserve bool) bool {
	if reserve && r.Earned+r.Floor >= Token {
		e := min(r.Earned, Token)
		r.Earned, r.Floor = r.Earned-e, r.Floor-(Token-e)
		return true
	}
	if r.LongRun < Token {
		return false
	}
	r.LongRun -= Token
	return true
}

// take finds a want due in now's interval or the one before (a timer fires
// late), marks it made, and says how it stands.
func (w *wants) take(now, interval int64, longRun bool) int {
	k := kind(longRun)
	for i := now/interval - 1; i <= now/interval; i++ {
		s := w.slot0(i)
		switch {
		case s.index != i:
		case s.paid[k] > 0:
			s.paid[k]--
			return wantPaid
		case s.refused[k] > 0:
			s.refused[k]--
			return wantRefused
		case s.open[k] > 0: // due before it was asked for again
			s.open[k]--
			return wantRefused
		case s.again[k] > 0:
			s.again[k]--
			return wantWaiting
		case s.asked[k] > 0:
			s.asked[k]--
			return wantWaiting
		case s.ask[k] > 0:
			s.ask[k]--
			return wantWaiting
		}
	}
	return wantNone
}
