package sim

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestGridCheck runs a tiny grid and checks Best and Check.
func TestGridCheck(t *testing.T) {
	g := DefaultGrid()
	g.Base = article()
	g.Base.Clients, g.Base.PerProcess = 500, 500
	g.Loads = []float64{0.5}
	g.Outages = []time.Duration{time.Second, 10 * time.Second}
	g.After = 20 * time.Second
	g.Strategies = []Strategy{Fixed(), RecipeBudget()}
	calls := 0
	res, err := RunGrid(context.Background(), g, func(done, total int, c Cell) {
		calls++
		if total != 4 || done != calls {
			t.Errorf("progress %d/%d at call %d", done, total, calls)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 4 {
		t.Errorf("progress called %d times, want 4", calls)
	}
	fixed10 := res.Cells[0][0][1].Result
	if fixed10.Recovered {
		t.Errorf("fixed recovered from a 10 s outage at 50%% load")
	}
	budget10 := res.Cells[1][0][1].Result
	if best, ok := res.Best(0, 1); !ok || !budget10.Recovered || best != budget10.RecoveredAfter {
		t.Errorf("Best(0, 1) = %v, %v; want recipe+budget's %v", best, ok, budget10.RecoveredAfter)
	}
	if bad := res.Check("recipe+budget", 5*time.Second); len(bad) != 0 {
		t.Errorf("Check(recipe+budget) = %q, want nothing", bad)
	}
	if bad := res.Check("fixed", 5*time.Second); len(bad) != 1 || !strings.Contains(bad[0], "fixed does not recover") {
		t.Errorf("Check(fixed) = %q, want the 10 s cell", bad)
	}
	g.Loads = []float64{1.5}
	if _, err := RunGrid(context.Background(), g, nil); err == nil || !strings.Contains(err.Error(), "load 1.5 must be in (0, 1]") {
		t.Errorf("RunGrid with load 1.5: %v, want it named", err)
	}
}
