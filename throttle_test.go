package grpcbackoff_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/platformkit/grpcbackoff"
)

// t0 is an arbitrary start for budget clocks; budgets take the time as an
// argument, so no test sleeps.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// newBudget returns a budget for th. It panics if th is invalid.
func newBudget(th grpcbackoff.Throttle) *grpcbackoff.Budget {
	b, err := grpcbackoff.NewBudget(th)
	if err != nil {
		panic(err)
	}
	return b
}

func TestDefaultThrottle(t *testing.T) {
	got := grpcbackoff.DefaultThrottle()
	want := grpcbackoff.Throttle{Ratio: 0.1, PerSecond: 0.5, Burst: 10}
	if got != want {
		t.Errorf("DefaultThrottle() = %+v, want %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("DefaultThrottle().Validate() = %v, want nil", err)
	}
}

func TestThrottleValidate(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	tests := []struct {
		name string
		th   grpcbackoff.Throttle
		want []string
	}{
		{"default", grpcbackoff.DefaultThrottle(), nil},
		{"least", grpcbackoff.Throttle{Ratio: 0, PerSecond: 0, Burst: 1}, nil},
		{"Ratio 1", grpcbackoff.Throttle{Ratio: 1, PerSecond: 1000, Burst: math.MaxInt}, nil},

		{"zero Throttle", grpcbackoff.Throttle{}, []string{"Throttle.Burst (0) must be at least 1"}},
		{"negative Ratio", grpcbackoff.Throttle{Ratio: -0.1, Burst: 1}, []string{"Throttle.Ratio (-0.1) must be between 0 and 1"}},
		{"Ratio above 1", grpcbackoff.Throttle{Ratio: 1.5, Burst: 1}, []string{"Throttle.Ratio (1.5) must be between 0 and 1"}},
		{"NaN Ratio", grpcbackoff.Throttle{Ratio: nan, Burst: 1}, []string{"Throttle.Ratio (NaN) must be between 0 and 1"}},
		{"+Inf Ratio", grpcbackoff.Throttle{Ratio: inf, Burst: 1}, []string{"Throttle.Ratio (+Inf) must be between 0 and 1"}},
		{"negative PerSecond", grpcbackoff.Throttle{PerSecond: -1, Burst: 1}, []string{"Throttle.PerSecond (-1) must be a finite number ≥ 0"}},
		{"NaN PerSecond", grpcbackoff.Throttle{PerSecond: nan, Burst: 1}, []string{"Throttle.PerSecond (NaN) must be a finite number ≥ 0"}},
		{"+Inf PerSecond", grpcbackoff.Throttle{PerSecond: inf, Burst: 1}, []string{"Throttle.PerSecond (+Inf) must be a finite number ≥ 0"}},
		{"-Inf PerSecond", grpcbackoff.Throttle{PerSecond: -inf, Burst: 1}, []string{"Throttle.PerSecond (-Inf) must be a finite number ≥ 0"}},
		{"negative Burst", grpcbackoff.Throttle{Ratio: 0.1, Burst: -1}, []string{"Throttle.Burst (-1) must be at least 1"}},
		{"everything wrong", grpcbackoff.Throttle{Ratio: nan, PerSecond: -0.5, Burst: 0}, []string{
			"Throttle.Ratio (NaN) must be between 0 and 1",
			"Throttle.PerSecond (-0.5) must be a finite number ≥ 0",
			"Throttle.Burst (0) must be at least 1",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkJoined(t, "Validate()", tt.th.Validate(), tt.want)

			b, err := grpcbackoff.NewBudget(tt.th)
			if tt.want == nil {
				if b == nil || err != nil {
					t.Fatalf("NewBudget(%+v) = %v, %v, want a budget, nil", tt.th, b, err)
				}
				if got, want := b.Tokens(t0), float64(tt.th.Burst); got != want {
					t.Errorf("NewBudget(%+v).Tokens() = %v, want %v", tt.th, got, want)
				}
				return
			}
			if b != nil {
				t.Errorf("NewBudget(%+v) = %v, want nil", tt.th, b)
			}
			checkJoined(t, "NewBudget()", err, tt.want)
		})
	}
}

// TestBudgetLoneCall checks that one call on an idle client can use every
// retry of DefaultPolicy, the budget being full to begin with.
func TestBudgetLoneCall(t *testing.T) {
	b := newBudget(grpcbackoff.DefaultThrottle())
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
		{"starts full, empties", grpcbackoff.DefaultThrottle(), []step{
			tokens(0, 10),
			allow(0, true, 10),
			allow(0, false, 3),
			tokens(0, 0),
		}},
		{"refills at PerSecond", grpcbackoff.DefaultThrottle(), []step{
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
		{"Ratio per call started", grpcbackoff.DefaultThrottle(), []step{
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
		{"Ratio and PerSecond add up", grpcbackoff.DefaultThrottle(), []step{
			allow(0, true, 10),
			started(10),
			tokens(2*time.Second, 2),
			allow(2*time.Second, true, 2),
			allow(2*time.Second, false, 1),
		}},
		{"capped at Burst by time", grpcbackoff.DefaultThrottle(), []step{
			tokens(0, 10),
			tokens(time.Hour, 10),
			allow(time.Hour, true, 10),
			allow(time.Hour, false, 1),
		}},
		{"capped at Burst by calls", grpcbackoff.DefaultThrottle(), []step{
			started(1000),
			tokens(0, 10),
			allow(0, true, 10),
			allow(0, false, 1),
		}},
		{"time going backwards adds nothing", grpcbackoff.DefaultThrottle(), []step{
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
			b := newBudget(tt.th)
			for i, s := range tt.steps {
				now := t0.Add(s.at)
				switch s.op {
				case "started":
					for range s.n {
						b.Started()
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
		{grpcbackoff.DefaultThrottle(), 100, 60},
		{grpcbackoff.DefaultThrottle(), 10, 60},
		{grpcbackoff.DefaultThrottle(), 0, 60},
		{grpcbackoff.DefaultThrottle(), 1000, 10},
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
	th := grpcbackoff.DefaultThrottle()
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

// budgetModel is the Budget that Throttle describes, written the plain way:
// every call started adds Ratio at once, and every step caps at Burst.
type budgetModel struct {
	th     grpcbackoff.Throttle
	tokens float64
	last   time.Time
}

func (m *budgetModel) started() {
	m.tokens = min(m.tokens+m.th.Ratio, float64(m.th.Burst))
}

func (m *budgetModel) refill(now time.Time) {
	if !m.last.IsZero() && now.After(m.last) {
		m.tokens = min(m.tokens+now.Sub(m.last).Seconds()*m.th.PerSecond, float64(m.th.Burst))
	}
	if m.last.IsZero() || now.After(m.last) {
		m.last = now
	}
}

func (m *budgetModel) allow(now time.Time) bool {
	m.refill(now)
	if m.tokens < 1 {
		return false
	}
	m.tokens--
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
		m := &budgetModel{th: th, tokens: float64(th.Burst)}
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
				if got != m.tokens {
					t.Fatalf("trial %d (%+v), step %d: Tokens = %v, model says %v; steps: %v", trial, th, i, got, m.tokens, log)
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
