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
	fmt.Fprintln(tw, "outage\tprocesses\tbudget\tretries in the outage\tbound, one budget\tgoodput after (calls/s)\tfailed calls\trecovered\t")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%.0f\t%.0f\t%d\t%s\t\n", r.Outage, r.Processes, budgetName(r.Strategy), r.Figures.Retries,
			r.Figures.Bound, r.Figures.Goodput, r.Figures.Failed, after(r.Result.Recovered, r.Result.RecoveredAfter))
	}
	tw.Flush()
	fmt.Fprintf(w, `
outages:   UNAVAILABLE: every attempt answered at once; pause: the server stopped, at most %d requests waiting;
           storm: a restart (UNAVAILABLE) of a server at 90%% of its capacity, its latency growing 5%% per 1/14 of
           its limit above it, whose work for callers that gave up goes on
retries:   attempts sent during the outage less the calls started in it
bound:     MinReserve + Reserve·S + Burst + (Ratio·R + PerSecond)·T for one budget, S the successes in the
           Window before the outage, R its calls started per second
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
	}
	return strategy
}

// writeBudgetChart draws one row of panels per outage: the retries during
// it, the goodput after it, the calls failed, and the time to recover
// (never: at the top), each against the number of processes, one line per
// strategy.
func writeBudgetChart(path string, b sim.Budgets, runs []sim.BudgetRun) error {
	never := b.Base.Duration - b.Base.PauseAt - b.Base.Pause // "never" is drawn there
	var rows [][]chart.Chart
	for _, o := range b.Outages {
		var retries, goodput, failed, recovered []chart.Series
		for i, st := range b.Strategies {
			var x, yr, yg, yf, yt []float64
			for _, r := range runs {
				if r.Outage != o.Name || r.Strategy != st.Name {
					continue
				}
				x = append(x, math.Log10(float64(r.Processes)))
				yr = append(yr, max(float64(r.Figures.Retries), 1)) // log scales: 1 stands for 0
				yf = append(yf, max(float64(r.Figures.Failed), 1))
				yg = append(yg, 100*r.Figures.Goodput/r.Scenario.Offered())
				t := never.Seconds()
				if r.Result.Recovered {
					t = r.Result.RecoveredAfter.Seconds()
				}
				yt = append(yt, t)
			}
			c := simchart.Color(budgetColors[i%len(budgetColors)])
			name := budgetName(st.Name)
			retries = append(retries, simchart.Line(name, x, yr, c, false))
			goodput = append(goodput, simchart.Line(name, x, yg, c, false))
			failed = append(failed, simchart.Line(name, x, yf, c, false))
			recovered = append(recovered, simchart.Line(name, x, yt, c, false))
		}
		rows = append(rows, []chart.Chart{
			smallPanel(o.Name+": retries sent in the outage", b, retries, logRange(retries)),
			percentPanel(o.Name+": goodput after it, % of offered", b, goodput),
			smallPanel(o.Name+": calls failed", b, failed, logRange(failed)),
			recoveryPanel(o.Name+": seconds to recover (top: never)", b, recovered, never),
		})
	}
	title := fmt.Sprintf("%d clients (%.0f calls/s) in 10 to 10 000 processes, a %v outage:", b.Base.Clients, b.Base.Offered(), b.Base.Pause)
	for i, st := range b.Strategies {
		title += fmt.Sprintf(" %s (%s)", budgetName(st.Name), colorNames[budgetColors[i%len(budgetColors)]])
	}
	title += "; log scales, 1 stands for 0"
	return simchart.WriteGrid(path, title, rows)
}

// budgetColors are the palette's colours of the strategies, in order: red
// for a budget per process, green for the fleet's, then blue, purple.
var budgetColors = []int{0, 3, 2, 4}

var colorNames = []string{"red", "orange", "blue", "green", "purple"}

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
		Width:      300, Height: 250,
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

func percentPanel(title string, b sim.Budgets, series []chart.Series) chart.Chart {
	c := smallPanel(title, b, series, &chart.ContinuousRange{Min: 0, Max: 110})
	for v := 0.0; v <= 100; v += 20 {
		c.YAxis.Ticks = append(c.YAxis.Ticks, chart.Tick{Value: v, Label: fmt.Sprintf("%.0f", v)})
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
