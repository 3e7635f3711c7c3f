package sim

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/platformkit/grpcbackoff"
)

// TestFleetBudgetBound: 20 000 clients in 10 and 1000 processes, a 30 s
// outage answered with UNAVAILABLE and a 30 s pause: with the fleet budget
// the retries stay within the Throttle's bound for one budget (plus the
// leases held when it began) and flat in the number of processes; with a
// budget per process they grow with it.
func TestFleetBudgetBound(t *testing.T) {
	b := DefaultBudgets()
	b.Base.Clients, b.Base.Backlog, b.Base.Duration = 20_000, 2000, 80*time.Second
	b.Base.Model.Limit, b.Base.Model.K = 600, 300
	th := grpcbackoff.DefaultThrottle()
	for _, outage := range []OutageKind{UnavailableOutage(), PausedOutage()} {
		unavailable := outage.Name == "UNAVAILABLE"
		var fleet, own [2]int
		for i, p := range []int{10, 1000} {
			sc := b.Scenario(p, outage)
			for _, st := range []Strategy{RecipeFleet(), RecipeBudget()} {
				r, err := RunFleet(context.Background(), sc, st, nil)
				if err != nil {
					t.Fatal(err)
				}
				o := OutageOf(r, sc, th, p)
				t.Logf("unavailable %v, %4d processes, %-13s: %6d retries (bound %6.0f, per process %7.0f), leased %.0f, recovered %v +%v",
					unavailable, p, st.Name, o.Retries, o.Bound, o.PerProcess, r.Leased, r.Recovered, r.RecoveredAfter)
				if st.LeasePeriod > 0 {
					fleet[i] = o.Retries
					if float64(o.Retries) > o.Bound+r.Leased || r.Leased > 0.1*o.Bound {
						t.Errorf("fleet budget, %d processes: %d retries, bound %.0f + %.0f leased (at most 10%%)", p, o.Retries, o.Bound, r.Leased)
					}
				} else {
					own[i] = o.Retries
					if float64(o.Retries) > o.PerProcess {
						t.Errorf("budgets per process, %d processes: %d retries, over the sum of their bounds %.0f", p, o.Retries, o.PerProcess)
					}
				}
			}
		}
		if d := float64(fleet[1]) / float64(fleet[0]); d > 1.1 || d < 0.9 {
			t.Errorf("unavailable %v: the fleet budget's retries went from %d to %d from 10 to 1000 processes, want within 10%%", unavailable, fleet[0], fleet[1])
		}
		if own[1] <= 2*own[0] {
			t.Errorf("unavailable %v: budgets per process retried %d times in 10 processes, %d in 1000: want many more", unavailable, own[0], own[1])
		}
	}
}

// TestStormKeepsServerDown: the storm outage, 10 000 clients in 1000
// processes: without retries the server serves its offered load again at
// once; with a budget per process the retries after the restart keep it down
// to the end of the run; with the fleet's budget it recovers. With the
// server's guard, grpc-go's built-in retry and the recipe without a budget
// both let it recover: the guard paces the retries at its share's rate, so
// no burst of retries arrives with the restart. (The recipe's takes up to
// 9 s in this small fleet: within 1 s in fleetsim -budgets.)
func TestStormKeepsServerDown(t *testing.T) {
	b := DefaultBudgets()
	b.Base.Clients, b.Base.Backlog = 10_000, 1000
	sc := b.Scenario(1000, StormOutage())
	for _, tc := range []struct {
		st        Strategy
		recovered bool
		within    time.Duration
	}{{NoRetry(), true, 10 * time.Second}, {RecipeBudget(), false, 0}, {RecipeFleet(), true, 10 * time.Second},
		{GRPCRetryGuard(), true, 10 * time.Second}, {RecipeGuard(), true, 20 * time.Second}} {
		r, err := RunFleet(context.Background(), sc, tc.st, nil)
		if err != nil {
			t.Fatal(err)
		}
		o := OutageOf(r, sc, grpcbackoff.DefaultThrottle(), 1000)
		t.Logf("%-13s recovered %v +%v, goodput after %.0f/s of %.0f, %d failed, %d retries", tc.st.Name, r.Recovered, r.RecoveredAfter,
			o.Goodput, sc.Offered(), o.Failed, o.Retries)
		if r.Recovered != tc.recovered || tc.recovered && r.RecoveredAfter > tc.within {
			t.Errorf("%s: recovered %v after %v, want %v (within %v)", tc.st.Name, r.Recovered, r.RecoveredAfter, tc.recovered, tc.within)
		}
		if !tc.recovered && o.Goodput > sc.Offered()/2 {
			t.Errorf("%s: goodput after the outage %.0f/s, want under half the offered %.0f/s", tc.st.Name, o.Goodput, sc.Offered())
		}
	}
}

// TestGuardBound: 20 000 clients in 10 and 1000 processes, a 30 s outage
// answered UNAVAILABLE: with the server's guard and no budget, the retries
// that reach the server, this library's recipe's and grpc-go's built-in
// retry's, stay within GuardBound, grow from 10 to 1000 processes by at
// most 4 · 990 (counting each process apart lets none through more), and
// are at most a third of the same clients' without the guard; every call
// the guard refuses fails. In a pause the server answers nothing, and the
// guard refuses nothing.
func TestGuardBound(t *testing.T) {
	b := DefaultBudgets()
	b.Base.Clients, b.Base.Backlog, b.Base.Duration = 20_000, 2000, 80*time.Second
	b.Base.Model.Limit, b.Base.Model.K = 600, 300
	b.Processes = []int{10, 1000}
	b.Outages = []OutageKind{UnavailableOutage(), PausedOutage()}
	b.Strategies = []Strategy{RecipeGuard(), Recipe(), GRPCRetryGuard(), GRPCRetry()}
	runs, err := RunBudgets(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	atServer := map[string]int{} // by strategy and processes, in the UNAVAILABLE outage
	for _, r := range runs {
		f := r.Figures
		t.Logf("%-11s %4d processes, %-12s: %6d retries at the server (bound %6.0f), %6d refused, %6d failed, recovered %v +%v",
			r.Outage, r.Processes, r.Strategy, f.AtServer, f.GuardBound, f.Refused, f.Failed, r.Result.Recovered, r.Result.RecoveredAfter)
		if r.Outage == PausedOutage().Name {
			if f.Refused != 0 {
				t.Errorf("pause, %s, %d processes: %d calls refused, want none (the paused server answers nothing)", r.Strategy, r.Processes, f.Refused)
			}
			continue
		}
		atServer[fmt.Sprint(r.Strategy, r.Processes)] = f.AtServer
		if r.Strategy != RecipeGuard().Name && r.Strategy != GRPCRetryGuard().Name {
			continue
		}
		if float64(f.AtServer) > f.GuardBound {
			t.Errorf("%s, %d processes: %d retries at the server, over the bound %.0f", r.Strategy, r.Processes, f.AtServer, f.GuardBound)
		}
		if f.Refused == 0 || f.Refused > f.Failed {
			t.Errorf("%s, %d processes: %d calls refused and %d failed, want some refused, all of them failed", r.Strategy, r.Processes, f.Refused, f.Failed)
		}
		if !r.Result.Recovered || r.Result.RecoveredAfter > time.Second {
			t.Errorf("%s, %d processes: recovered %v +%v, want within 1 s", r.Strategy, r.Processes, r.Result.Recovered, r.Result.RecoveredAfter)
		}
	}
	for _, pair := range [][2]Strategy{{RecipeGuard(), Recipe()}, {GRPCRetryGuard(), GRPCRetry()}} {
		guarded, plain := pair[0].Name, pair[1].Name
		few, many := atServer[fmt.Sprint(guarded, 10)], atServer[fmt.Sprint(guarded, 1000)]
		if many-few > 4*(1000-10) {
			t.Errorf("%s: %d retries at the server in 10 processes, %d in 1000: want at most %d more", guarded, few, many, 4*(1000-10))
		}
		if unguarded := atServer[fmt.Sprint(plain, 1000)]; 3*many > unguarded {
			t.Errorf("%s: %d retries at the server in 1000 processes, %s %d: want at most a third", guarded, many, plain, unguarded)
		}
	}
}

// TestFleetBoundCases runs issue 42's experiment at the scale of
// fleetbudget's real-process runs (FleetBoundCases, two seeds): the fleet's
// retries in each outage within one Throttle's bound and one renewal's
// slack. (Before issue 42's fix the simulator saw what the processes did:
// 352 to 364 retries against a bound of 307 to 323 at 10 and 40
// processes, 142 to 163 against 133 to 136 after low traffic.)
func TestFleetBoundCases(t *testing.T) {
	runs, err := RunFleetBound(context.Background(), FleetBoundCases(), []Strategy{RecipeFleet()}, []uint64{1, 2}, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		f := r.Figures
		t.Logf("%s, %d processes, seed %d: %d retries, bound %.0f + %.1f", r.Case.Name, r.Case.Processes, r.Seed, f.Retries, f.Bound, r.Slack)
		if float64(f.Retries) > f.Bound+r.Slack {
			t.Errorf("%s, %d processes, seed %d: %d retries in the outage, bound %.0f + %.1f", r.Case.Name, r.Case.Processes, r.Seed, f.Retries, f.Bound, r.Slack)
		}
	}
}

// TestFlakyServerGuardFailsNoMore: 20 000 clients in 10 and 1000
// processes, a 30 s flaky outage (20% of attempts answered UNAVAILABLE at
// random by a healthy server): with the server's guard, this library's
// recipe and grpc-go's built-in retry fail no more calls than without it,
// within 2× and 0.1% of the outage's calls: a retry served costs nothing.
func TestFlakyServerGuardFailsNoMore(t *testing.T) {
	b := DefaultBudgets()
	b.Base.Clients, b.Base.Backlog, b.Base.Duration = 20_000, 2000, 80*time.Second
	b.Base.Model.Limit, b.Base.Model.K = 600, 300
	b.Processes = []int{10, 1000}
	b.Outages = []OutageKind{FlakyOutage(0.2)}
	b.Strategies = []Strategy{RecipeGuard(), Recipe(), GRPCRetryGuard(), GRPCRetry()}
	runs, err := RunBudgets(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	failed := map[string]int{}
	started := map[string]int{}
	for _, r := range runs {
		t.Logf("%4d processes, %-12s: %5d failed, %5d refused, %6d retries at the server", r.Processes, r.Strategy, r.Figures.Failed, r.Figures.Refused, r.Figures.AtServer)
		failed[fmt.Sprint(r.Strategy, r.Processes)] = r.Figures.Failed
		started[fmt.Sprint(r.Strategy, r.Processes)] = r.Figures.Started
	}
	for _, pair := range [][2]Strategy{{RecipeGuard(), Recipe()}, {GRPCRetryGuard(), GRPCRetry()}} {
		for _, p := range b.Processes {
			guarded, plain := failed[fmt.Sprint(pair[0].Name, p)], failed[fmt.Sprint(pair[1].Name, p)]
			if limit := 2*plain + started[fmt.Sprint(pair[1].Name, p)]/1000; guarded > limit {
				t.Errorf("%d processes: %s failed %d calls, %s %d; want at most %d", p, pair[0].Name, guarded, pair[1].Name, plain, limit)
			}
		}
	}
}

// TestFlakyServerBudgetsFailNoMore: at a flaky but healthy server (20% of
// attempts failing at random for 30 s), the budgets, per process and the
// fleet's, give back the retries the server serves (issue 44): they fail
// no more calls than the recipe without a budget (2× and 0.1% of the
// calls), where before they failed 843 to 5 309 of 300 000.
func TestFlakyServerBudgetsFailNoMore(t *testing.T) {
	b := DefaultBudgets()
	b.Base.Clients, b.Base.Backlog, b.Base.Duration = 20_000, 2000, 80*time.Second
	b.Base.Model.Limit, b.Base.Model.K = 600, 300
	b.Processes = []int{10, 1000}
	b.Outages = []OutageKind{FlakyOutage(0.2)}
	b.Strategies = []Strategy{RecipeBudget(), RecipeFleet(), Recipe()}
	runs, err := RunBudgets(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	failed, started := map[string]int{}, map[string]int{}
	for _, r := range runs {
		t.Logf("%4d processes, %-13s: %5d failed, %6d retries sent, %5d failed of them (bound %.0f)", r.Processes, r.Strategy,
			r.Figures.Failed, r.Figures.Retries, r.Figures.FailedRetries, r.Figures.Bound)
		failed[fmt.Sprint(r.Strategy, r.Processes)] = r.Figures.Failed
		started[fmt.Sprint(r.Strategy, r.Processes)] = r.Figures.Started
		if r.Strategy == RecipeFleet().Name && float64(r.Figures.FailedRetries) > r.Figures.Bound {
			t.Errorf("%d processes, %s: %d retries failed, want within the bound, %.0f", r.Processes, r.Strategy, r.Figures.FailedRetries, r.Figures.Bound)
		}
	}
	for _, st := range []Strategy{RecipeBudget(), RecipeFleet()} {
		for _, p := range b.Processes {
			got, plain := failed[fmt.Sprint(st.Name, p)], failed[fmt.Sprint(Recipe().Name, p)]
			if limit := 2*plain + started[fmt.Sprint(Recipe().Name, p)]/1000; got > limit {
				t.Errorf("%d processes: %s failed %d calls, the recipe alone %d; want at most %d", p, st.Name, got, plain, limit)
			}
		}
	}
}
