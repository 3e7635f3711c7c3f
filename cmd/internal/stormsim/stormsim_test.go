package stormsim

import (
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestLatency(t *testing.T) {
	m := DefaultModel()
	cases := []struct {
		concurrency int
		want        time.Duration
	}{
		{0, 100 * time.Millisecond},
		{30, 100 * time.Millisecond},
		{45, 105 * time.Millisecond},
		{60, 110250 * time.Microsecond},
		{1e9, maxLatency},
	}
	for _, tc := range cases {
		got := m.Latency(tc.concurrency)
		if d := got - tc.want; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("Latency(%d) = %v, want %v", tc.concurrency, got, tc.want)
		}
	}
}

// ends runs one request per arrival time on s (started with go at each
// time, inside a synctest bubble) and returns when each was answered,
// measured from the start.
func ends(s *server, arrivals []time.Duration, pauseAt, resumeAt time.Duration) []time.Duration {
	start := time.Now()
	out := make([]time.Duration, len(arrivals))
	var wg sync.WaitGroup
	for i, a := range arrivals {
		wg.Go(func() {
			time.Sleep(a)
			s.work()
			out[i] = time.Since(start)
		})
	}
	wg.Go(func() {
		time.Sleep(pauseAt)
		s.Pause()
		time.Sleep(resumeAt - pauseAt)
		s.Resume()
	})
	wg.Wait()
	s.Close()
	return out
}

func equal(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The latency doubles with each request above 2: 100, 100, 200, 400 ms...
func testModel(rule LatencyRule) Model {
	return Model{Limit: 2, BaseLatency: 100 * time.Millisecond, Growth: 2, K: 1, Rule: rule}
}

func TestServerAtStart(t *testing.T) {
	const ms = time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		// A, B at 0 (c = 1, 2: 100 ms) and C at 10 ms (c = 3: 200 ms); no
		// pause before 1 s.
		got := ends(newServer(testModel(AtStart), 1), []time.Duration{0, 0, 10 * ms}, time.Second, 2*time.Second)
		if want := []time.Duration{100 * ms, 100 * ms, 210 * ms}; !equal(got, want) {
			t.Errorf("answered at %v, want %v", got, want)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		// A, B at 0 end their work at 100 ms, but the pause (50 ms to 1 s)
		// holds their answers. C, D, E arrive during the pause and are
		// accepted at the resume in order, with c = 1, 2, 3 (A and B are
		// done): 100, 100 and 200 ms.
		s := newServer(testModel(AtStart), 1)
		mid := make(chan int, 1)
		go func() {
			time.Sleep(500 * ms)
			n, _ := s.sample()
			mid <- n
		}()
		got := ends(s, []time.Duration{0, 0, 60 * ms, 61 * ms, 62 * ms}, 50*ms, time.Second)
		if want := []time.Duration{time.Second, time.Second, 1100 * ms, 1100 * ms, 1200 * ms}; !equal(got, want) {
			t.Errorf("answered at %v, want %v", got, want)
		}
		if n := <-mid; n != 5 {
			t.Errorf("in flight during the pause = %d, want 5", n)
		}
	})
}

func TestServerCurrent(t *testing.T) {
	const ms = time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		// A, B at 0, C at 50 ms: with three in flight the latency is 200 ms,
		// so nobody ends at 100 ms; A ends at 200 ms, and then, two left,
		// the latency is 100 ms and B and C (150 ms old) end with it.
		got := ends(newServer(testModel(Current), 1), []time.Duration{0, 0, 50 * ms}, time.Second, 2*time.Second)
		if want := []time.Duration{200 * ms, 200 * ms, 200 * ms}; !equal(got, want) {
			t.Errorf("answered at %v, want %v", got, want)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		// A at 0 is paused at 50 ms; B, C, D arrive in the pause and start
		// at the resume (1 s) with four in flight (400 ms), A included. A,
		// a second old, ends at once; then, three in flight, the latency
		// is 200 ms, and B, C and D end at 1.2 s.
		got := ends(newServer(testModel(Current), 1), []time.Duration{0, 60 * ms, 70 * ms, 80 * ms}, 50*ms, time.Second)
		if want := []time.Duration{time.Second, 1200 * ms, 1200 * ms, 1200 * ms}; !equal(got, want) {
			t.Errorf("answered at %v, want %v", got, want)
		}
	})
}

func TestScenarioValidate(t *testing.T) {
	sc := DefaultScenario()
	sc.Population.Clients = 0
	sc.Model.Growth = 0.5
	sc.Pause = time.Hour
	sc.Scale = 0
	err := sc.Validate()
	if err == nil {
		t.Fatal("Validate() = nil, want errors")
	}
	for _, want := range []string{"clients (0)", "growth (0.5)", "the pause (1h0m0s from 10s)", "scale (0)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %q, want it to mention %q", err, want)
		}
	}
	if err := DefaultScenario().Validate(); err != nil {
		t.Errorf("DefaultScenario().Validate() = %v, want nil", err)
	}
}

func TestSelectStrategies(t *testing.T) {
	got, err := SelectStrategies("ours+throttle, fixed,none")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range got {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "ours+throttle,fixed,none" {
		t.Errorf("SelectStrategies = %v", names)
	}
	if _, err := SelectStrategies("fixed,bogus"); err == nil || !strings.Contains(err.Error(), `"bogus"`) {
		t.Errorf("SelectStrategies(bogus) error = %v, want one naming it", err)
	}
}

// smallScenario is the experiment at 30% of its size: clients, limit and k
// all scaled by 0.3, which keeps the shape of the latency curve against the
// load, with the outage from 5 s to 15 s.
func smallScenario() Scenario {
	sc := DefaultScenario()
	sc.Population.Clients = 300
	sc.Model.Limit = 9
	sc.Model.K = 4.5
	sc.PauseAt = 5 * time.Second
	sc.Duration = 40 * time.Second
	return sc
}

// TestStorm runs the small experiment in a bubble and checks the result the
// document claims for fixed-interval retries and the one we claim for the
// default policy with its throttle.
func TestStorm(t *testing.T) {
	sc := smallScenario()
	offered := sc.Population.Offered()
	run := func(st Strategy) Result {
		var res Result
		synctest.Test(t, func(t *testing.T) {
			var err error
			if res, err = Run(t.Context(), sc, st, nil); err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("%s: recovered %v after %v, peak %d, amplification %.2f during the outage and %.2f after, %d OK, %d failed, goodput at the end %.1f/s",
			st.Name, res.Recovered, res.RecoveredAfter, res.PeakConcurrency, res.AmplificationOutage, res.AmplificationAfter, res.OK, res.Failed, res.GoodputAfter)
		return res
	}

	fixed := run(Fixed())
	last := fixed.Samples[len(fixed.Samples)-1]
	if fixed.Recovered || last.Concurrency <= sc.Model.Limit || fixed.GoodputAfter > offered/10 {
		t.Errorf("fixed: recovered %v, concurrency %d at the end, goodput %.1f/s; want no recovery, concurrency over %d and almost no goodput",
			fixed.Recovered, last.Concurrency, fixed.GoodputAfter, sc.Model.Limit)
	}
	if fixed.AmplificationOutage < 2 {
		t.Errorf("fixed: amplification during the outage %.2f, want a storm (≥ 2)", fixed.AmplificationOutage)
	}

	st := OursThrottled()
	ours := run(st)
	if !ours.Recovered || ours.RecoveredAfter > 10*time.Second || ours.GoodputAfter < 0.8*offered {
		t.Errorf("ours+throttle: recovered %v after %v, goodput %.1f/s; want a recovery within 10s and goodput ≥ %.1f/s",
			ours.Recovered, ours.RecoveredAfter, ours.GoodputAfter, 0.8*offered)
	}
	// The throttle's bound: during a total outage of T seconds in which
	// calls started, at most Burst + Ratio·started + PerSecond·T retries.
	pause := ours.Samples[sc.PauseAt/time.Second : (sc.PauseAt+sc.Pause)/time.Second]
	started := 0
	for _, s := range pause {
		started += s.Started
	}
	th := st.Throttle
	bound := 1 + th.Ratio + (float64(th.Burst)+th.PerSecond*sc.Pause.Seconds())/float64(started)
	if ours.AmplificationOutage > bound {
		t.Errorf("ours+throttle: amplification during the outage %.3f, want at most the throttle's bound %.3f", ours.AmplificationOutage, bound)
	}
	if ours.AmplificationAfter > 1.1 {
		t.Errorf("ours+throttle: amplification after the outage %.3f, want at most 1.1", ours.AmplificationAfter)
	}
}

// TestDefaultScenario runs the full default experiment, every strategy, in
// a bubble: the exact reference for the figures of the scaled real-time
// command. It takes a few seconds (a minute with -race), so it runs only
// with STORMSIM_FULL=1.
func TestDefaultScenario(t *testing.T) {
	if os.Getenv("STORMSIM_FULL") == "" {
		t.Skip("set STORMSIM_FULL=1 to run the full experiment")
	}
	sc := DefaultScenario()
	if os.Getenv("STORMSIM_CURRENT") != "" {
		sc.Model.Rule = Current
	}
	for _, st := range append(Strategies(), NoRetry()) {
		synctest.Test(t, func(t *testing.T) {
			res, err := Run(t.Context(), sc, st, nil)
			if err != nil {
				t.Fatal(err)
			}
			after := "no"
			if res.Recovered {
				after = "+" + res.RecoveredAfter.String()
			}
			started := 0
			for _, s := range res.Samples[sc.PauseAt/time.Second : (sc.PauseAt+sc.Pause)/time.Second] {
				started += s.Started
			}
			t.Logf("%-13s recovered %-4s peak %5d  amplification %.2f (%d calls started) / %s  OK %5d  failed %4d  waiting at end %4d  goodput at end %3.0f/s  p50 %v  p99 %v",
				st.Name, after, res.PeakConcurrency, res.AmplificationOutage, started, fmtRatio(res.AmplificationAfter),
				res.OK, res.Failed, res.WaitingAtEnd, res.GoodputAfter, res.P50.Round(time.Millisecond), res.P99.Round(time.Millisecond))
		})
	}
}

func fmtRatio(f float64) string {
	if math.IsNaN(f) {
		return "-"
	}
	return fmt.Sprintf("%.2f", f)
}
