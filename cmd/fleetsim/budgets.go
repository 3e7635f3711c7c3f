package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"text/tabwriter"
	"time"

	chart "github.com/wcharczuk/go-chart/v2"
	"github.com/wcharczuk/go-chart/v2/drawing"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/cmd/internal/sim"
	"github.com/platformkit/grpcbackoff/cmd/internal/simchart"
)

// budgetCell is one run of -budgets.
type budgetCell struct {
	processes   int
	unavailable bool
	fleet       bool
	result      sim.Result
	outage      sim.Outage
}

// runBudgets runs issue 29's experiment: each number of processes, both
// outages, a budget per process and the fleet's, parallel runs at once.
func runBudgets(ctx context.Context, b sim.Budgets, parallel int, chartPath string, w io.Writer) error {
	th := grpcbackoff.DefaultThrottle()
	fmt.Fprintf(w, "fleetsim -budgets: %d clients (%.0f calls/s) in %v processes, a %v outage at %v (UNAVAILABLE at once, or a pause with a backlog of %d), %v\n",
		b.Base.Clients, b.Base.Offered(), b.Processes, b.Base.Pause, b.Base.PauseAt, b.Base.Backlog, b.Base.Duration)
	var cells []*budgetCell
	for _, unavailable := range []bool{true, false} {
		for _, p := range b.Processes {
			for _, fleet := range []bool{false, true} {
				cells = append(cells, &budgetCell{processes: p, unavailable: unavailable, fleet: fleet})
			}
		}
	}
	sem := make(chan struct{}, max(parallel, 1))
	errs := make([]error, len(cells))
	var wg sync.WaitGroup
	start := time.Now()
	for i, c := range cells {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			st := sim.RecipeBudget()
			if c.fleet {
				st = sim.RecipeFleet()
			}
			sc := b.Scenario(c.processes, c.unavailable)
			c.result, errs[i] = sim.RunFleet(ctx, sc, st, nil)
			c.outage = sim.OutageOf(c.result, sc, th, c.processes)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "%d runs in %v\n\n", len(cells), time.Since(start).Round(time.Second))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "outage\tprocesses\tbudget\tretries in the outage\tbound, one budget\tbound, per process\tleased (long-run)\trecovered\tfailed calls\t")
	for _, c := range cells {
		kind, budget := "pause", "per process"
		if c.unavailable {
			kind = "UNAVAILABLE"
		}
		if c.fleet {
			budget = "fleet"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%.0f\t%.0f\t%.0f\t%s\t%d\t\n", kind, c.processes, budget, c.outage.Retries,
			c.outage.Bound, c.outage.PerProcess, c.result.Leased, after(c.result.Recovered, c.result.RecoveredAfter), c.result.Failed)
	}
	tw.Flush()
	fmt.Fprint(w, `
retries:   attempts sent during the outage less the calls started in it
bound:     MinReserve + Reserve·S + Burst + (Ratio·R + PerSecond)·T for one budget, S the successes in the
           Window before the outage, R its calls started per second; per process: the floors times the processes
leased:    long-run tokens the processes held in leases of the fleet budget when the outage began
recovered: time after the outage to the first 5 s in a row with goodput at 90% of the offered load
`)
	if chartPath != "" {
		if err := writeBudgetChart(chartPath, b, cells); err != nil {
			return err
		}
		fmt.Fprintf(w, "\nchart: %s\n", chartPath)
	}
	return nil
}

// writeBudgetChart draws the retries during the outage against the number
// of processes (log-log), per-process budgets beside the fleet budget, for
// both outages, with the bound of one budget.
func writeBudgetChart(path string, b sim.Budgets, cells []*budgetCell) error {
	colors := map[bool]drawing.Color{false: {R: 214, G: 39, B: 40, A: 255}, true: {R: 44, G: 160, B: 44, A: 255}}
	var series []chart.Series
	var bound []float64
	top, bottom := 1.0, math.Inf(1)
	for _, unavailable := range []bool{true, false} {
		for _, fleet := range []bool{false, true} {
			var x, y []float64
			for _, c := range cells {
				if c.unavailable != unavailable || c.fleet != fleet {
					continue
				}
				v := max(float64(c.outage.Retries), 1) // a log scale: 1 stands for 0
				x, y = append(x, math.Log10(float64(c.processes))), append(y, v)
				top, bottom = max(top, v), min(bottom, v)
				if unavailable && fleet {
					bound = append(bound, c.outage.Bound)
				}
			}
			name := "per process"
			if fleet {
				name = "fleet"
			}
			st := chart.Style{StrokeColor: colors[fleet], StrokeWidth: 3, DotWidth: 5, DotColor: colors[fleet]}
			if unavailable {
				name += ", UNAVAILABLE"
			} else {
				name += ", paused"
				st.StrokeDashArray = []float64{8, 4}
			}
			series = append(series, chart.ContinuousSeries{Name: name, XValues: x, YValues: y, Style: st})
		}
	}
	var bx []float64
	for _, p := range b.Processes {
		bx = append(bx, math.Log10(float64(p)))
	}
	series = append(series, chart.ContinuousSeries{Name: "bound, one budget", XValues: bx, YValues: bound,
		Style: chart.Style{StrokeColor: drawing.Color{R: 120, G: 120, B: 120, A: 255}, StrokeWidth: 1, StrokeDashArray: []float64{2, 3}}})
	var xt []chart.Tick
	for _, p := range b.Processes {
		xt = append(xt, chart.Tick{Value: math.Log10(float64(p)), Label: fmt.Sprint(p)})
	}
	lo, hi := math.Pow(10, math.Floor(math.Log10(bottom))), math.Pow(10, math.Ceil(math.Log10(top)))
	var yt []chart.Tick
	for v := lo; v <= hi; v *= 10 {
		yt = append(yt, chart.Tick{Value: v, Label: fmt.Sprintf("%.0f", v)})
	}
	c := chart.Chart{
		Title: fmt.Sprintf("Retries sent during a %v outage: %d clients, %.0f calls/s, in 10 to 10 000 processes (log scales)",
			b.Base.Pause, b.Base.Clients, b.Base.Offered()),
		TitleStyle: chart.Style{FontSize: 11, Padding: chart.Box{Top: 6}},
		Width:      simchart.Width, Height: 560,
		Background: chart.Style{Padding: chart.Box{Top: 110, Left: 20, Right: 30, Bottom: 10}},
		XAxis:      chart.XAxis{Name: "client processes (log scale)", Ticks: xt, Range: &chart.ContinuousRange{Min: bx[0] - 0.1, Max: bx[len(bx)-1] + 0.1}},
		YAxis:      chart.YAxis{Range: &chart.LogarithmicRange{Min: lo, Max: hi}, Ticks: yt},
		Series:     series,
	}
	c.Elements = []chart.Renderable{chart.LegendThin(&c, chart.Style{FontSize: 9})}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := c.Render(chart.PNG, f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
