package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"

	chart "github.com/wcharczuk/go-chart/v2"

	"github.com/platformkit/grpcbackoff/cmd/internal/sim"
	"github.com/platformkit/grpcbackoff/cmd/internal/simchart"
)

// runBudgets runs issues 29 and 35's experiment: each outage, number of
// processes and strategy (a budget per process, the fleet's), and prints
// what users felt beside the retries.
func runBudgets(ctx context.Context, b sim.Budgets, chartPath string, w io.Writer) error {
	fmt.Fprintf(w, "fleetsim -budgets: %d clients (%.0f calls/s) in %v processes, a %v outage at %v (%s), %v\n",
		b.Base.Clients, b.Base.Offered(), b.Processes, b.Base.Pause, b.Base.PauseAt, outageNames(b), b.Base.Duration)
	start := time.Now()
	runs, err := sim.RunBudgets(ctx, b)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%d runs in %v\n\n", len(runs), time.Since(start).Round(time.Second))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "outage\tprocesses\tstrategy\tsent in the outage\tthose failed\tbudget bound\tat the server\tguard bound\trefused\tgoodput after (calls/s)\tfailed calls\trecovered\t")
	for _, r := range runs {
		f := r.Figures
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%s\t%d\t%s\t%d\t%.0f\t%d\t%s\t\n", r.Outage, r.Processes, budgetName(r.Strategy), f.Retries,
			f.FailedRetries, budgetBound(r), f.AtServer, orDash(f.GuardBound), f.Refused, f.Goodput, f.Failed, after(r.Result.Recovered, r.Result.RecoveredAfter))
	}
	tw.Flush()
	fmt.Fprintf(w, `
outages:   UNAVAILABLE: every attempt answered at once; pause: the server stopped, at most %d requests waiting;
           storm: a restart (UNAVAILABLE) of a server at 90%% of its capacity, its latency growing 5%% per 1/14 of
           its limit above it, whose work for callers that gave up goes on; flaky: 20%% of the attempts
           answered UNAVAILABLE at once, at random, by a server far below its capacity
sent:      retries sent during the outage: attempts less the calls started in it; those failed: retries that
           failed during it (timed out, or answered UNAVAILABLE)
budget bound: on the retries sent that failed (a budget gives back a retry the server served; in an outage none
           is, and the bound is on all sent), MinReserve + Reserve·S + Burst + (Ratio·R + PerSecond)·T for one budget (the
           fleet's), Burst and MinReserve once per process for budgets per process; S the successes in the
           Window before the outage, R its calls started per second
at the server: retries that reached the server from the start of the outage to the end of the run
guard bound: on those, m·(T + W)/W + M·⌈(T + W)/W⌉, m = s/(1−s)·R·W, s the guard's share, W its window,
           M its MinRetries (sim.GuardBound); UNAVAILABLE only
refused:   calls ended by the guard's pushback −1
goodput:   successful calls per second from the end of the outage to the end of the run (offered: %.0f)
failed:    calls that failed from the start of the outage to the end of the run
recovered: time after the outage to the first 5 s in a row with goodput at 90%% of the offered load
`, b.Base.Backlog, b.Base.Offered())
	if chartPath != "" {
		if err := writeBudgetChart(chartPath, b, runs); err != nil {
			return err
		}
		fmt.Fprintf(w, "\nchart: %s\n", chartPath)
	}
	return nil
}

// budgetBound is the budget's bound on the retries sent in r's outage: the
// fleet's, or the sum of its processes' with budgets per process; "-"
// without a budget.
func budgetBound(r sim.BudgetRun) string {
	switch st, _ := sim.SelectStrategies(r.Strategy); {
	case len(st) == 0 || st[0].Throttle == nil:
		return "-"
	case st[0].LeasePeriod > 0:
		return fmt.Sprintf("%.0f", r.Figures.Bound)
	}
	return fmt.Sprintf("%.0f", r.Figures.PerProcess)
}

func orDash(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", v)
}

func outageNames(b sim.Budgets) string {
	s := ""
	for i, o := range b.Outages {
		if i > 0 {
			s += ", "
		}
		s += o.Name
	}
	return s
}

// budgetName names a strategy of the experiment by its budget.
func budgetName(strategy string) string {
	switch strategy {
	case sim.RecipeBudget().Name:
		return "per process"
	case sim.RecipeFleet().Name:
		return "fleet"
	case sim.RecipeGuard().Name:
		return "guard"
	case sim.RecipeBudgetGuard().Name:
		return "guard+per process"
	case sim.Recipe().Name:
		return "none"
	}
	return strategy
}

// writeBudgetChart draws one row of panels per outage: the time to
// recover (never: at the top), the calls failed, and the retries that
// reached the server, each against the number of processes, one line per
// strategy, under a legend. (The goodput after the outage, in the table,
// tells what the time to recover does.)
func writeBudgetChart(path string, b sim.Budgets, runs []sim.BudgetRun) error {
	never := b.Base.Duration - b.Base.PauseAt - b.Base.Pause // "never" is drawn there
	var keys []simchart.Key
	for i, st := range b.Strategies {
		keys = append(keys, budgetKey(st.Name, i))
	}
	var rows [][]chart.Chart
	for _, o := range b.Outages {
		var retries, failed, recovered []chart.Series
		for i, st := range b.Strategies {
			var x, yr, yf, yt []float64
			for _, r := range runs {
				if r.Outage != o.Name || r.Strategy != st.Name {
					continue
				}
				x = append(x, math.Log10(float64(r.Processes)))
				yr = append(yr, max(float64(r.Figures.AtServer), 1)) // log scales: 1 stands for 0
				yf = append(yf, max(float64(r.Figures.Failed), 1))
				t := never.Seconds()
				if r.Result.Recovered {
					t = r.Result.RecoveredAfter.Seconds()
				}
				yt = append(yt, t)
			}
			k := keys[i]
			retries = append(retries, simchart.Line(k.Name, x, yr, k.Color, k.Dashed))
			failed = append(failed, simchart.Line(k.Name, x, yf, k.Color, k.Dashed))
			recovered = append(recovered, simchart.Line(k.Name, x, yt, k.Color, k.Dashed))
		}
		rows = append(rows, []chart.Chart{
			recoveryPanel(o.Name+": seconds to recover after it (top: never)", b, recovered, never),
			smallPanel(o.Name+": calls failed", b, failed, logRange(failed)),
			smallPanel(o.Name+": retries that reached the server", b, retries, logRange(retries)),
		})
	}
	title := fmt.Sprintf("%d clients (%.0f calls/s) in %d to %d processes, a %v outage: recovery, calls failed, retries at the server (log scales, 1 stands for 0)",
		b.Base.Clients, b.Base.Offered(), b.Processes[0], b.Processes[len(b.Processes)-1], b.Base.Pause)
	return simchart.WriteGrid(path, title, keys, rows)
}

// budgetKey is the legend's key of strategy name, the i-th of the
// experiment: the colour says what bounds its retries (red a budget per
// process, green the fleet's, blue the server's guard, purple both the
// guard and budgets per process, orange nothing), a dashed line that its
// clients are grpc-go's built-in retry rather than this library.
func budgetKey(name string, i int) simchart.Key {
	red, orange, blue, green, purple := simchart.Color(0), simchart.Color(1), simchart.Color(2), simchart.Color(3), simchart.Color(4)
	switch name {
	case sim.RecipeBudget().Name:
		return simchart.Key{Name: "budget per process", Color: red}
	case sim.RecipeFleet().Name:
		return simchart.Key{Name: "fleet budget", Color: green}
	case sim.RecipeGuard().Name:
		return simchart.Key{Name: "guard, no budget", Color: blue}
	case sim.RecipeBudgetGuard().Name:
		return simchart.Key{Name: "guard + budget per process", Color: purple}
	case sim.GRPCRetry().Name:
		return simchart.Key{Name: "grpc-go's retry", Color: orange, Dashed: true}
	case sim.GRPCRetryGuard().Name:
		return simchart.Key{Name: "grpc-go's retry + guard", Color: blue, Dashed: true}
	case sim.Recipe().Name:
		return simchart.Key{Name: "recipe, no budget, no guard", Color: orange}
	}
	return simchart.Key{Name: name, Color: simchart.Color(5 + i)}
}

// smallPanel is a panel of the grid: x the number of processes (log scale).
func smallPanel(title string, b sim.Budgets, series []chart.Series, y chart.Range) chart.Chart {
	var xt []chart.Tick
	for _, p := range b.Processes {
		xt = append(xt, chart.Tick{Value: math.Log10(float64(p)), Label: fmt.Sprint(p)})
	}
	lo, hi := math.Log10(float64(b.Processes[0])), math.Log10(float64(b.Processes[len(b.Processes)-1]))
	c := chart.Chart{
		Title:      title,
		TitleStyle: chart.Style{FontSize: 10, Padding: chart.Box{Top: 6}},
		Width:      400, Height: 260,
		Background: chart.Style{Padding: chart.Box{Top: 30, Left: 10, Right: 20, Bottom: 5}},
		XAxis:      chart.XAxis{Name: "processes", Ticks: xt, Range: &chart.ContinuousRange{Min: lo - 0.15, Max: hi + 0.15}},
		YAxis:      chart.YAxis{Range: y},
		Series:     series,
	}
	if lr, ok := y.(*chart.LogarithmicRange); ok {
		for v := lr.Min; v <= lr.Max; v *= 10 {
			c.YAxis.Ticks = append(c.YAxis.Ticks, chart.Tick{Value: v, Label: shortCount(v)})
		}
	}
	return c
}

func recoveryPanel(title string, b sim.Budgets, series []chart.Series, never time.Duration) chart.Chart {
	c := smallPanel(title, b, series, &chart.ContinuousRange{Min: -1, Max: never.Seconds() + 2})
	for t := 0.0; t < never.Seconds(); t += 10 {
		c.YAxis.Ticks = append(c.YAxis.Ticks, chart.Tick{Value: t, Label: fmt.Sprintf("%.0f", t)})
	}
	c.YAxis.Ticks = append(c.YAxis.Ticks, chart.Tick{Value: never.Seconds(), Label: "never"})
	return c
}

// logRange is a logarithmic range holding every value of series.
func logRange(series []chart.Series) chart.Range {
	top, bottom := 10.0, math.Inf(1)
	for _, s := range series {
		for _, v := range s.(chart.ContinuousSeries).YValues {
			top, bottom = max(top, v), min(bottom, v)
		}
	}
	return &chart.LogarithmicRange{Min: math.Pow(10, math.Floor(math.Log10(bottom))), Max: math.Pow(10, math.Ceil(math.Log10(top)))}
}

func shortCount(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.0fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.0fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}
