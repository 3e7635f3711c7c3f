// Package lease is a fleet-wide retry budget: the Ledger that the fleet
// shares (package fleetbudget keeps it in Redis, where a Lua script carries
// out Ledger.Renew step for step), and the Local lease that each process
// spends without asking anyone. Both count with budget.Account, the
// arithmetic of a process's own budget. It reads no clock and does no I/O:
// every method takes the time as an argument, so that tests are tables and
// cmd/fleetsim runs 10 000 processes on a virtual clock with this very
// code.
//
// The fleet follows one grpcbackoff.Throttle as one process would: the
// reserve is Reserve per success of the fleet in the last Window plus one
// MinReserve, the long-run allowance Ratio per call the fleet started plus
// one PerSecond, saved up to one Burst, the processes' stocks of it
// included. Each process renews its lease every three quarters of a lease
// period: it reports the calls it started and those that succeeded, gives
// back what it did not spend, pays what it owes (what it spent without a
// lease), and asks for its stock (its share of the fleet's floors, among
// the processes that renewed in the last two intervals, and the earnings of
// its own successes) and for the retries it wants (see Local). The Ledger
// grants what it holds, first come first served, the retries asked for
// before any stock, and, for an interval, no stock from what it refused
// (the retries, which may be asked for again, and a process's share at its
// first renewal) but to the process refused; a lease is valid for one lease
// period. A process whose lease expired, because the Ledger could not be
// reached, spends from its share of the budget instead: the same Throttle
// on its own calls with the fleet's floors divided by the last fleet size
// it saw, and owes the fleet what it spends. See fleetbudget's README for
// the bound this keeps.
package lease

import (
	"maps"
	"math"
	"slices"
	"time"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/budget"
)

// Token is one retry, in the Ledger's unit (µtokens; times are in µs).
const Token = budget.Token

// Params is a grpcbackoff.Throttle in the Ledger's units, with the renewal
// interval that the fleet's size is counted over.
type Params struct {
	budget.Params
	Interval int64 // µs between two renewals of one process
}

// ParamsOf returns t's Params with its floors (PerSecond, Burst and
// MinReserve) divided by share, for renewals every interval: share 1 for
// the fleet's Ledger, the fleet's size for one process's part of it.
func ParamsOf(t grpcbackoff.Throttle, interval time.Duration, share int64) Params {
	return Params{Params: budget.ParamsOf(t, share), Interval: max(int64(interval/time.Microsecond), 1)}
}

// Ledger is the state of a fleet's budget: its budget.Account; for the last
// two intervals, what it refused and granted as stock in them, and the
// long-run tokens of the processes' shares granted in them and not given
// back; and the processes that renewed in the last two intervals, by ID.
// Its zero value is a budget not yet made (a missing key): the first Renew
// makes it. It is not safe for concurrent use.
type Ledger struct {
	acc   budget.Account
	count [2]count
	procs members
}

// count is what was refused in one interval, what was granted as stock,
// and the long-run tokens of the processes' shares of Burst granted in it
// and not given back yet (µtokens).
type count struct{ index, refused, stock, shared int64 }

// Request is what a process sends at a renewal.
type Request struct {
	// Started and Succeeded are the calls the process started and those
	// that succeeded since its last renewal, over the last Span µs.
	Started, Succeeded, Span int64
	// Return is the lease it gives back.
	Return Return
	// AskRetries is the retries it wants (paid from the reserve first, then
	// from the long-run pool), AskReserve the reserve it asks for beside
	// them (what its own successes earned), AskLongRun the long-run tokens.
	AskRetries, AskReserve, AskLongRun int64
	// Stock asks, beside them, for the process's share of the fleet's
	// floors: MinReserve and Burst divided by the fleet's size.
	Stock bool
	// Born is the Ledger's Born as the process last saw it, 0 if never:
	// a Ledger lost with Redis's memory is made again as old as it was.
	Born int64
	// Leave says it is the process's last renewal (Local.Leave): it is not
	// counted in the fleet's size.
	Leave bool
	// ID names the process (a random name of its own): the fleet's size is
	// the number of processes that renewed in the last two intervals, each
	// counted once however often it renews.
	ID string
	// Owed and OwedLongRun are retries the process paid without the
	// fleet's lease (from its share, the Ledger unreachable) or beyond it
	// (from a lease it had given back, which the grant that replaced it
	// could not pay for): charged before anything is granted, as far as the
	// budget holds them, Owed from the reserve first, then the long-run
	// pool, OwedLongRun from the pool alone (µtokens).
	Owed, OwedLongRun int64
	// Held is what its last grant held back for it (Grant.Held): its own
	// refusals do not keep its stock from it.
	Held int64
}

// Return is what a process gives back of a lease granted in tenth Tenth of
// the Window and interval Interval: reserve tokens from earnings and from
// MinReserve, and long-run tokens; and the long-run tokens of its share of
// Burst that lease held (Grant.Shared), given back or spent.
type Return struct{ Tenth, Earned, Floor, LongRun, Interval, Shared int64 }

// Grant is the Ledger's answer to a renewal.
type Grant struct {
	// Earned and Floor are the reserve granted, from the fleet's earnings
	// and from MinReserve, in tenth Tenth; LongRun from the long-run pool.
	Earned, Floor, LongRun, Tenth int64
	// Size is the fleet's size: the processes that renewed in the last two
	// intervals, this one included (at least 1).
	Size int64
	// Reserve and Pool are what the reserve and the long-run pool hold
	// after the grant.
	Reserve, Pool int64
	// Born is when the Ledger was made, and Now the time of the grant, in
	// µs.
	Born, Now int64
	// Parked is what the Ledger granted as stock in this interval and the
	// last, before this grant: tokens that come back within an interval,
	// as every process renews, unless spent.
	Parked int64
	// Shared is the long-run tokens of LongRun that are the process's
	// share of Burst: the Ledger counts them as saved until the process
	// renews again (Return.Shared).
	Shared int64
	// Held is what the renewal refused that the Ledger holds back from
	// the stocks of this interval and the next, for the process to ask for
	// again (Request.Held).
	Held int64
}

// Renew applies r at time now (µs, the server's clock: the only clock the
// Ledger follows) with p, and grants what r asks for as far as the budget
// holds it, in whole tokens. In order: the Ledger is repaired (Repair) or
// made; the process is counted in the fleet's size (its ID; a Leave takes
// it out); the long-run pool is credited for the time passed, the calls
// started and the long-run lease given back; r's successes are spread over
// their span; its reserve comes back to the tenth it was granted in, if
// that tenth is still in the Window; what it owes is charged. Then the
// retries asked for are granted, from the reserve (earnings first, then the
// floor), then from the long-run pool; then the stock: the reserve asked
// for and, with Stock, the process's share of MinReserve (divided by the
// size), and the long-run ask and the share of Burst, from what the reserve
// and then the pool hold beyond what was refused in this interval and the
// last one (pending). What is refused counts in this interval: the
// retries, and, at a process's first renewal (Born 0), its share; and so
// does the stock granted, which the grant reports (Parked). So a stock
// never keeps the tokens that a process refused will ask for again at its
// next renewal (a retry refused while stocks were parked is asked for
// twice: see Local): in one interval, every process renews, gives back its
// stock and leaves what is pending in the Ledger.
//
// The long-run pool is then capped so that it holds, with the long-run
// shares granted in this interval and the last and not given back, at most
// Burst: the processes' shares of Burst are saved tokens, as the pool's
// are, and one Throttle saves Burst in all. (The reserve needs no such cap:
// what it grants is paid in its tenth until it is given back.) The Redis
// script (fleetbudget) is this function in Lua.
func (l *Ledger) Renew(now int64, p Params, r Request) Grant {
	l.Repair(now, p, r.Born)
	size := l.procs.renew(now, 2*p.Interval, r.ID, !r.Leave)
	pending, parked := l.count1(now, p)
	// What is held back for the process itself is its to take, and so is
	// what it gives back: it may have spent some of it since it sent the
	// request (Local takes that from the grant), and its own grant comes
	// before what others' refusals hold back.
	returned := clamp(r.Return.Earned, maxAsk) + clamp(r.Return.Floor, maxAsk) + clamp(r.Return.LongRun, maxAsk)
	pending = max(pending-clamp(r.Held, maxAsk)-returned, 0)
	c := &l.count[mod2(now/p.Interval)]
	l.giveBackShared(now, p, r.Return.Interval, clamp(r.Return.Shared, maxAsk))
	bp := p.Params
	l.acc.Add(now, bp, clamp(r.Started, maxCount), clamp(r.Return.LongRun, maxAsk))
	// Successes reported now may have come before other processes spent
	// the floor: what was granted in the lease period before the earliest
	// of them stays paid (two intervals: a lease is valid a period).
	from := now - max(r.Span, 0)
	l.acc.Earn(now, bp, clamp(r.Succeeded, maxCount), from, from-2*p.Interval)
	if p.Window > 0 {
		l.acc.GiveBack(now, bp, r.Return.Tenth, r.Return.Earned, r.Return.Floor)
	}
	l.charge(now, bp, clamp(r.Owed, maxAsk), clamp(r.OwedLongRun, maxAsk))
	g := Grant{Born: l.acc.Born(), Now: now, Size: size, Parked: parked}
	retries, askReserve, askLongRun := clamp(r.AskRetries, maxAsk), clamp(r.AskReserve, maxAsk), clamp(r.AskLongRun, maxAsk)
	var shareReserve, shareLongRun int64 // the process's share of the floors
	if r.Stock {
		shareReserve, shareLongRun = p.MinReserve/size, p.Burst/size
	}
	askReserve += shareReserve
	askLongRun += shareLongRun
	// left: the retries not paid yet; shareRefused: of the share; stocked:
	// the stock granted.
	left, shareRefused, stocked := retries, int64(0), int64(0)
	if p.Window > 0 {
		earned, floor := l.acc.Reserve(now, bp)
		free := earned + floor
		paid := whole(min(left, free))
		stock := whole(min(askReserve, max(free-paid-pending, 0)))
		shareRefused += min(askReserve-stock, shareReserve)
		stocked += stock
		ask := paid + stock
		l.acc.Spend(now, bp, ask, earned)
		g.Earned, g.Floor = min(ask, earned), ask-min(ask, earned)
		g.Tenth, g.Reserve = l.acc.Tenth(now, bp), free-ask
		left -= paid
		pending = max(pending-(free-paid), 0) // what the reserve cannot hold back
	}
	pool := max(l.acc.Pool(), 0)
	paid := whole(min(left, pool))
	stock := whole(min(askLongRun, max(pool-paid-pending, 0)))
	shareRefused += min(askLongRun-stock, shareLongRun)
	stocked += stock
	g.LongRun = paid + stock
	l.acc.Draw(g.LongRun)
	// The share is what the stock holds beyond the retries asked for
	// (served first): the tokens the process saves.
	g.Shared = min(max(stock-clamp(r.AskLongRun, maxAsk), 0), shareLongRun)
	c.shared = min(c.shared+g.Shared, p.Burst)
	l.acc.CapAt(max(p.Burst-l.shared(now, p), 0))
	g.Pool = l.acc.Pool()
	if r.Born != 0 {
		shareRefused = 0 // a process's share is pending at its first renewal alone
	}
	g.Held = left - paid + shareRefused
	c.refused = min(c.refused+g.Held, maxAsk)
	c.stock = min(c.stock+stocked, maxAsk)
	return g
}

// charge takes from the budget at now what a process owes, as far as the
// budget holds it: owed from the reserve (its earnings, then the floor),
// then from the long-run pool, longRun from the pool alone. What the budget
// does not hold is not charged: the process paid it from its share of the
// budget, and the shares add up to the budget.
func (l *Ledger) charge(now int64, p budget.Params, owed, longRun int64) {
	if p.Window > 0 && owed > 0 {
		earned, floor := l.acc.Reserve(now, p)
		n := min(owed, earned+floor)
		l.acc.Spend(now, p, n, earned)
		owed -= n
	}
	l.acc.Draw(min(owed+longRun, max(l.acc.Pool(), 0)))
}

// giveBackShared takes the long-run tokens of a share, given back or spent,
// out of the interval it was granted in, if that is this one or the last.
func (l *Ledger) giveBackShared(now int64, p Params, interval, n int64) {
	i := now / p.Interval
	if interval != i && interval != i-1 {
		return
	}
	if c := &l.count[mod2(interval)]; c.index == interval {
		c.shared -= min(c.shared, n)
	}
}

// shared returns the long-run tokens of the shares granted in the current
// interval and the last and not given back.
func (l *Ledger) shared(now int64, p Params) int64 {
	i := now / p.Interval
	var n int64
	for _, c := range l.count {
		if c.index == i || c.index == i-1 {
			n += c.shared
		}
	}
	return n
}

// Bounds of what a Ledger counts, so that every sum stays an integer a
// double holds exactly (under 2^53) in the Lua script: calls or successes
// in one renewal, or in one tenth; asks and returns, in µtokens.
const (
	maxCount = 100_000_000
	maxAsk   = 1 << 50
)

// clamp returns n within [0, hi].
func clamp(n, hi int64) int64 { return min(max(n, 0), hi) }

// count1 makes the count of now's interval, if it is not made yet, and
// returns what was refused and granted as stock in it and in the last
// whole interval.
func (l *Ledger) count1(now int64, p Params) (refused, stock int64) {
	i := now / p.Interval
	c := &l.count[mod2(i)]
	if c.index != i {
		*c = count{index: i}
	}
	refused, stock = c.refused, c.stock
	if o := l.count[mod2(i+1)]; o.index == i-1 {
		refused, stock = refused+o.refused, stock+o.stock
	}
	return refused, stock
}

func mod2(i int64) int64 { return i % 2 }

// Repair makes l if it is not made (as old as born, if born is a time
// before now: see budget.Account.Make), and brings every field back into
// its range at now, the server's time, so that a Ledger whose state was
// written by someone else (or a server whose clock went back) neither
// grants more than the Throttle would nor stays unusable: a birth after
// now makes it again; a last credit after now or before its birth is now
// (nothing credited); a tenth after now's is emptied, and negative counts
// are 0; the long-run pool lies in [0, Burst], the floor paid in a tenth
// and since the last success in [0, MinReserve]; a renewal count of an
// interval after now's is forgotten, the long-run shares outstanding in an
// interval are at most Burst, and a process that renewed after now is
// forgotten. (A count above maxCount, paid above maxCount tokens, or
// refused above maxAsk, is brought down to it.)
func (l *Ledger) Repair(now int64, p Params, born int64) {
	bp := p.Params
	s := l.State()
	if s.Born <= 0 || s.Born > now {
		*l = Ledger{procs: l.procs} // the processes are kept apart (a sorted set beside the hash)
		l.acc.Make(now, bp, born)
		l.procs.repair(now)
		return
	}
	if s.Last < s.Born || s.Last > now {
		s.Last = now
	}
	s.Pool = min(max(s.Pool, 0), p.Burst)
	s.Since = min(max(s.Since, 0), p.MinReserve)
	k := (now - s.Born) / max(p.Window/10, 1)
	for j := range s.Tenths {
		t := &s.Tenths[j]
		if t.Index < 0 || t.Index > k || t.Index%10 != int64(j) {
			*t = budget.Tenth{}
			continue
		}
		t.Earned, t.Paid = clamp(t.Earned, maxCount), clamp(t.Paid, maxCount*Token)
		t.Floor = clamp(t.Floor, p.MinReserve)
	}
	i := now / p.Interval
	for j := range s.Counts {
		if c := &s.Counts[j]; c.Index < 0 || c.Index > i || c.Index%2 != int64(j) {
			*c = Count{}
		} else {
			c.Refused, c.Stock, c.Shared = clamp(c.Refused, maxAsk), clamp(c.Stock, maxAsk), clamp(c.Shared, p.Burst)
		}
	}
	l.Load(s)
	l.procs.repair(now)
}

// Take pays one retry at time now if the budget can, from the reserve first
// if reserve is set, else from the long-run pool alone, as a process's own
// Throttle would: it is how a process spends its share of the budget when
// the Ledger cannot be reached.
func (l *Ledger) Take(now int64, p Params, reserve bool) bool {
	now = l.start(now, p)
	return l.acc.Take(now, p.Params, reserve)
}

// Charge counts against the budget, at time now, one retry paid from
// elsewhere (a lease of the fleet's), from the reserve if reserve is set,
// else from the long-run pool. Unlike Take it always pays: what the budget
// does not hold it owes, and pays back from its next earnings.
func (l *Ledger) Charge(now int64, p Params, reserve bool) {
	now = l.start(now, p)
	l.acc.Charge(now, p.Params, reserve)
}

// Count adds calls started and succeeded over the last span µs, as a
// renewal reports them, without asking for anything, as a process's own
// budget counts them.
func (l *Ledger) Count(now int64, p Params, started, succeeded, span int64) {
	now = l.start(now, p)
	l.acc.Credit(now, p.Params, started)
	l.acc.Earn(now, p.Params, succeeded, now-max(span, 0), math.MaxInt64)
}

// Available returns the tokens the budget holds at time now: its reserve
// and its long-run pool (not less than 0).
func (l *Ledger) Available(now int64, p Params) int64 {
	if l.acc.Born() == 0 {
		return p.Burst + p.MinReserve
	}
	return l.acc.Available(now, p.Params)
}

// Earned returns the successes counted in the Window at time now.
func (l *Ledger) Earned(now int64, p Params) int64 {
	if l.acc.Born() == 0 {
		return 0
	}
	return l.acc.Earned(now, p.Params)
}

// start makes the Ledger if it is not made yet (a new budget, its long-run
// pool full), credits it up to now, and returns the time it is at: now, or
// the latest time it saw.
func (l *Ledger) start(now int64, p Params) int64 {
	l.acc.Make(now, p.Params, 0)
	now = l.acc.Now(now)
	l.acc.Credit(now, p.Params, 0)
	return now
}

// whole rounds n down to whole tokens: a lease holds no fraction of a
// token, which the process could not spend, while the fleet could.
func whole(n int64) int64 { return n - n%Token }

// State is a Ledger's fields, as the Redis script keeps them in a hash (the
// processes, in a sorted set beside it, are Members).
type State struct {
	budget.Fields
	Counts [2]Count
}

// Count is what was refused in interval Index, Refused, what was granted as
// stock, Stock, and the long-run tokens of the shares granted in it and not
// given back, Shared (µtokens).
type Count struct{ Index, Refused, Stock, Shared int64 }

// State returns l's fields.
func (l *Ledger) State() State {
	s := State{Fields: l.acc.Fields()}
	for i, c := range l.count {
		s.Counts[i] = Count{Index: c.index, Refused: c.refused, Stock: c.stock, Shared: c.shared}
	}
	return s
}

// Load makes l the Ledger of fields s, as Renew then repairs them.
func (l *Ledger) Load(s State) {
	l.acc.Load(s.Fields)
	for i, c := range s.Counts {
		l.count[i] = count{index: c.Index, refused: c.Refused, stock: c.Stock, shared: c.Shared}
	}
}

// Members returns the processes the Ledger counts, by ID, with the time
// each last renewed (µs), as the Redis script keeps them in a sorted set.
func (l *Ledger) Members() map[string]int64 { return l.procs.all() }

// SetMember makes process id one that renewed at t (µs), as a write into
// the sorted set would: Renew then repairs it.
func (l *Ledger) SetMember(id string, t int64) { l.procs.set(id, t) }

// ClearMembers forgets every process, as the sorted set's loss would.
func (l *Ledger) ClearMembers() { l.procs = members{} }

// members is the processes that renewed, by ID, with the time each last
// did, and those times in order (to forget the oldest, and those after
// now, first; a time in it that is not its process's last is skipped).
type members struct {
	last  map[string]int64
	order []member // order[head:] are sorted by time
	head  int
}

type member struct {
	id string
	at int64
}

// renew forgets the processes whose last renewal is window or more before
// now, counts process id's renewal at now (add), or forgets it (a process
// that leaves), and returns the processes left, at least 1.
func (m *members) renew(now, window int64, id string, add bool) int64 {
	for m.head < len(m.order) && m.order[m.head].at <= now-window {
		m.forget(m.order[m.head])
		m.head++
	}
	if m.head > len(m.order)/2 && m.head > 64 { // reuse the slice
		m.order = append(m.order[:0], m.order[m.head:]...)
		m.head = 0
	}
	if add {
		m.set(id, now)
	} else {
		delete(m.last, id)
	}
	return max(int64(len(m.last)), 1)
}

// set makes id's last renewal t.
func (m *members) set(id string, t int64) {
	if m.last == nil {
		m.last = map[string]int64{}
	}
	m.last[id] = t
	// Where t goes: at the end but for a clock that went back.
	i := len(m.order)
	for i > m.head && m.order[i-1].at > t {
		i--
	}
	m.order = slices.Insert(m.order, i, member{id, t})
}

// repair forgets the processes whose last renewal is after now (the
// server's clock went back, or a hostile write).
func (m *members) repair(now int64) {
	for len(m.order) > m.head && m.order[len(m.order)-1].at > now {
		m.forget(m.order[len(m.order)-1])
		m.order = m.order[:len(m.order)-1]
	}
}

// forget forgets o's process if o is its last renewal.
func (m *members) forget(o member) {
	if t, ok := m.last[o.id]; ok && t == o.at {
		delete(m.last, o.id)
	}
}

func (m *members) all() map[string]int64 { return maps.Clone(m.last) }
