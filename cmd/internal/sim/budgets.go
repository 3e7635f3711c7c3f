package sim

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/platformkit/grpcbackoff"
)

// Budgets is the experiment of issues 29 and 35: one backend's fleet of
// clients, its traffic the same whatever the number of processes it is
// split into, through outages, each with every way of paying for retries
// compared: a budget per process, the fleet's, and any other (a server's
// guard against retries is one more Strategy).
type Budgets struct {
	// Base is the scenario; its PerProcess is set from each run's number
	// of processes, and each outage makes its own of it.
	Base Fleet
	// Processes are the numbers of processes, e.g. 10 to 10 000.
	Processes []int
	// Outages are the outages each strategy and number of processes meets.
	Outages []OutageKind
	// Strategies are compared in each cell (see DefaultBudgets).
	Strategies []Strategy
	// Parallel is the number of runs at once (each is single-threaded).
	Parallel int
}

// An OutageKind is an outage of Budgets: its name, and the scenario it makes
// of the experiment's.
type OutageKind struct {
	Name string
	Of   func(Fleet) Fleet
}

// UnavailableOutage answers every attempt of the outage at once with
// UNAVAILABLE (a restart behind a load balancer): its retries are paid from
// the reserve first.
func UnavailableOutage() OutageKind {
	return OutageKind{Name: "UNAVAILABLE", Of: func(sc Fleet) Fleet { sc.Unavailable = true; return sc }}
}

// PausedOutage pauses the server (SIGSTOP): attempts time out, and their
// retries are paid from the long-run allowance; the Base's backlog bounds
// the requests that wait.
func PausedOutage() OutageKind {
	return OutageKind{Name: "pause", Of: func(sc Fleet) Fleet { sc.Unavailable = false; return sc }}
}

// StormOutage is a restart, as UnavailableOutage, of a server that the
// retries after it can keep down, as in the seed experiment: run at 90% of
// its capacity, its latency growing 5% for every 1/14 of its limit of
// requests above that limit (the article's, for every half of it), the
// work of attempts whose callers gave up going on, and every attempt cut at
// its 2 s timeout. Without retries it serves its offered load again at once.
func StormOutage() OutageKind {
	return OutageKind{Name: "storm", Of: func(sc Fleet) Fleet {
		sc = sc.WithLoad(0.9)
		sc.Model.K = float64(sc.Model.Limit) / 14
		sc.Unavailable = true
		return sc
	}}
}

// DefaultBudgets returns 100 000 clients (10 000 calls/s) in 10 to 10 000
// processes, the outage from 20 s to 50 s, 110 s in all, answered
// UNAVAILABLE, a pause (keeping at most 10 000 requests waiting, so that the
// server can recover), a storm or a flaky server (20% of attempts failing),
// with a budget per process, the fleet's, the server's guard alone and
// beside budgets per process, and grpc-go's built-in retry without and with
// the guard.
func DefaultBudgets() Budgets {
	sc := DefaultFleet()
	sc.PauseAt, sc.Pause, sc.Duration, sc.Backlog = 20*time.Second, 30*time.Second, 110*time.Second, 10_000
	return Budgets{Base: sc, Processes: []int{10, 100, 1000, 10_000},
		Outages:    []OutageKind{UnavailableOutage(), PausedOutage(), StormOutage(), FlakyOutage(0.2)},
		Strategies: []Strategy{RecipeBudget(), RecipeFleet(), RecipeGuard(), RecipeBudgetGuard(), GRPCRetry(), GRPCRetryGuard()}, Parallel: 2}
}

// Scenario returns b's scenario for processes processes and outage o.
func (b Budgets) Scenario(processes int, o OutageKind) Fleet {
	sc := b.Base
	sc.PerProcess = max(sc.Clients/processes, 1)
	return o.Of(sc)
}

// BudgetRun is one run of Budgets.
type BudgetRun struct {
	Outage    string
	Processes int
	Strategy  string
	Scenario  Fleet
	Result    Result
	Figures   Outage
}

// RunBudgets runs b: every outage, number of processes and strategy,
// Parallel runs at once, in that order.
func RunBudgets(ctx context.Context, b Budgets) ([]BudgetRun, error) {
	var runs []BudgetRun
	var strategies []Strategy
	for _, o := range b.Outages {
		for _, p := range b.Processes {
			for _, st := range b.Strategies {
				runs = append(runs, BudgetRun{Outage: o.Name, Processes: p, Strategy: st.Name, Scenario: b.Scenario(p, o)})
				strategies = append(strategies, st)
			}
		}
	}
	sem := make(chan struct{}, max(b.Parallel, 1))
	errs := make([]error, len(runs))
	var wg sync.WaitGroup
	for i := range runs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			r := &runs[i]
			if r.Result, errs[i] = RunFleet(ctx, r.Scenario, strategies[i], nil); errs[i] == nil {
				th := grpcbackoff.DefaultThrottle() // the bound's, for a strategy without a budget
				if st := strategies[i]; st.Throttle != nil {
					th = *st.Throttle
				}
				r.Figures = OutageOf(r.Result, r.Scenario, th, r.Processes)
				// GuardBound's outage: answered UNAVAILABLE, then served
				// (not the storm, whose attempts then time out); its
				// clients: without a budget.
				if st := strategies[i]; st.Guard != nil && st.Throttle == nil && r.Outage == UnavailableOutage().Name {
					r.Figures.GuardBound = GuardBound(r.Scenario, st, r.Processes, float64(r.Figures.Started)/r.Scenario.Pause.Seconds())
				}
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("sim: budgets, %s, %d processes, %s: %w", runs[i].Outage, runs[i].Processes, runs[i].Strategy, err)
		}
	}
	return runs, nil
}

// Outage is what a run did during its outage, and what its users felt.
type Outage struct {
	// Retries is the retries sent during the outage, Failed the retries
	// that failed during it, Started the calls started during it, and
	// Before the calls that succeeded in the Throttle's Window before it.
	Retries, FailedRetries, Started, Before int
	// Bound is the Throttle's bound on Retries (on FailedRetries, a budget
	// giving back the retries the server served) for one budget serving the
	// whole fleet: MinReserve + Reserve·S + Burst + Ratio·Started +
	// PerSecond·T; PerProcess the sum of the processes' bounds, each with
	// its own floors.
	Bound, PerProcess float64
	// AtServer is the retries that reached the server from the outage's
	// start to the end of the run (Sample.ServerRetries), and Refused the
	// calls the server's guard ended in that time.
	AtServer, Refused int
	// GuardBound is GuardBound's bound on AtServer, for a strategy with a
	// guard and no budget in UnavailableOutage; 0 otherwise.
	GuardBound float64
	// Failed is the calls that failed from the outage's start to the end of
	// the run, and Goodput the calls that succeeded per second from the
	// outage's end to the end of the run (the offered load is the most).
	Failed  int
	Goodput float64
}

// OutageOf measures r, a run of sc with throttle t, in processes processes.
func OutageOf(r Result, sc Fleet, t grpcbackoff.Throttle, processes int) Outage {
	var o Outage
	from, to := int(sc.PauseAt/time.Second), int((sc.PauseAt+sc.Pause)/time.Second)
	for _, s := range r.Samples[from:min(to, len(r.Samples))] {
		o.Retries += s.Attempts - s.Started
		o.FailedRetries += s.FailedRetries
		o.Started += s.Started
	}
	for _, s := range r.Samples[max(from-int(t.Window/time.Second), 0):from] {
		o.Before += s.OK
	}
	for _, s := range r.Samples[from:] {
		o.Failed += s.Failed
		o.AtServer += s.ServerRetries
		o.Refused += s.Refused
	}
	if after := r.Samples[min(to, len(r.Samples)):]; len(after) > 0 {
		ok := 0
		for _, s := range after {
			ok += s.OK
		}
		o.Goodput = float64(ok) / float64(len(after))
	}
	T := sc.Pause.Seconds()
	floors := float64(t.MinReserve) + float64(t.Burst) + t.PerSecond*T
	rest := t.Reserve*float64(o.Before) + t.Ratio*float64(o.Started)
	o.Bound, o.PerProcess = floors+rest, float64(processes)*floors+rest
	return o
}
