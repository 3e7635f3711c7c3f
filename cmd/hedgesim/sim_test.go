package hedgesim

import (
	"bytes"
	"flag"
	"testing"
	"testing/synctest"
	"time"
)

var (
	chartPath = flag.String("hedgesim.chart", "", "write a PNG of the latency tail of the first model to this file")
	calls     = flag.Int("hedgesim.calls", 100_000, "calls per model and strategy")
)

// TestTail runs every strategy on both models, prints the tables, and
// checks the goal on the first model: some strategy with at most 2% extra
// attempts cuts p99.9 at least 20 times.
func TestTail(t *testing.T) {
	n := *calls
	if testing.Short() {
		n = 10_000
	}
	models := []Model{Bimodal(0.01), LogNormal(10*time.Millisecond, 0.8)}
	for mi, m := range models {
		var results []Result
		synctest.Test(t, func(t *testing.T) {
			for _, s := range Strategies() {
				r, err := Run(m, s, n, 200, uint64(mi+1))
				if err != nil {
					t.Fatal(err)
				}
				results = append(results, r)
			}
		})
		var b bytes.Buffer
		WriteTable(&b, results)
		t.Logf("%s, %d calls per strategy:\n%s", m.Name, n, b.String())
		if mi == 0 {
			checkGoal(t, results)
			if *chartPath != "" {
				if err := WriteChart(*chartPath, "Latency tail, "+m.Name+": share of calls slower than x", results); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

func checkGoal(t *testing.T, results []Result) {
	t.Helper()
	base := results[0].Quantile(0.999)
	if base < time.Second {
		t.Errorf("p99.9 without hedging = %v, want 1s: the model's slow share is the tail", base)
	}
	for _, r := range results[1:] {
		gain := float64(base) / float64(r.Quantile(0.999))
		t.Logf("%s: p99.9 %.1fx lower for %.2f%% extra attempts", r.Strategy, gain, 100*r.Extra())
	}
	// Named strategies the goal must hold for.
	for _, want := range []string{"hedge after 15ms", "adaptive p95 [1ms, 1s]", "adaptive p99 [1ms, 1s]"} {
		for _, r := range results {
			if r.Strategy != want {
				continue
			}
			if gain := float64(base) / float64(r.Quantile(0.999)); gain < 20 || r.Extra() > 0.02 {
				t.Errorf("%s: p99.9 %.1fx lower for %.2f%% extra attempts; want at least 20x for at most 2%%", r.Strategy, gain, 100*r.Extra())
			}
		}
	}
}
