package budget

import (
	"math"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
)

// Units of an Account: tokens in millionths, times and durations in
// microseconds. Every quantity is an integer that a double holds exactly,
// so that the Lua script of package fleetbudget, which carries out the
// fleet's Account on Redis, agrees with this code to the unit.
const (
	// Token is one retry, in an Account's unit.
	Token = 1_000_000
	// tenths is the number of parts of the reserve's Window.
	tenths = 10
	// maxIdle bounds the time credited at once to the long-run pool.
	maxIdle = int64(time.Hour / time.Microsecond)
)

// Params is a grpcbackoff.Throttle in an Account's units.
type Params struct {
	Ratio      int64 // per call started
	PerSecond  int64 // per second
	Burst      int64
	Reserve    int64 // per success
	MinReserve int64 // per Window, and since the last success
	Window     int64 // µs; 0: no reserve
}

// ParamsOf returns t's Params with its floors (PerSecond, Burst and
// MinReserve) divided by share: 1 for a whole budget, a fleet's size for
// one process's part of the fleet's.
func ParamsOf(t grpcbackoff.Throttle, share int64) Params {
	share = max(share, 1)
	tok := func(f float64) int64 { return int64(math.Round(f * Token)) }
	return Params{
		Ratio:      tok(t.Ratio),
		PerSecond:  tok(t.PerSecond) / share,
		Burst:      int64(t.Burst) * Token / share,
		Reserve:    tok(t.Reserve),
		MinReserve: int64(t.MinReserve) * Token / share,
		Window:     int64(t.Window / time.Microsecond),
	}
}

// Account is the arithmetic of a grpcbackoff.Throttle: what a budget holds
// and how retries are paid from it. A process's Budget keeps one, and so
// does a fleet's Ledger (package lease), and the Redis script that is the
// Ledger in Lua: one arithmetic.
//
//   - The long-run pool: Ratio per call started and PerSecond, capped at
//     Burst; a new Account holds Burst.
//   - The reserve: Reserve per success of the Window, less what it paid in
//     the Window, plus the floor: MinReserve less the larger of what the
//     floor paid in the Window and since the last success. A quiet spell
//     keeps the floor whole; an outage, in which nothing succeeds, is paid
//     it once.
//
// The Window moves in tenths, counted from the Account's birth: a success
// or a payment lives between 9/10 of a Window and a whole one. Its zero
// value is an Account not yet made; Make makes it. Every method takes the
// time as an argument (µs): an Account reads no clock. It is not safe for
// concurrent use.
type Account struct {
	born, last int64 // µs: made at; the long-run pool credited up to
	pool       int64
	since      int64 // paid by the floor since the last success
	tenth      [tenths]Tenth
}

// Tenth is one tenth of the Window: which one (counted from the Account's
// birth), the successes in it, and what the reserve paid in it from their
// earnings and from the floor.
type Tenth struct{ Index, Earned, Paid, Floor int64 }

// Make makes a, at now, if it is not made yet. born, if not 0, is when a
// budget that was lost was made (a Redis that lost its memory): a is then
// made as old as that, its long-run pool empty and its floor paid until a
// call succeeds, so that a loss hands out neither a new Burst nor a new
// floor. born after now, or 0, makes a new Account, holding Burst.
func (a *Account) Make(now int64, p Params, born int64) {
	if a.born != 0 {
		return
	}
	*a = Account{born: now, last: now, pool: p.Burst}
	if born > 0 && born <= now {
		a.born, a.pool, a.since = born, 0, p.MinReserve
	}
}

// Born returns when a was made (µs); 0 if it is not made.
func (a *Account) Born() int64 { return a.born }

// Now returns the time a is at: now, or the latest time it saw if that is
// later (callers on several goroutines read the clock a moment apart).
func (a *Account) Now(now int64) int64 { return max(now, a.last) }

// Credit adds to the long-run pool PerSecond for the time since the last
// credit (during which the pool held at most Burst) and Ratio per call
// started, and caps it at Burst. now is not before the last credit.
func (a *Account) Credit(now int64, p Params, started int64) {
	a.Add(now, p, started, 0)
	a.Cap(p)
}

// Add is Credit with a long-run lease given back added too, not capped:
// the Ledger caps after it grants.
func (a *Account) Add(now int64, p Params, started, returned int64) {
	a.pool = min(a.pool+perSecond(p, now-a.last), max(p.Burst, a.pool))
	a.pool += p.Ratio*started + max(returned, 0)
	a.last = max(a.last, now)
}

// Cap caps the long-run pool at Burst.
func (a *Account) Cap(p Params) { a.CapAt(p.Burst) }

// CapAt caps the long-run pool at n (a fleet's Ledger: Burst less what the
// processes' stocks save of it).
func (a *Account) CapAt(n int64) { a.pool = min(a.pool, n) }

// Pool returns the long-run pool (µtokens), which may be negative (owed).
func (a *Account) Pool() int64 { return a.pool }

// Draw takes n from the long-run pool (it may go negative: owed).
func (a *Account) Draw(n int64) { a.pool -= n }

// Earn counts n successes that happened at unknown times over [from, now],
// spread evenly over that span, in the tenths of the Window they fell in
// (those before the Window are no longer counted). A success makes the
// floor whole again, but for what it paid from the tenth of held on, which
// may have been spent after the last of these successes and so stays paid
// (all it paid since the last success if that tenth is before the Window,
// its payments forgotten). A process's own budget, which counts its
// successes before it pays, passes a held after now: the floor is whole. A
// fleet's Ledger learns of successes at renewals, after other processes
// spent the floor it granted them: it passes the earliest time a lease it
// granted may still have been spent after from.
func (a *Account) Earn(now int64, p Params, n, from, held int64) {
	if n <= 0 {
		return
	}
	a.since = min(a.since, a.floorFrom(now, p, held))
	if p.Window == 0 {
		return
	}
	w := width(p)
	k := (now - a.born) / w
	from = min(max(from, a.born), now)
	span := now - from
	// cum(x) is how many of the n happened by x: cum(now) = n. The same
	// floating-point operations in Lua give the same counts.
	cum := func(x int64) int64 {
		if x >= now {
			return n
		}
		return int64(math.Floor(float64(n) * float64(x-from) / float64(span)))
	}
	if span <= 0 {
		a.at(k).Earned += n
		return
	}
	for j := max((from-a.born)/w, k-tenths+1, 0); j <= k; j++ {
		lo, hi := max(a.born+j*w, from), min(a.born+(j+1)*w, now)
		if c := cum(hi) - cum(lo); c > 0 {
			a.at(j).Earned += c
		}
	}
}

// floorFrom returns what the floor paid from the tenth of held to now's
// (0 if held is after now), or since if that tenth is before the Window:
// its payments are forgotten, but for since.
func (a *Account) floorFrom(now int64, p Params, held int64) int64 {
	if p.Window == 0 || held > now {
		return 0
	}
	k, j := a.Tenth(now, p), (max(held, a.born)-a.born)/width(p)
	if j <= k-tenths {
		return a.since
	}
	var fl int64
	for ; j <= k; j++ {
		if t := &a.tenth[mod(j)]; t.Index == j {
			fl += t.Floor
		}
	}
	return fl
}

// Tenth returns the tenth of the Window that holds now.
func (a *Account) Tenth(now int64, p Params) int64 { return (now - a.born) / width(p) }

// Reserve returns what the reserve can pay at now: from the Window's
// earnings (Reserve per success, less what they paid) and from the floor.
func (a *Account) Reserve(now int64, p Params) (earned, floor int64) {
	if p.Window == 0 {
		return 0, 0
	}
	var e, paid, fl int64
	a.live(a.Tenth(now, p), func(t *Tenth) { e, paid, fl = e+t.Earned, paid+t.Paid, fl+t.Floor })
	return max(p.Reserve*e-paid, 0), max(p.MinReserve-max(fl, a.since), 0)
}

// Spend pays n from the reserve at now: from its earnings as far as they
// hold (earned, as Reserve returned it), then from the floor, which may
// then be paid beyond MinReserve (owed).
func (a *Account) Spend(now int64, p Params, n, earned int64) {
	t := a.at(a.Tenth(now, p))
	e := min(n, max(earned, 0))
	t.Paid += e
	t.Floor += n - e
	a.since += n - e
}

// GiveBack takes back into tenth j, if it is still in the Window at now,
// reserve that was paid from it and not spent: from its earnings and from
// the floor.
func (a *Account) GiveBack(now int64, p Params, j, earned, floor int64) {
	if p.Window == 0 {
		return
	}
	k := a.Tenth(now, p)
	t := &a.tenth[mod(j)]
	if j <= k-tenths || j > k || t.Index != j {
		return
	}
	earned, floor = max(earned, 0), min(max(floor, 0), t.Floor)
	t.Paid -= min(t.Paid, earned)
	t.Floor -= floor
	a.since -= min(a.since, floor)
}

// Take pays one retry at now if a can: from the reserve first if reserve
// is set, else from the long-run pool alone. now is not before the last
// credit, and the pool is credited up to it.
func (a *Account) Take(now int64, p Params, reserve bool) bool {
	_, ok := a.Pay(now, p, reserve, Token)
	return ok
}

// Receipt is what paid for a retry (Pay): reserve tokens from the earnings
// and from the floor of tenth Tenth of the Window, and long-run tokens, in
// µtokens. Refund gives them back.
type Receipt struct{ Tenth, Earned, Floor, LongRun int64 }

// Cost returns what a retry of a failure with code costs, in µtokens: one
// token, and ThrottledCost tokens for RESOURCE_EXHAUSTED (the server, or a
// quota in front of it, says it is past what it serves: a retry adds to
// that load, where an UNAVAILABLE restart's does not).
func Cost(code codes.Code) int64 {
	if code == codes.ResourceExhausted {
		return ThrottledCost * Token
	}
	return Token
}

// ThrottledCost is what a RESOURCE_EXHAUSTED retry costs, in tokens: 3,
// so that a storm of RESOURCE_EXHAUSTED gets at most half the retries of
// the same storm of UNAVAILABLE (issue 44). The anchors: AWS's SDKs (their
// 2026 retry behaviour) keep a throttled client's retries apart in time,
// waiting from 1 000 ms after a throttling error against 50 ms after a
// transient one, and charge them 5 tokens of a 500-token quota against
// 14; Bigtable's maintainers do not retry RESOURCE_EXHAUSTED at all and
// call its blind retry a downward spiral (google-cloud-go#10388). The
// recipe waits as long after either code (the delays are the caller's
// Policy, and a server's RetryInfo or pushback), so the cost is the
// budgets' one lever: 3 pays about a third as many, between AWS's
// "later" and Bigtable's "never" (0.35 to 0.36 of UNAVAILABLE's retries;
// 2 paid 0.51 to 0.54 of them, short of the half: TestThrottledCostsMore,
// interceptor's TestThrottledStorm).
const ThrottledCost = 3

// Pay pays a retry that costs cost µtokens at now if a can, and returns
// what paid for it: from the reserve first if reserve is set (all of the
// cost, or none of it), else from the long-run pool alone. now is not
// before the last credit, and the pool is credited up to it.
func (a *Account) Pay(now int64, p Params, reserve bool, cost int64) (Receipt, bool) {
	if reserve && p.Window > 0 {
		if earned, floor := a.Reserve(now, p); earned+floor >= cost {
			a.Spend(now, p, cost, earned)
			e := min(cost, max(earned, 0))
			return Receipt{Tenth: a.Tenth(now, p), Earned: e, Floor: cost - e}, true
		}
	}
	if a.pool < cost {
		return Receipt{}, false
	}
	a.pool -= cost
	return Receipt{LongRun: cost}, true
}

// Refund gives back, at now, what r paid for a retry that the server
// served: a retry that succeeds costs nothing. The reserve's part goes
// back to the tenth it was paid in while that tenth is in the Window (once
// the Window forgot the payment, it owes nothing back), the floor's making
// the floor paid since the last success less; the long-run part to the
// pool, up to Burst. So a retry that fails keeps its cost: the failed
// retries of an outage stay within the Throttle's bound, and the retries in
// flight at any moment too (a refund comes after the retry ended); an
// outage in which no retry succeeds pays what it paid without refunds.
func (a *Account) Refund(now int64, p Params, r Receipt) {
	a.GiveBack(now, p, r.Tenth, r.Earned, r.Floor)
	if r.LongRun > 0 && a.pool < p.Burst {
		a.pool = min(a.pool+r.LongRun, p.Burst)
	}
}

// Charge counts against a, at now, one retry paid from elsewhere (a lease
// of the fleet's): from the reserve if reserve is set, else from the
// long-run pool. Unlike Take it always pays: what a does not hold it owes,
// and pays back from what it earns next.
func (a *Account) Charge(now int64, p Params, reserve bool) {
	if reserve && p.Window > 0 {
		earned, _ := a.Reserve(now, p)
		a.Spend(now, p, Token, earned)
		return
	}
	a.pool -= Token
}

// Available returns what a holds at now, the pool credited up to now: the
// reserve and the long-run pool (not less than 0).
func (a *Account) Available(now int64, p Params) int64 {
	now = a.Now(now)
	pool := max(min(a.pool+perSecond(p, now-a.last), max(p.Burst, a.pool)), 0)
	earned, floor := a.Reserve(now, p)
	return earned + floor + pool
}

// Earned returns the successes counted in the Window at now.
func (a *Account) Earned(now int64, p Params) int64 {
	if p.Window == 0 {
		return 0
	}
	var e int64
	a.live(a.Tenth(a.Now(now), p), func(t *Tenth) { e += t.Earned })
	return e
}

// perSecond is what PerSecond earns in dt µs (at most maxIdle), rounded
// down; the Lua script computes it with the same floating-point operations.
func perSecond(p Params, dt int64) int64 {
	return int64(math.Floor(float64(p.PerSecond) * float64(min(max(dt, 0), maxIdle)) / 1e6))
}

func width(p Params) int64 { return max(p.Window/tenths, 1) }

func mod(j int64) int64 { return (j%tenths + tenths) % tenths }

// at returns the bucket of tenth j, emptied if it held another one.
func (a *Account) at(j int64) *Tenth {
	t := &a.tenth[mod(j)]
	if t.Index != j {
		*t = Tenth{Index: j}
	}
	return t
}

// live calls f on each bucket of the Window that ends with tenth k.
func (a *Account) live(k int64, f func(*Tenth)) {
	for j := max(k-tenths+1, 0); j <= k; j++ {
		if t := &a.tenth[mod(j)]; t.Index == j {
			f(t)
		}
	}
}

// Fields is an Account's state, as a store keeps it (the Redis script's
// hash).
type Fields struct {
	Born, Last, Pool, Since int64
	Tenths                  [tenths]Tenth
}

// Fields returns a's state.
func (a *Account) Fields() Fields {
	return Fields{Born: a.born, Last: a.last, Pool: a.pool, Since: a.since, Tenths: a.tenth}
}

// Load makes a the Account of state f.
func (a *Account) Load(f Fields) {
	*a = Account{born: f.Born, last: f.Last, pool: f.Pool, since: f.Since, tenth: f.Tenths}
}
