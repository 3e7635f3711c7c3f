package sim

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestStormValidate(t *testing.T) {
	sc := DefaultStorm()
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
	if err := DefaultStorm().Validate(); err != nil {
		t.Errorf("DefaultStorm().Validate() = %v, want nil", err)
	}
}

// smallStorm is the experiment at 30% of its size: clients, limit and k
// all scaled by 0.3, which keeps the shape of the latency curve against the
// load, with the outage from 5 s to 15 s.
func smallStorm() Storm {
	sc := DefaultStorm()
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
	sc := smallStorm()
	offered := sc.Population.Offered()
	run := func(st Strategy) Result {
		var res Result
		synctest.Test(t, func(t *testing.T) {
			var err error
			if res, err = RunStorm(t.Context(), sc, st, nil); err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("%s: settled %v after %v, peak %d, amplification %.2f during the outage and %.2f after, %d OK, %d failed, goodput at the end %.1f/s",
			st.Name, res.Settled, res.SettledAfter, res.PeakConcurrency, res.AmplificationOutage, res.AmplificationAfter, res.OK, res.Failed, res.GoodputAfter)
		return res
	}

	fixed := run(Fixed())
	last := fixed.Samples[len(fixed.Samples)-1]
	if fixed.Settled || last.Concurrency <= sc.Model.Limit || fixed.GoodputAfter > offered/10 {
		t.Errorf("fixed: settled %v, concurrency %d at the end, goodput %.1f/s; want no recovery, concurrency over %d and almost no goodput",
			fixed.Settled, last.Concurrency, fixed.GoodputAfter, sc.Model.Limit)
	}
	if fixed.AmplificationOutage < 2 {
		t.Errorf("fixed: amplification during the outage %.2f, want a storm (≥ 2)", fixed.AmplificationOutage)
	}

	st := RecipeBudget()
	budget := run(st)
	if !budget.Settled || budget.SettledAfter > 10*time.Second || budget.GoodputAfter < 0.8*offered {
		t.Errorf("recipe+budget: recovered %v after %v, goodput %.1f/s; want it settled within 10s and goodput ≥ %.1f/s",
			budget.Settled, budget.SettledAfter, budget.GoodputAfter, 0.8*offered)
	}
	// The throttle's bound: during a total outage of T seconds in which
	// calls started, at most Burst + Ratio·started + PerSecond·T retries.
	pause := budget.Samples[sc.PauseAt/time.Second : (sc.PauseAt+sc.Pause)/time.Second]
	started := 0
	for _, s := range pause {
		started += s.Started
	}
	th := st.Throttle
	bound := 1 + th.Ratio + (float64(th.Burst)+th.PerSecond*sc.Pause.Seconds())/float64(started)
	if budget.AmplificationOutage > bound {
		t.Errorf("recipe+budget: amplification during the outage %.3f, want at most the throttle's bound %.3f", budget.AmplificationOutage, bound)
	}
	if budget.AmplificationAfter > 1.1 {
		t.Errorf("recipe+budget: amplification after the outage %.3f, want at most 1.1", budget.AmplificationAfter)
	}
}

// TestDefaultStorm runs the full default experiment, every strategy, in
// a bubble: the exact reference for the figures of the scaled real-time
// command. It takes a few seconds (a minute with -race), so it runs only
// with STORMSIM_FULL=1.
func TestDefaultStorm(t *testing.T) {
	if os.Getenv("STORMSIM_FULL") == "" {
		t.Skip("set STORMSIM_FULL=1 to run the full experiment")
	}
	sc := DefaultStorm()
	if os.Getenv("STORMSIM_CURRENT") != "" {
		sc.Model.Rule = Current
	}
	for _, st := range []Strategy{Fixed(), Exponential(), Recipe(), RecipeBudget(), NoRetry()} {
		synctest.Test(t, func(t *testing.T) {
			res, err := RunStorm(t.Context(), sc, st, nil)
			if err != nil {
				t.Fatal(err)
			}
			after := "no"
			if res.Settled {
				after = "+" + res.SettledAfter.String()
			}
			started := 0
			for _, s := range res.Samples[sc.PauseAt/time.Second : (sc.PauseAt+sc.Pause)/time.Second] {
				started += s.Started
			}
			t.Logf("%-13s settled %-4s peak %5d  amplification %.2f (%d calls started) / %s  OK %5d  failed %4d  waiting at end %4d  goodput at end %3.0f/s  p50 %v  p99 %v",
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
