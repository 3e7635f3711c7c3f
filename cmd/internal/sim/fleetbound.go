package sim

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/platformkit/grpcbackoff"
)

// FleetBoundCase is one case of issue 42's experiment: the fleet's budget
// at the scale of fleetbudget's runs with real processes (TestRealFleet),
// where one Throttle's floors weigh against its bound (at -budgets' 10 000
// calls/s they are a quarter of a percent of it), with their Throttle
// (Window 5 s) and an outage answered UNAVAILABLE, after a history of
// traffic.
type FleetBoundCase struct {
	Name      string
	Processes int
	Scenario  Fleet
	Throttle  grpcbackoff.Throttle
}

// FleetBoundCases returns the cases: 10 and 40 processes making 100 calls/s
// in all, steadily; 20 making 0.5 calls/s each for 30 s (low traffic); 10
// idle for 20 s, then making 100 calls/s; each with a 10 s outage, the
// default Throttle with a Window of 5 s and the fleet's default lease
// period. The clients call every 1 000 s on average (100 000 of them for
// 100 calls/s), so that the calls arrive nearly as the real runs' do,
// whatever the outage (a client waits for its call to end before it thinks
// again).
func FleetBoundCases() []FleetBoundCase {
	th := grpcbackoff.DefaultThrottle()
	th.Window = 5 * time.Second
	mk := func(name string, processes int, rate float64, pauseAt, quiet time.Duration) FleetBoundCase {
		sc := DefaultFleet()
		sc.Interval = 1000 * time.Second
		sc.Clients = int(rate * sc.Interval.Seconds())
		sc.PerProcess = sc.Clients / processes
		sc.PauseAt, sc.Pause, sc.Duration, sc.Quiet = pauseAt, 10*time.Second, pauseAt+20*time.Second, quiet
		sc.Unavailable = true
		return FleetBoundCase{Name: name, Processes: processes, Scenario: sc, Throttle: th}
	}
	return []FleetBoundCase{
		mk("steady", 10, 100, 8*time.Second, 0),
		mk("steady", 40, 100, 8*time.Second, 0),
		mk("low traffic", 20, 10, 30*time.Second, 0),
		mk("idle", 10, 100, 20*time.Second, 20*time.Second),
	}
}

// FleetBoundRun is a case run with a strategy (its Throttle the case's)
// and a seed, and its figures: the retries sent in the outage against one
// Throttle's Bound, and one renewal's Slack (Ratio for the calls of a
// renewal interval).
type FleetBoundRun struct {
	Case     FleetBoundCase
	Strategy string
	Seed     uint64
	Figures  Outage
	Slack    float64
}

// RunFleetBound runs every case with every strategy and seed, parallel
// runs at once.
func RunFleetBound(ctx context.Context, cases []FleetBoundCase, strategies []Strategy, seeds []uint64, parallel int) ([]FleetBoundRun, error) {
	var runs []FleetBoundRun
	var sts []Strategy
	for _, c := range cases {
		for _, st := range strategies {
			th := c.Throttle
			st.Throttle = &th
			for _, seed := range seeds {
				runs = append(runs, FleetBoundRun{Case: c, Strategy: st.Name, Seed: seed})
				sts = append(sts, st)
			}
		}
	}
	errs := make([]error, len(runs))
	sem := make(chan struct{}, max(parallel, 1))
	var wg sync.WaitGroup
	for i := range runs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			r := &runs[i]
			sc := r.Case.Scenario
			sc.Seed = r.Seed
			res, err := RunFleet(ctx, sc, sts[i], nil)
			if err != nil {
				errs[i] = fmt.Errorf("sim: %s, %d processes, %s: %w", r.Case.Name, r.Case.Processes, r.Strategy, err)
				return
			}
			r.Figures = OutageOf(res, sc, r.Case.Throttle, r.Case.Processes)
			interval := sts[i].LeasePeriod * 3 / 4
			r.Slack = r.Case.Throttle.Ratio * float64(r.Figures.Started) / sc.Pause.Seconds() * interval.Seconds()
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return runs, nil
}
