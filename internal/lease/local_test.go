package lease

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/budget"
)

func at(us int64) time.Time { return time.UnixMicro(us) }

// TestLocalLease: a process holds its stock from its first renewal (alone,
// the whole Throttle), spends its lease while it is valid, gives it back at
// each renewal, falls back to its share when the lease expires, and joins
// again with the next grant.
func TestLocalLease(t *testing.T) {
	th := grpcbackoff.DefaultThrottle()
	var fleet Ledger
	l := NewLocal(th, time.Second, 10, at(t0))
	if l.Joined(at(t0)) || l.Interval() != 750*time.Millisecond {
		t.Fatalf("new Local: joined %v, interval %v; want not joined, 750ms", l.Joined(at(t0)), l.Interval())
	}
	renew := func(now int64, started, succeeded int64) Grant {
		r := l.Request(at(now), started, succeeded)
		g := fleet.Renew(now, l.Params(), r)
		l.Apply(at(now), at(now), g)
		return g
	}
	g := renew(t0, 0, 0)
	if !l.Joined(at(t0)) || g.Floor != 100*Token || g.LongRun != 10*Token || g.Size != 1 {
		t.Fatalf("after a grant: joined %v, grant %+v; want joined, the stock of a lone process: MinReserve and Burst", l.Joined(at(t0)), g)
	}
	// 100 calls, 100 successes: its stock is the 20 tokens they earned,
	// and the floors, given back and granted again.
	g = renew(t0+750_000, 100, 100)
	if g.Earned != 20*Token || g.Floor != 100*Token || g.LongRun != 10*Token {
		t.Fatalf("grant %+v, want 20 tokens of reserve earned, MinReserve and Burst", g)
	}
	for i := range 130 {
		if !l.Allow(at(t0 + 800_000)) {
			t.Fatalf("retry %d of 130 refused", i)
		}
	}
	if l.Allow(at(t0 + 800_000)) {
		t.Fatal("retry 131 paid: the lease held 130")
	}
	// It asks for the 131 retries it wanted and its stock: the earnings
	// and the floor are spent; so is Burst, which its stock held (the 10
	// tokens the 100 calls earned found it full, as they would one
	// Throttle's pool: issue 42, the Ledger's pool refilled beside the
	// stock, and granted 11); the pool holds 1.375 of PerSecond and of the
	// 10 calls since.
	g = renew(t0+1_500_000, 10, 0)
	if g.Earned != 0 || g.Floor != 0 || g.LongRun != 1*Token {
		t.Errorf("next grant %+v, want the long-run pool's 1 token", g)
	}
	// No renewal for a period: the lease expires; the share pays.
	if l.Joined(at(t0 + 2_500_000)) {
		t.Fatal("joined a period after the last renewal")
	}
	if s := l.State(at(t0 + 2_500_000)); s.Fallbacks != 1 || s.Size != 1 || s.Joined {
		t.Errorf("State %+v, want 1 fallback, fleet size 1", s)
	}
	// Its share (fleet size 1 since its first grant: the whole Throttle)
	// was charged with the 130 retries paid from its lease: its floor is
	// paid until a success, its earnings spent; its pool holds the 1 token
	// of FleetSize 10's Burst it started with, 11 of its 110 calls and 1.25
	// of PerSecond, less the 10 charged: 3.
	paid := 0
	for l.Allow(at(t0 + 2_500_000)) {
		paid++
	}
	if paid != 3 {
		t.Errorf("on its share: %d retries paid, want 3", paid)
	}
	g = renew(t0+3*sec, 0, 0)
	if !l.Joined(at(t0+3*sec)) || l.State(at(t0+3*sec)).Leases != 4 {
		t.Errorf("after a grant again: joined %v, state %+v", l.Joined(at(t0+3*sec)), l.State(at(t0+3*sec)))
	}
}

// TestFleetBound: P processes that share a budget, calls failing at once
// for 30 s, every failure asking for a retry: the fleet pays at most
// MinReserve + Reserve·S + Burst + (Ratio·R + PerSecond)·T, whatever P,
// and its retries are flat in P. Processes on their shares (the Ledger
// unreachable) hold the same bound; they pay fewer as P grows, their share
// of Burst falling under one token.
func TestFleetBound(t *testing.T) {
	th := grpcbackoff.DefaultThrottle()
	const calls = 2000 // per second, the whole fleet's
	for _, down := range []bool{false, true} {
		var first int
		for _, p := range []int{1, 10, 100, 1000} {
			paid, bound := runFleet(t, th, p, calls, down)
			if float64(paid) > bound*1.1 {
				t.Errorf("ledger down %v, %d processes: %d retries paid, bound %.0f (+10%%)", down, p, paid, bound)
			}
			if p == 10 {
				first = paid
			}
			if !down && p > 10 && (float64(paid) > 1.1*float64(first) || float64(paid) < 0.9*float64(first)) {
				t.Errorf("ledger down %v, %d processes: %d retries, with 10: %d; want within 10%%", down, p, paid, first)
			}
		}
	}
}

// runFleet runs p processes sharing calls/s evenly, for 20 s of success
// then 30 s of failure (each failed call asking for 3 retries), and
// returns the retries paid during the failure and the Throttle's bound.
// With down, the Ledger answers no renewal from the failure's start.
func runFleet(t *testing.T, th grpcbackoff.Throttle, p, calls int, down bool) (int, float64) {
	t.Helper()
	paid, bound, _ := runFleetFailover(t, th, p, calls, down, 0)
	return paid, bound
}

// runFleetFailover is runFleet with, if lag > 0, a failover 10 s into the
// failure to a replica that lost the Ledger's last lag µs of writes. It
// also returns the long-run and reserve tokens granted in those lost µs.
func runFleetFailover(t *testing.T, th grpcbackoff.Throttle, p, calls int, down bool, lag int64) (int, float64, int64) {
	t.Helper()
	var replica Ledger
	var lost int64
	failover := t0 + 30*sec
	rng := rand.New(rand.NewPCG(uint64(p), 1))
	var fleet Ledger
	locals := make([]*Local, p)
	next := make([]int64, p)
	counts := make([][2]int64, p)
	for i := range locals {
		locals[i] = NewLocal(th, time.Second, 1000, at(t0))
		next[i] = t0 + rng.Int64N(750_000)
	}
	const step = 10_000 // 10 ms
	paid, started, succeeded := 0, 0, 0
	outage := t0 + 20*sec
	for now := int64(t0); now < t0+50*sec; now += step {
		if lag > 0 && now == failover-lag {
			replica = fleet // what the replica has when the primary fails
		}
		if lag > 0 && now == failover {
			fleet = replica
		}
		failing := now >= outage
		for i, l := range locals {
			for now >= next[i] {
				if !(down && failing) {
					r := l.Request(at(next[i]), counts[i][0], counts[i][1])
					g := fleet.Renew(next[i], l.Params(), r)
					if lag > 0 && next[i] >= failover-lag && next[i] < failover {
						lost += g.Earned + g.Floor + g.LongRun
					}
					l.Apply(at(next[i]), at(next[i]), g)
				} else {
					l.Request(at(next[i]), counts[i][0], counts[i][1])
				}
				counts[i] = [2]int64{}
				next[i] += l.Interval().Microseconds()
			}
		}
		// calls/s over the fleet: each 10 ms step, calls/100 calls, on random processes.
		for range calls / 100 {
			i := rng.IntN(p)
			counts[i][0]++
			if now >= outage-10*sec && now < outage {
				succeeded++
			}
			if !failing {
				counts[i][1]++
				continue
			}
			started++
			for range 3 {
				if locals[i].Allow(at(now)) {
					paid++
				}
			}
		}
	}
	T := 30.0
	bound := float64(th.MinReserve) + th.Reserve*float64(succeeded) + float64(th.Burst) + (th.Ratio*float64(started)/T+th.PerSecond)*T
	t.Logf("ledger down %v, %4d processes, failover lag %v: %5d retries paid during the failure, bound %.0f", down, p, time.Duration(lag)*time.Microsecond, paid, bound)
	return paid, bound, lost
}

// TestFailover: a failover to a replica that lost the last half second of
// writes (replication is asynchronous) grants again what was granted in
// that half second, and no more: at most one lease period's grants.
func TestFailover(t *testing.T) {
	th := grpcbackoff.DefaultThrottle()
	for _, p := range []int{10, 1000} {
		before, _ := runFleet(t, th, p, 2000, false)
		after, bound, lost := runFleetFailover(t, th, p, 2000, false, 500_000)
		// One lease period's grants during the failure: what the pool
		// earns in a second, Ratio per call and PerSecond, and its Burst.
		period := float64(th.Burst) + th.Ratio*2000 + th.PerSecond
		if over := float64(after - before); over > float64(lost)/Token+10 || over > period {
			t.Errorf("%d processes: %d retries with a failover, %d without: %v more, want at most the %d granted in the lost writes and one period's %v",
				p, after, before, over, lost/Token, period)
		}
		if float64(after) > bound*1.1 {
			t.Errorf("%d processes: %d retries with a failover, bound %.0f", p, after, bound)
		}
	}
}

func BenchmarkRenew(b *testing.B) {
	p := fleetParams()
	var l Ledger
	for i := range b.N {
		l.Renew(t0+int64(i)*100, p, Request{Started: 1, Succeeded: 1, Span: 750_000, AskReserve: 2 * Token, AskLongRun: Token})
	}
}

func ExampleLocal() {
	th := grpcbackoff.DefaultThrottle()
	var fleet Ledger // in Redis, for a real fleet
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := NewLocal(th, time.Second, 1000, now)
	r := l.Request(now, 0, 0)
	l.Apply(now, now, fleet.Renew(now.UnixMicro(), l.Params(), r))
	fmt.Println(l.Joined(now), l.AllowLongRun(now))
	// Output: true true
}

// TestLocalCostAndRefund: a RESOURCE_EXHAUSTED retry costs ThrottledCost
// tokens, told
// of, asked for and paid together; a retry the server served gives its
// cost back: into the lease (and so to the fleet's pool at the next
// renewal), or off what the process owes when its share paid.
func TestLocalCostAndRefund(t *testing.T) {
	th := grpcbackoff.DefaultThrottle()
	cost := budget.Cost(codes.ResourceExhausted)
	k := float64(budget.ThrottledCost)
	var fleet Ledger
	l := NewLocal(th, time.Second, 10, at(t0))
	renew := func(now int64) Grant {
		g := fleet.Renew(now, l.Params(), l.Request(at(now), 0, 0))
		l.Apply(at(now), at(now), g)
		return g
	}
	renew(t0) // alone: the whole Throttle, 110 tokens
	tokens := func(now int64) float64 { return l.State(at(now)).Tokens }
	if !l.AllowCost(at(t0+1), false, cost) || tokens(t0+1) != 110-k {
		t.Fatalf("a RESOURCE_EXHAUSTED retry from the lease: %v tokens left, want %v", tokens(t0+1), 110-k)
	}
	l.Refund(at(t0+2), false, cost)
	if tokens(t0+2) != 110 {
		t.Errorf("after its refund: %v tokens, want 110", tokens(t0+2))
	}
	// Given back at the next renewal, the refund is the long-run pool's,
	// up to Burst: the floor's tenth keeps the tokens paid until the
	// Window forgets them, so that none comes back twice (the lease held the
	// Burst already: the fleet gets back 110 less the cost for now).
	if g := renew(t0 + 750_000); g.LongRun+g.Earned+g.Floor != (110-budget.ThrottledCost)*Token || g.LongRun != 10*Token {
		t.Errorf("the next grant: %+v, want the 100 tokens of the floor, the cost paid, and Burst", g)
	}
	// A second process, whose first lease the first one's stock leaves
	// empty: a retry it wants is asked for whole at its next renewal.
	w := NewLocal(th, time.Second, 10, at(t0+760_000))
	w.Apply(at(t0+760_000), at(t0+760_000), fleet.Renew(t0+760_000, w.Params(), w.Request(at(t0+760_000), 0, 0)))
	if w.WantCost(at(t0+800_000), at(t0+2*sec), false, cost) {
		t.Error("a renewal asked for early, the next one coming in time")
	}
	if r := w.Request(at(t0+1_510_000), 0, 0); r.AskRetries != cost {
		t.Errorf("the next request asks for %d µtokens of retries, want %d", r.AskRetries, cost)
	}
	// Without a lease (the Ledger unreachable), the share pays; what it
	// paid is owed; a refund makes it owed no more.
	s := NewLocal(th, time.Second, 1, at(t0))
	if !s.AllowCost(at(t0+sec), false, cost) {
		t.Fatal("the share refused a retry its Throttle pays")
	}
	if r := s.Request(at(t0+sec), 0, 0); r.Owed != cost {
		t.Errorf("after a retry paid from the share: owes %d µtokens, want %d", r.Owed, cost)
	}
	s.Refund(at(t0+sec), false, cost)
	if r := s.Request(at(t0+2*sec), 0, 0); r.Owed != 0 {
		t.Errorf("after its refund: owes %d µtokens, want nothing", r.Owed)
	}
}
