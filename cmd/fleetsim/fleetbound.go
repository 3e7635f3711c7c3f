package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/platformkit/grpcbackoff/cmd/internal/sim"
)

// runFleetBound runs issue 42's experiment (sim.FleetBoundCases) with the
// fleet's budget, 5 seeds from seed, and prints each case's retries in the
// outage against one Throttle's bound and one renewal's slack.
func runFleetBound(ctx context.Context, seed uint64, parallel int, w io.Writer) error {
	cases := sim.FleetBoundCases()
	seeds := []uint64{seed, seed + 1, seed + 2, seed + 3, seed + 4}
	runs, err := sim.RunFleetBound(ctx, cases, []sim.Strategy{sim.RecipeFleet()}, seeds, parallel)
	if err != nil {
		return err
	}
	th := cases[0].Throttle
	fmt.Fprintf(w, "fleetsim -fleet-bound: the fleet budget (recipe+fleet) at the scale of fleetbudget's real-process runs: a 10 s outage answered UNAVAILABLE, Throttle %+v, seeds %d to %d\n\n",
		th, seeds[0], seeds[len(seeds)-1])
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "before the outage\tprocesses\tcalls/s\tretries in the outage\tbound\tslack\tmost over bound + slack\t")
	for i := 0; i < len(runs); i += len(seeds) {
		c := runs[i].Case
		lo, hi, blo, bhi, slack, over := 1<<62, 0, 1e18, 0.0, 0.0, -1e18
		for _, r := range runs[i : i+len(seeds)] {
			f := r.Figures
			lo, hi = min(lo, f.Retries), max(hi, f.Retries)
			blo, bhi = min(blo, f.Bound), max(bhi, f.Bound)
			slack = max(slack, r.Slack)
			over = max(over, float64(f.Retries)-f.Bound-r.Slack)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%d-%d\t%.0f-%.0f\t%.1f\t%+.0f\t\n", c.Name, c.Processes, c.Scenario.Offered(), lo, hi, blo, bhi, slack, over)
	}
	tw.Flush()
	fmt.Fprint(w, `
bound:   MinReserve + Reserve·S + Burst + Ratio·started + PerSecond·T, S the calls that succeeded in the
         Window before the outage, started those started in it, T its length: one Throttle's
slack:   Ratio for the calls of one renewal interval (750 ms)
`)
	return nil
}
