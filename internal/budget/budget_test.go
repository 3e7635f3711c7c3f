package budget_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/budget"
)

// t0 is an arbitrary start for budget clocks; budgets take the time as an
// argument, so no test sleeps.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// newBudget returns a budget for th that starts at t0. It panics if th is
// invalid.
func newBudget(th grpcbackoff.Throttle) *budget.Budget {
	b, err := budget.New(th, t0)
	if err != nil {
		panic(err)
	}
	return b
}

// longRun is DefaultThrottle without its reserve: the long-run allowance
// alone, as the whole budget was before the reserve.
func longRun() grpcbackoff.Throttle {
	th := grpcbackoff.DefaultThrottle()
	th.Reserve, th.MinReserve, th.Window = 0, 0, 0
	return th
}

// TestNewValidates: New refuses an invalid Throttle with Validate's error,
// and a new budget holds Burst, plus MinReserve during its first Window.
func TestNewValidates(t *testing.T) {
	if b, err := budget.New(grpcbackoff.Throttle{}, t0); b != nil || err == nil || err.Error() != "grpcbackoff: Throttle.Burst (0) must be at least 1" {
		t.Errorf("New(Throttle{}) = %v, %v, want nil and Validate's error", b, err)
	}
	for _, th := range []grpcbackoff.Throttle{longRun(), grpcbackoff.DefaultThrottle(), {Burst: 3}, {Burst: 1, MinReserve: 7, Window: time.Second}} {
		b := newBudget(th)
		if got, want := b.Tokens(t0), float64(th.Burst+th.MinReserve); got != want {
			t.Errorf("New(%+v).Tokens(t0) = %v, want %v", th, got, want)
		}
	}
}

// TestBudgetLoneCall checks that one call on an idle client can use every
// retry of DefaultPolicy, the budget being full to begin with.
func TestBudgetLoneCall(t *testing.T) {
	b := newBudget(longRun())
	p := grpcbackoff.DefaultPolicy()
	b.Started()
	now := t0
	for retry := range p.MaxAttempts - 1 {
		now = now.Add(p.Nominal(retry)) // t0+1s, +3s, +7s, +15s, +31s, +63s, +95s
		if !b.Allow(now) {
			t.Fatalf("Allow(t0+%v) for retry %d = false, want true", now.Sub(t0), retry)
		}
	}
}

// TestBudgetBurst checks that with no time passing, Burst retries
// are allowed and no more.
func TestBudgetBurst(t *testing.T) {
	for _, burst := range []int{1, 2, 10, 100} {
		t.Run(fmt.Sprint(burst), func(t *testing.T) {
			b := newBudget(grpcbackoff.Throttle{Ratio: 0.1, PerSecond: 0.5, Burst: burst})
			for i := range burst {
				if !b.Allow(t0) {
					t.Fatalf("Allow(t0) number %d = false, want true (Burst %d)", i+1, burst)
				}
			}
			if b.Allow(t0) {
				t.Errorf("Allow(t0) number %d = true, want false (Burst %d)", burst+1, burst)
			}
			if got := b.Tokens(t0); got != 0 {
				t.Errorf("Tokens(t0) = %v, want 0", got)
			}
		})
	}
}

// step is one operation on a budget and what it should give.
type step struct {
	op     string        // "allow", "started" or "tokens"
	at     time.Duration // time since t0, for allow and tokens
	n      int           // how many times, for allow and started
	allow  bool          // want, for allow
	tokens float64       // want, for tokens
}

// allow is n calls of Allow(t0+at), each wanting want.
func allow(at time.Duration, want bool, n int) step {
	return step{op: "allow", at: at, allow: want, n: n}
}

// tokens is a call of Tokens(t0+at), wanting want.
func tokens(at time.Duration, want float64) step {
	return step{op: "tokens", at: at, tokens: want}
}

// started is n calls of Started.
func started(n int) step {
	return step{op: "started", n: n}
}

func TestBudget(t *testing.T) {
	tests := []struct {
		name  string
		th    grpcbackoff.Throttle
		steps []step
	}{
		{"starts full, empties", longRun(), []step{
			tokens(0, 10),
			allow(0, true, 10),
			allow(0, false, 3),
			tokens(0, 0),
		}},
		{"refills at PerSecond", longRun(), []step{
			allow(0, true, 10),
			allow(time.Second, false, 1),
			tokens(time.Second, 0.5),
			tokens(1500*time.Millisecond, 0.75),
			allow(2*time.Second, true, 1),
			allow(2*time.Second, false, 1),
			tokens(2*time.Second, 0),
			allow(8*time.Second, true, 3),
			allow(8*time.Second, false, 1),
		}},
		{"Ratio per call started", longRun(), []step{
			allow(0, true, 10),
			started(5),
			tokens(0, 0.5),
			allow(0, false, 1),
			started(5),
			tokens(0, 1),
			allow(0, true, 1),
			allow(0, false, 1),
			started(30),
			allow(0, true, 3),
			allow(0, false, 1),
		}},
		{"Ratio and PerSecond add up", longRun(), []step{
			allow(0, true, 10),
			started(10),
			tokens(2*time.Second, 2),
			allow(2*time.Second, true, 2),
			allow(2*time.Second, false, 1),
		}},
		{"capped at Burst by time", longRun(), []step{
			tokens(0, 10),
			tokens(time.Hour, 10),
			allow(time.Hour, true, 10),
			allow(time.Hour, false, 1),
		}},
		{"capped at Burst by calls", longRun(), []step{
			started(1000),
			tokens(0, 10),
			allow(0, true, 10),
			allow(0, false, 1),
		}},
		{"time going backwards adds nothing", longRun(), []step{
			allow(time.Hour, true, 10),
			tokens(time.Hour, 0),
			tokens(0, 0),
			allow(0, false, 1),
			tokens(time.Hour-time.Minute, 0),
			// Credit counts from the latest time seen (t0+1h), not from t0.
			tokens(time.Hour+2*time.Second, 1),
			allow(time.Hour+2*time.Second, true, 1),
			allow(time.Hour+2*time.Second, false, 1),
		}},
		{"no Ratio, no PerSecond: Burst only", grpcbackoff.Throttle{Burst: 3}, []step{
			allow(0, true, 3),
			started(100),
			allow(24*time.Hour, false, 1),
			tokens(365*24*time.Hour, 0),
		}},
		{"Ratio 1", grpcbackoff.Throttle{Ratio: 1, Burst: 2}, []step{
			allow(0, true, 2),
			started(1),
			allow(0, true, 1),
			allow(0, false, 1),
			started(5),
			allow(0, true, 2),
			allow(0, false, 1),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runSteps(t, newBudget(tt.th), tt.steps)
		})
	}
}

// runSteps runs steps on b, failing the test at the first wrong answer.
func runSteps(t *testing.T, b *budget.Budget, steps []step) {
	t.Helper()
	var now time.Time
	budget.SetClock(b, func() time.Time { return now })
	for i, s := range steps {
		now = t0.Add(s.at)
		switch s.op {
		case "started":
			for range s.n {
				b.Started()
			}
		case "succeeded":
			for range s.n {
				b.Succeeded()
			}
		case "allowLongRun":
			for j := range s.n {
				if got := b.AllowLongRun(now); got != s.allow {
					t.Fatalf("step %d: AllowLongRun(t0+%v) number %d = %v, want %v", i, s.at, j+1, got, s.allow)
				}
			}
		case "allow":
			for j := range s.n {
				if got := b.Allow(now); got != s.allow {
					t.Fatalf("step %d: Allow(t0+%v) number %d = %v, want %v", i, s.at, j+1, got, s.allow)
				}
			}
		case "tokens":
			if got := b.Tokens(now); math.Abs(got-s.tokens) > 1e-9 {
				t.Fatalf("step %d: Tokens(t0+%v) = %v, want %v", i, s.at, got, s.tokens)
			}
		}
	}
}

// succeeded is n calls of Succeeded.
func succeeded(n int) step {
	return step{op: "succeeded", n: n}
}

// TestReserve checks the reserve's arithmetic: what successes earn, when it
// expires, what retries cost and for how long, and MinReserve.
func TestReserve(t *testing.T) {
	s := time.Second
	// reserveOnly is a budget whose long-run allowance is one retry, never
	// refilled, so that Tokens shows the reserve plus at most 1.
	reserveOnly := func(reserve float64, minReserve int) grpcbackoff.Throttle {
		return grpcbackoff.Throttle{Burst: 1, Reserve: reserve, MinReserve: minReserve, Window: 10 * s}
	}
	tests := []struct {
		name  string
		th    grpcbackoff.Throttle
		steps []step
	}{
		{"successes earn Reserve each", reserveOnly(0.5, 0), []step{
			tokens(0, 1),
			succeeded(10),
			tokens(s, 6), // 5 from the reserve
			allow(s, true, 6),
			allow(s, false, 1),
		}},
		{"earnings expire after the Window", reserveOnly(0.5, 0), []step{
			tokens(0, 1),
			succeeded(10), // spread over (0, 1 s]: the first tenth
			tokens(s, 6),
			tokens(10*s-1, 6),
			tokens(10*s, 1), // the window is now [1 s, 11 s)
		}},
		// Re-derived for issue 35 (one arithmetic with the fleet's Ledger):
		// the earnings a retry spent were the oldest, and left with them.
		{"retries paid count against the earnings for a Window", reserveOnly(0.5, 0), []step{
			allow(0, true, 1), // the long-run retry
			succeeded(20),
			tokens(s, 10),
			allow(5*s, true, 4), // paid in the tenth [5 s, 6 s)
			tokens(5*s, 6),
			{op: "succeeded", at: 6 * s, n: 20}, // the first at 6 s: spread over (6 s, 12 s]
			// The first 20 expired, not the 4 paid.
			tokens(12*s, 0.5*20-4),
			// The tenth [5 s, 6 s) expired too, with its 4 paid.
			tokens(15*s, 0.5*20),
		}},
		// Re-derived for issue 27: the floor was MinReserve only while a
		// success was in the Window (or the budget young), so a restart
		// after a quiet spell found none.
		{"MinReserve once since the last success, whole after a quiet spell", reserveOnly(0, 3), []step{
			tokens(0, 4),
			allow(9*s, true, 3), // from MinReserve
			tokens(9*s, 1),
			tokens(10*s, 1), // no success since: the floor stays paid
			tokens(60*s, 1), // however long
			succeeded(1),
			tokens(62*s, 1+3),    // a success: the floor is whole again
			allow(62*s, true, 4), // the floor thrice, then the long-run retry
			tokens(62*s, 0),
			tokens(120*s, 0), // no success since: an outage may be under way
			succeeded(1),
			tokens(121*s, 3),
			tokens(300*s, 3), // a quiet spell after a success keeps the floor whole
		}},
		{"a restored budget's floor waits for a success", reserveOnly(0.2, 3), []step{
			{op: "restored"}, // saved with everything spent
			tokens(0, 0),
			tokens(30*s, 0),
			succeeded(1),
			tokens(31*s, 0.2+3),
		}},
		{"earnings first, then MinReserve", reserveOnly(0.5, 2), []step{
			succeeded(3),
			tokens(s, 1+1.5+2),
			allow(s, true, 2), // 1.5 earned, then 0.5 of MinReserve
			tokens(s, 1+1.5),
			allow(s, true, 2), // MinReserve, then the long-run retry
			allow(s, false, 1),
		}},
		{"AllowLongRun leaves the reserve alone", reserveOnly(0.5, 2), []step{
			succeeded(2),
			tokens(s, 1+1+2),
			{op: "allowLongRun", at: s, n: 1, allow: true},
			{op: "allowLongRun", at: s, n: 1, allow: false},
			tokens(s, 1+2),
			allow(s, true, 3),
			allow(s, false, 1),
		}},
		{"successes before a long quiet spell spread over it", reserveOnly(0.5, 0), []step{
			succeeded(60),      // at unknown times over (0, 20 s]: fewer than datingEvery
			tokens(20*s, 14.5), // the window [11 s, 21 s) holds 9/20 of them: 27, and 1 long-run
		}},
		// Re-derived for issues 20 and 34: the first success after the
		// last dating reads the clock, so a burst after a quiet spell is not
		// spread over it (before issue 20 the 128 successes of this step
		// were; before issue 34 the first 64).
		{"a burst after a quiet spell is dated when it happens", reserveOnly(0.5, 0), []step{
			tokens(0, 1),
			{op: "succeeded", at: 20 * s, n: 128},
			tokens(20*s, 1+0.5*128),
		}},
		{"at most datingEvery successes are dated early", reserveOnly(0.5, 0), []step{
			tokens(0, 1),
			{op: "succeeded", at: 20 * s, n: 64 + 63}, // 64 dated at 20 s; 63 not yet
			// The 63 spread over (20 s, 30 s]: 57 after 21 s, in the window
			// (successes are counted whole, as in the fleet's Ledger).
			tokens(30*s, 1+0.5*57),
		}},
		{"time going backwards neither earns nor expires", reserveOnly(1, 0), []step{
			succeeded(4),
			tokens(2*s, 5),
			tokens(s, 5),
			allow(0, true, 5),
			allow(0, false, 1),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBudget(tt.th)
			if tt.steps[0].op == "restored" {
				for b.Allow(t0) {
				}
				b, _ = budget.Restored(tt.th, b.Save(t0), t0)
			}
			runSteps(t, b, tt.steps)
		})
	}
}

// TestBudgetOutage simulates a total outage: calls start at a steady rate,
// every one fails and wants to retry as soon as it may. The retries allowed
// must stay within the bound Throttle documents, Burst + (Ratio·R +
// PerSecond)·T, and use all of it.
func TestBudgetOutage(t *testing.T) {
	tests := []struct {
		th      grpcbackoff.Throttle
		rate    int // calls started per second
		seconds int
	}{
		{longRun(), 100, 60},
		{longRun(), 10, 60},
		{longRun(), 0, 60},
		{longRun(), 1000, 10},
		{grpcbackoff.Throttle{Ratio: 0.5, PerSecond: 0, Burst: 1}, 100, 30},
		{grpcbackoff.Throttle{Ratio: 0.01, PerSecond: 2, Burst: 50}, 300, 120},
	}
	const ticksPerSecond = 100
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%+v/%d per s/%d s", tt.th, tt.rate, tt.seconds), func(t *testing.T) {
			b := newBudget(tt.th)
			allowed, calls := 0, 0
			drain := func(now time.Time) {
				for b.Allow(now) {
					allowed++
				}
			}
			ticks := tt.seconds * ticksPerSecond
			for i := range ticks {
				now := t0.Add(time.Duration(i) * time.Second / ticksPerSecond)
				// The retries due now go first, so that the calls
				// started now do not overflow a full budget.
				drain(now)
				for ; calls < tt.rate*(i+1)/ticksPerSecond; calls++ {
					b.Started()
				}
			}
			drain(t0.Add(time.Duration(tt.seconds) * time.Second))

			if want := tt.rate * tt.seconds; calls != want {
				t.Fatalf("simulation started %d calls, want %d", calls, want)
			}
			bound := float64(tt.th.Burst) + (tt.th.Ratio*float64(tt.rate)+tt.th.PerSecond)*float64(tt.seconds)
			t.Logf("%d calls, %d retries allowed, bound %v", calls, allowed, bound)
			if float64(allowed) > bound+1e-9 {
				t.Errorf("Allow was true %d times, want at most %v", allowed, bound)
			}
			if float64(allowed) < bound-1 {
				t.Errorf("Allow was true %d times, want at least %v", allowed, bound-1)
			}
		})
	}
}

// TestBudgetConcurrent runs Started, Allow and Tokens from many goroutines
// (run it with -race) and checks that no more retries are allowed than were
// earned.
func TestBudgetConcurrent(t *testing.T) {
	const (
		goroutines = 32
		iterations = 500
	)
	th := longRun()
	b := newBudget(th)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range iterations {
				// Times differ between goroutines, so the budget also sees
				// time going backwards; all are within [t0, t0+1s).
				now := t0.Add(time.Duration((g*7+i)%1000) * time.Millisecond)
				b.Started()
				if b.Allow(now) {
					allowed.Add(1)
				}
				if tok := b.Tokens(now); tok < 0 || tok > float64(th.Burst) {
					t.Errorf("Tokens(t0+%v) = %v, want in [0, %d]", now.Sub(t0), tok, th.Burst)
				}
			}
		})
	}
	wg.Wait()

	last := t0.Add(time.Second)
	bound := float64(th.Burst) + th.Ratio*goroutines*iterations + th.PerSecond*last.Sub(t0).Seconds()
	got := allowed.Load()
	if float64(got) > bound {
		t.Errorf("Allow was true %d times, want at most %v", got, bound)
	}
	if got < int64(th.Burst) {
		t.Errorf("Allow was true %d times, want at least Burst (%d)", got, th.Burst)
	}
	if left := b.Tokens(last); float64(got)+left > bound+1e-6 {
		t.Errorf("Allow was true %d times with %v tokens left, want at most %v earned in all", got, left, bound)
	}
}

// budgetModel is the Budget that Throttle describes, written the plain way,
// in the Account's units (µtokens): every call started adds Ratio at once,
// and every step caps at Burst.
type budgetModel struct {
	th     grpcbackoff.Throttle
	tokens int64
	last   time.Time
}

func (m *budgetModel) started() {
	m.tokens = min(m.tokens+int64(m.th.Ratio*budget.Token), int64(m.th.Burst)*budget.Token)
}

func (m *budgetModel) refill(now time.Time) {
	if !m.last.IsZero() && now.After(m.last) {
		earned := math.Floor(m.th.PerSecond * budget.Token * float64(now.Sub(m.last).Microseconds()) / 1e6)
		m.tokens = min(m.tokens+int64(earned), int64(m.th.Burst)*budget.Token)
	}
	if m.last.IsZero() || now.After(m.last) {
		m.last = now
	}
}

func (m *budgetModel) allow(now time.Time) bool {
	m.refill(now)
	if m.tokens < budget.Token {
		return false
	}
	m.tokens -= budget.Token
	return true
}

// TestBudgetMatchesModel runs random sequences of Started, Allow and Tokens
// on a Budget and on budgetModel, and wants the same answers every time: the
// Budget's shortcuts (counting calls in bulk, not counting them while full)
// change nothing. Ratios, rates and times are multiples of powers of two, so
// the sums are exact in both.
func TestBudgetMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	ratios := []float64{0, 0.125, 0.25, 0.5, 1}
	rates := []float64{0, 0.25, 0.5, 2}
	const tick = time.Second / 64
	for trial := range 300 {
		th := grpcbackoff.Throttle{
			Ratio:     ratios[rng.IntN(len(ratios))],
			PerSecond: rates[rng.IntN(len(rates))],
			Burst:     1 + rng.IntN(12),
		}
		b := newBudget(th)
		m := &budgetModel{th: th, tokens: int64(th.Burst) * budget.Token, last: t0}
		now := t0
		var log []string
		for i := range 400 {
			switch op := rng.IntN(10); {
			case op < 5: // a burst of calls, sometimes more than creditEvery
				n := 1 + rng.IntN(100)
				for range n {
					b.Started()
					m.started()
				}
				log = append(log, fmt.Sprintf("started(%d)", n))
			case op < 8:
				now = now.Add(time.Duration(rng.IntN(64)) * tick)
				got, want := b.Allow(now), m.allow(now)
				log = append(log, fmt.Sprintf("Allow(t0+%v)=%v", now.Sub(t0), got))
				if got != want {
					t.Fatalf("trial %d (%+v), step %d: Allow = %v, model says %v; steps: %v", trial, th, i, got, want, log)
				}
			default:
				// Sometimes earlier than the latest time seen.
				at := now.Add(time.Duration(rng.IntN(64)-16) * tick)
				got := b.Tokens(at)
				m.refill(at)
				log = append(log, fmt.Sprintf("Tokens(t0+%v)=%v", at.Sub(t0), got))
				if want := float64(m.tokens) / budget.Token; got != want {
					t.Fatalf("trial %d (%+v), step %d: Tokens = %v, model says %v; steps: %v", trial, th, i, got, want, log)
				}
			}
		}
	}
}

// TestBudgetConcurrentStartsAllCount checks the other direction from
// TestBudgetConcurrent: calls started concurrently, while Tokens also
// credits them, each earn exactly Ratio (0.125, so the sums are exact).
func TestBudgetConcurrentStartsAllCount(t *testing.T) {
	th := grpcbackoff.Throttle{Ratio: 0.125, Burst: 1000}
	b := newBudget(th)
	for range th.Burst {
		if !b.Allow(t0) {
			t.Fatal("a new budget refused one of its Burst retries")
		}
	}
	const goroutines, calls = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range calls {
				b.Started()
				if (g+i)%97 == 0 {
					b.Tokens(t0)
				}
			}
		})
	}
	wg.Wait()
	if got, want := b.Tokens(t0), goroutines*calls*th.Ratio; got != want {
		t.Errorf("after %d calls, Tokens = %v, want %v", goroutines*calls, got, want)
	}
}

// TestDefaultLoneCall checks that one call can use every retry of
// DefaultPolicy under DefaultThrottle, on a new budget and on one that has
// been idle for an hour (its reserve gone, the long-run allowance full).
func TestDefaultLoneCall(t *testing.T) {
	p := grpcbackoff.DefaultPolicy()
	for _, idle := range []time.Duration{0, time.Hour} {
		b := newBudget(grpcbackoff.DefaultThrottle())
		b.Started()
		now := t0.Add(idle)
		for retry := range p.MaxAttempts - 1 {
			now = now.Add(p.Nominal(retry))
			if !b.Allow(now) {
				t.Fatalf("idle %v: Allow(t0+%v) for retry %d = false, want true", idle, now.Sub(t0), retry)
			}
		}
	}
}

// TestReserveTotalOutage simulates traffic that succeeds at a steady rate,
// then a total outage in which every call fails and wants to retry as soon
// as it may. The retries allowed stay within the bound Throttle documents,
// MinReserve + Reserve·S + Burst + (Ratio·R + PerSecond)·T, S being the
// successes of the Window before the outage, and use most of it.
func TestReserveTotalOutage(t *testing.T) {
	tests := []struct {
		th      grpcbackoff.Throttle
		rate    int // calls started per second
		healthy int // seconds of success before the outage
		seconds int // of outage
	}{
		{grpcbackoff.DefaultThrottle(), 100, 30, 60},
		{grpcbackoff.DefaultThrottle(), 1000, 30, 60},
		{grpcbackoff.DefaultThrottle(), 10, 30, 60}, // MinReserve
		{grpcbackoff.DefaultThrottle(), 100, 0, 60}, // a new budget: MinReserve
		{grpcbackoff.DefaultThrottle(), 100, 5, 60}, // half a Window of success
		{grpcbackoff.Throttle{Ratio: 0, Burst: 1, Reserve: 1, Window: time.Second}, 200, 3, 10},
	}
	const ticksPerSecond = 100
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%+v/%d per s/%d s healthy/%d s down", tt.th, tt.rate, tt.healthy, tt.seconds), func(t *testing.T) {
			b := newBudget(tt.th)
			calls, succeeded := 0, 0
			var successes []time.Time
			tick := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second / ticksPerSecond) }
			var now time.Time
			budget.SetClock(b, func() time.Time { return now })
			for i := range tt.healthy * ticksPerSecond {
				now = tick(i)
				for ; calls < tt.rate*(i+1)/ticksPerSecond; calls++ {
					b.Started()
					b.Succeeded()
					successes = append(successes, tick(i))
					succeeded++
				}
				if i%ticksPerSecond == 0 {
					b.Tokens(tick(i)) // an occasional observation, as a rare retry would make
				}
			}
			outage := tick(tt.healthy * ticksPerSecond)
			var inWindow int
			for _, at := range successes {
				if outage.Sub(at) < tt.th.Window {
					inWindow++
				}
			}
			allowed, failing := 0, 0
			for i := range tt.seconds * ticksPerSecond {
				now := tick(tt.healthy*ticksPerSecond + i)
				for b.Allow(now) {
					allowed++
				}
				for ; failing < tt.rate*(i+1)/ticksPerSecond; failing++ {
					b.Started()
				}
			}
			for b.Allow(outage.Add(time.Duration(tt.seconds) * time.Second)) {
				allowed++
			}
			reserve := float64(tt.th.MinReserve) + tt.th.Reserve*float64(inWindow)
			bound := reserve + float64(tt.th.Burst) + (tt.th.Ratio*float64(tt.rate)+tt.th.PerSecond)*float64(tt.seconds)
			t.Logf("%d calls failed, %d retries allowed; bound %.1f (reserve %.1f)", failing, allowed, bound, reserve)
			if float64(allowed) > bound+1e-9 {
				t.Errorf("Allow was true %d times, want at most %.1f", allowed, bound)
			}
			if low := bound - 0.1*reserve - 2; float64(allowed) < low {
				t.Errorf("Allow was true %d times, want at least %.1f (the bound less a tenth of the reserve, which the moving window may lose)", allowed, low)
			}
		})
	}
}

// TestSucceededConcurrent counts successes from many goroutines while
// others spend the reserve (run it with -race): every success is counted
// once, and no more retries are allowed than were earned.
func TestSucceededConcurrent(t *testing.T) {
	th := grpcbackoff.Throttle{Burst: 1, Reserve: 0.5, Window: time.Hour}
	b := newBudget(th)
	budget.SetClock(b, func() time.Time { return t0.Add(time.Second) })
	const goroutines, calls = 8, 1000
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range calls {
				b.Succeeded()
				if (g+i)%10 == 0 && b.Allow(t0.Add(time.Second)) {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	earned := th.Reserve*goroutines*calls + float64(th.Burst)
	got := float64(allowed.Load()) + b.Tokens(t0.Add(time.Second))
	if got != earned {
		t.Errorf("allowed + left = %v, want the %v earned", got, earned)
	}
}

// TestHotPathAllocatesNothing: Started and Succeeded, on every call's path,
// allocate nothing.
func TestHotPathAllocatesNothing(t *testing.T) {
	b := newBudget(grpcbackoff.DefaultThrottle())
	b.Allow(t0) // not full: Started counts
	if n := testing.AllocsPerRun(1000, func() { b.Started(); b.Succeeded(); b.SucceededOn(7) }); n != 0 {
		t.Errorf("Started and Succeeded allocate %v times, want 0", n)
	}
}

// BenchmarkSuccessPath is what every successful call costs the budget:
// Started and Succeeded, from as many goroutines as GOMAXPROCS.
func BenchmarkSuccessPath(b *testing.B) {
	bt := newBudget(grpcbackoff.DefaultThrottle())
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			bt.Started()
			bt.Succeeded()
		}
	})
}

// TestReserveAfterQuietSpell: bursts of n calls every 60 s, all
// successful, then a restart as the sixth burst starts: each of its calls
// fails once and asks for a retry. After a quiet spell longer than the
// Window, the earnings of the last burst have expired (as they must, for
// the bound of a total outage after a quiet spell), but the floor is whole
// whatever n: the restart's retries are paid up to MinReserve + Burst, 110
// with DefaultThrottle (and Ratio of the calls started beyond), wherever
// the batches of successes ended. (Issue 27:
// with 64 calls, 54 were refused, as the last burst's successes were dated
// out of the Window; with 63 none, as they were spread over the quiet
// spell.)
func TestReserveAfterQuietSpell(t *testing.T) {
	th := grpcbackoff.DefaultThrottle()
	for _, n := range []int{1, 63, 64, 65, 100, 110, 128, 256} {
		b := newBudget(th)
		var now time.Time
		budget.SetClock(b, func() time.Time { return now })
		for burst := range 5 {
			now = t0.Add(time.Duration(burst) * time.Minute)
			for range n {
				b.Started()
				b.Succeeded()
			}
		}
		now = t0.Add(5 * time.Minute)
		paid := 0
		for range n {
			b.Started()
			if b.Allow(now) {
				paid++
			}
		}
		if want := min(n, th.MinReserve+th.Burst); paid < want {
			t.Errorf("bursts of %d: %d of the restart's retries paid, want at least %d", n, paid, want)
		}
	}
}

// TestSucceededOn: successes recorded on several stripes earn what as
// many recorded on one earn.
func TestSucceededOn(t *testing.T) {
	th := grpcbackoff.Throttle{Burst: 1, Reserve: 0.5, Window: 10 * time.Second}
	one, many := newBudget(th), newBudget(th)
	var now time.Time
	budget.SetClock(one, func() time.Time { return now })
	budget.SetClock(many, func() time.Time { return now })
	now = t0.Add(20 * time.Second)
	for range 64 {
		one.Succeeded()
	}
	for i := range 64 {
		many.SucceededOn(i%4*budget.Stripes + i%4) // stripes 0 to 3, whatever the multiple
	}
	at := now // where 64 successes on one stripe were dated
	if a, b := one.Tokens(at), many.Tokens(at); a != b || a <= 1 {
		t.Errorf("Tokens after 64 successes: on one stripe %v, on 4 stripes %v; want them equal, and the successes counted", a, b)
	}
}
