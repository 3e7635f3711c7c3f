package sim

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/platformkit/grpcbackoff"
)

// TestQueuePopsInTimeOrder pushes events at random times from the last
// popped on, as the simulation does, and pops them in time order.
func TestQueuePopsInTimeOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var q queue
	now := int64(0)
	for i := range 100_000 {
		q.push(event{at: now + rng.Int64N([]int64{1, 1e3, 1e9, 1e12}[i%4]), id: int32(i)})
		if i%3 == 0 {
			now = q.pop().at
		}
	}
	pushed := q.len()
	last := now
	for q.len() > 0 {
		e := q.pop()
		if e.at < last {
			t.Fatalf("popped %d after %d", e.at, last)
		}
		last = e.at
		pushed--
	}
	if pushed != 0 {
		t.Errorf("%d events left", pushed)
	}
}

func TestPushAndPopAllocateNothing(t *testing.T) {
	var q queue
	at := int64(0)
	if n := testing.AllocsPerRun(1000, func() { at += 5; q.push(event{at: at}); q.pop() }); n != 0 {
		t.Errorf("push and pop allocate %v times, want 0", n)
	}
	if n := unsafe.Sizeof(event{}); n != 16 {
		t.Errorf("an event is %d bytes, want 16", n)
	}
}

// article is the article's experiment at 1000 clients, with stormsim's
// unbounded backlog, 60 s.
func article() Fleet {
	sc := DefaultFleet()
	sc.Clients, sc.PerProcess, sc.Model, sc.Backlog, sc.Duration = 1000, 1000, DefaultModel(), 0, 60*time.Second
	return sc
}

func run(t *testing.T, sc Fleet, st Strategy) Result {
	t.Helper()
	r, err := RunFleet(context.Background(), sc, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestPauseBacklog checks the paused server: with no retry and the pause
// from 10 s to 20 s, every call started during the pause waits in the
// backlog and the peak concurrency is that backlog plus the calls in
// service; after the resume it settles within seconds.
func TestPauseBacklog(t *testing.T) {
	sc := article()
	r := run(t, sc, NoRetry())
	started := 0
	for _, s := range r.Samples[10:20] {
		started += s.Started
		if s.OK != 0 && s.Second > 10 {
			t.Errorf("second %d: %d calls succeeded while the server was paused", s.Second, s.OK)
		}
		if s.Attempts != s.Started {
			t.Errorf("second %d: %d attempts for %d calls with no retry", s.Second, s.Attempts, s.Started)
		}
	}
	// About 100 calls/s for 10 s, fewer as clients wait out their timeouts.
	if started < 700 || started > 1000 {
		t.Errorf("%d calls started during the pause, want 700–1000", started)
	}
	if r.PeakConcurrency < started || r.PeakConcurrency > started+40 {
		t.Errorf("peak concurrency %d, want the %d calls of the pause plus those in service", r.PeakConcurrency, started)
	}
	if r.Samples[19].Concurrency < started {
		t.Errorf("at the end of the pause %d in the server, want at least %d", r.Samples[19].Concurrency, started)
	}
	if !r.Settled || r.SettledAfter > 2*time.Second {
		t.Errorf("no retry: settled %v after %v, want within 2 s", r.Settled, r.SettledAfter)
	}
	for _, s := range r.Samples[:10] {
		if s.Concurrency > sc.Model.Limit {
			t.Errorf("second %d before the pause: %d requests in the server, above the limit", s.Second, s.Concurrency)
		}
	}
}

// TestArticleExperiment is the article's experiment at 1000 clients: fixed
// retries never recover, the budget recovers at once and holds retries to
// its bound, the recipe alone recovers later; the figures match cmd/stormsim's
// real-gRPC run (TestDefaultStorm: fixed and exponential never,
// recipe +6 s, recipe+budget +1 s, none +1 s; amplification 3.33, 2.96, 2.08,
// 1.08 during the outage).
func TestArticleExperiment(t *testing.T) {
	sc := article()
	want := []struct {
		st      Strategy
		settled bool
		lo, hi  time.Duration // settled after
		ampl    float64
	}{
		{Fixed(), false, 0, 0, 3.33},
		{Exponential(), false, 0, 0, 2.96},
		{Recipe(), true, 5 * time.Second, 8 * time.Second, 2.08},
		{RecipeBudget(), true, 0, 2 * time.Second, 1.08},
		{NoRetry(), true, 0, 2 * time.Second, 1.00},
	}
	for _, w := range want {
		r := run(t, sc, w.st)
		if r.Settled != w.settled || r.Settled && (r.SettledAfter < w.lo || r.SettledAfter > w.hi) {
			t.Errorf("%s: settled %v after %v, want %v in [%v, %v]", w.st.Name, r.Settled, r.SettledAfter, w.settled, w.lo, w.hi)
		}
		if r.AmplificationOutage < w.ampl*0.95 || r.AmplificationOutage > w.ampl*1.05 {
			t.Errorf("%s: amplification during the outage %.2f, want %.2f ± 5%%", w.st.Name, r.AmplificationOutage, w.ampl)
		}
		if !w.settled {
			last := r.Samples[len(r.Samples)-1]
			if last.Concurrency < 10*sc.Model.Limit || last.OK > 10 {
				t.Errorf("%s: at the end %d in the server and %d OK/s, want a server still down", w.st.Name, last.Concurrency, last.OK)
			}
		}
	}
}

// TestBudgetBound checks that with the budget, retries during the outage
// stay within Burst + (Ratio·calls + PerSecond·T) per process.
func TestBudgetBound(t *testing.T) {
	sc := article()
	sc.Clients, sc.PerProcess = 2000, 500 // 4 processes, 4 budgets
	r := run(t, sc, RecipeBudget())
	started, attempts := 0, 0
	for _, s := range r.Samples[10:20] {
		started += s.Started
		attempts += s.Attempts
	}
	th := grpcbackoff.DefaultThrottle()
	bound := 4*float64(th.Burst) + th.Ratio*float64(started) + 4*th.PerSecond*10
	// Calls that started just before the pause retry in it too: allow one
	// second's worth.
	bound += th.Ratio * 200
	if retries := attempts - started; float64(retries) > bound {
		t.Errorf("%d retries during the outage, want at most %.0f", retries, bound)
	}
	if r.Throttled == 0 {
		t.Error("no retry refused by the budget during a 10 s outage")
	}
}

// TestAdaptiveRejects checks that adaptive throttling rejects calls once
// the outage has lasted longer than (K−1)× the history, and lets nearly
// everything through when healthy.
func TestAdaptiveRejects(t *testing.T) {
	sc := article()
	sc.Pause, sc.Duration = 30*time.Second, 50*time.Second
	r := run(t, sc, RecipeAdaptive())
	for _, s := range r.Samples[:10] {
		if s.Rejected > 0 {
			t.Errorf("second %d, healthy: %d rejected", s.Second, s.Rejected)
		}
	}
	late := 0
	for _, s := range r.Samples[30:40] {
		late += s.Rejected
	}
	if late == 0 {
		t.Error("no call rejected 20–30 s into an outage after 10 s of history")
	}
}

func TestFleetValidate(t *testing.T) {
	sc := DefaultFleet()
	sc.Clients, sc.PerProcess, sc.Interval, sc.Backlog, sc.Duration, sc.Pause = 0, 0, 0, -1, 0, time.Hour
	sc.Model.Rule = Current
	err := sc.Validate()
	if err == nil {
		t.Fatal("Validate accepted a bad scenario")
	}
	for _, want := range []string{
		"latency rule current: only start is simulated",
		"clients (0) must be between 1",
		"clients per process (0) must be at least 1",
		"backlog (-1) must not be negative",
		"interval (0s) must be positive",
		"duration (0s) must be at least 1s",
		"the pause (1h0m0s from 10s) must lie within the run (0s)",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %q, want it to say %q", err, want)
		}
	}
	if _, err := RunFleet(context.Background(), sc, Fixed(), nil); err == nil {
		t.Error("Run accepted a bad scenario")
	}
	st := Recipe()
	st.Policy.AttemptTimeout = 0
	if _, err := RunFleet(context.Background(), article(), st, nil); err == nil || !strings.Contains(err.Error(), "AttemptTimeout") {
		t.Errorf("Run without AttemptTimeout: %v, want an error naming it", err)
	}
}

func TestWithLoad(t *testing.T) {
	sc := DefaultFleet().WithLoad(0.5)
	if sc.Model.Limit != 2000 || sc.Model.K != 1000 {
		t.Errorf("WithLoad(0.5): limit %d, K %v; want 2000, 1000", sc.Model.Limit, sc.Model.K)
	}
	if got := sc.Offered() / sc.Capacity(); got != 0.5 {
		t.Errorf("load %v, want 0.5", got)
	}
}
