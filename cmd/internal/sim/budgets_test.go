package sim

import (
	"context"
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
	for _, unavailable := range []bool{true, false} {
		var fleet, own [2]int
		for i, p := range []int{10, 1000} {
			sc := b.Scenario(p, unavailable)
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
