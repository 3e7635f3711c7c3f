// Command fleetsim simulates the retry-storm experiment of cmd/stormsim for
// a fleet: 100 000 clients by default, each running this module's own retry
// decision (grpcbackoff.Policy.Decide, the retry budget, adaptive
// throttling) on a virtual clock, against stormsim's server model scaled to
// match. A discrete-event simulation: 120 s of model time take about a
// second.
//
// Usage:
//
//	go run ./cmd/fleetsim                 # the default scenario, every strategy, writes fleetsim-run.png
//	go run ./cmd/fleetsim -grid           # loads 50–90% × outages 1–60 s, writes fleetsim.png
//	go run ./cmd/fleetsim -real           # the article's experiment for real: a server process, SIGSTOP/SIGCONT
//
// See README.md for the model, the strategies and the results.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/platformkit/grpcbackoff/cmd/internal/sim"
	"github.com/platformkit/grpcbackoff/cmd/internal/simchart"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == serverFlag {
		// The child of -real: the server process.
		if err := serveChild(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "fleetsim server:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == clientFlag {
		// A client process of -budgets-real.
		if err := clientChild(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "fleetsim client:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "fleetsim:", err)
		os.Exit(2)
	}
}

// config is what the flags say.
type config struct {
	mode       string // "single", "grid" or "real"
	scenario   sim.Fleet
	strategies []sim.Strategy
	grid       sim.Grid
	chart      string
	real       realConfig
	parallel   int
	perSecond  bool // the single run's samples, second by second

	budgetsReal budgetsReal
	budgets     sim.Budgets
}

func parse(args []string, stderr io.Writer) (config, error) {
	sc := sim.DefaultFleet()
	g := sim.DefaultGrid()
	fs := flag.NewFlagSet("fleetsim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&sc.Clients, "clients", sc.Clients, "number of clients")
	fs.IntVar(&sc.PerProcess, "per-process", sc.PerProcess, "clients per client process, which share a retry budget and adaptive throttling state")
	fs.DurationVar(&sc.Interval, "interval", sc.Interval, "mean think time of a client between calls (exponentially distributed)")
	fs.DurationVar(&sc.PauseAt, "pause-at", sc.PauseAt, "when the server is paused")
	fs.DurationVar(&sc.Pause, "pause", sc.Pause, "how long the server stays paused (single run); with -budgets, its outage (30s), the run going on as long after it")
	fs.BoolVar(&sc.Unavailable, "unavailable", sc.Unavailable, "the outage answers attempts with UNAVAILABLE at once (a restart) instead of pausing the server")
	fs.Float64Var(&sc.Failing, "failing", sc.Failing, "with -unavailable, the share of attempts that fail during the outage, in (0, 1] (0: all)")
	fs.IntVar(&sc.Backlog, "backlog", sc.Backlog, "requests that can wait for the paused server, further ones are lost (0: no bound)")
	fs.DurationVar(&sc.Duration, "duration", sc.Duration, "length of the run (single run)")
	fs.IntVar(&sc.Model.Limit, "limit", sc.Model.Limit, "concurrency up to which the server answers in -base-latency")
	fs.Float64Var(&sc.Model.K, "k", sc.Model.K, "requests above -limit that multiply the latency by -growth")
	fs.DurationVar(&sc.Model.BaseLatency, "base-latency", sc.Model.BaseLatency, "latency of the server up to -limit requests in flight")
	fs.Float64Var(&sc.Model.Growth, "growth", sc.Model.Growth, "factor by which the latency grows for every -k requests above -limit")
	load := fs.Float64("load", 0, "offered load as a share of the server's capacity (limit/base latency), in (0, 1]; sets -limit and -k (0: use them)")
	fs.Uint64Var(&sc.Seed, "seed", sc.Seed, "seed of the think times and adaptive draws")
	names := fs.String("strategies", "fixed,exponential,recipe,recipe+budget,recipe+adaptive,recipe+both", "comma-separated strategies: fixed, exponential, recipe, recipe+budget, recipe+adaptive, recipe+both, fixed+adaptive, none, recipe+fleet, fleet:stock, fleet:when-due, fleet:demand, recipe+guard, recipe+budget+guard, grpc, grpc+guard (the last four: not with -real); with -budgets, replaces its six")
	grid := fs.Bool("grid", false, "run the grid of -grid-loads × -grid-outages and write -chart")
	loads := fs.String("grid-loads", "50,60,70,80,90", "offered loads of the grid, in % of capacity")
	outages := fs.String("grid-outages", "1s,2s,10s,30s,60s", "outage lengths of the grid")
	fs.DurationVar(&g.After, "after", g.After, "how long each grid run goes on after the resume")
	fs.IntVar(&g.Parallel, "parallel", g.Parallel, "grid runs at once")
	perSecond := fs.Bool("per-second", false, "print the single run's seconds: calls started, succeeded and failed, attempts, retries at the server, calls the guard refused, requests in the server")
	chart := fs.String("chart", "fleetsim-run.png", "chart to write (empty: none): the single run's concurrency and goodput over time, .png or .svg; with -grid, the grid, .png (default fleetsim.png)")
	processes := fs.String("processes", "10,100,1000,10000", "numbers of client processes of -budgets")
	budgets := fs.Bool("budgets", false, "run issues 29, 35 and 37's experiment: 10 to 10 000 processes (-processes), a 30 s outage (UNAVAILABLE at once, a pause, or a storm that keeps a fragile server down), a budget per process beside the fleet's and the server's retry guard, for this library's clients and grpc-go's; writes -chart (default fleetsim-budgets.png)")
	fleetBound := fs.Bool("fleet-bound", false, "run issue 42's experiment: the fleet budget at the scale of fleetbudget's real-process runs (10 and 40 processes at 100 calls/s in all, 20 at 0.5 calls/s, 10 idle; a 10 s outage answered UNAVAILABLE; Window 5 s), 5 seeds from -seed")
	budgetsRealMode := fs.Bool("budgets-real", false, "run -budgets for real: two fleets of client processes (a budget per process; the fleet's on a redis-server it starts), a backend process each, paused with SIGSTOP, Redis killed once; writes -chart (default fleetsim-budgets-real.png)")
	br := defaultBudgetsReal()
	fs.IntVar(&br.processes, "real-processes", br.processes, "client processes of each fleet of -budgets-real")
	fs.IntVar(&br.clients, "real-per-process", br.clients, "clients per process of -budgets-real")
	fs.DurationVar(&br.killAt, "real-redis-kill-at", br.killAt, "when -budgets-real kills the redis-server")
	fs.DurationVar(&br.down, "real-redis-down", br.down, "how long -budgets-real keeps it down")
	fs.StringVar(&br.redisServer, "redis-server", br.redisServer, "the redis-server binary of -budgets-real")
	realMode := fs.Bool("real", false, "run the article's experiment for real: the server in a child process on 127.0.0.1, paused with SIGSTOP and resumed with SIGCONT")
	rc := defaultRealConfig()
	fs.IntVar(&rc.clients, "real-clients", rc.clients, "clients of -real")
	fs.DurationVar(&rc.pauseAt, "real-pause-at", rc.pauseAt, "when -real stops the server")
	fs.DurationVar(&rc.pause, "real-pause", rc.pause, "how long -real keeps the server stopped")
	fs.DurationVar(&rc.duration, "real-duration", rc.duration, "length of each -real run")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *grid && *realMode {
		return config{}, errors.New("-grid and -real are exclusive")
	}
	if *load != 0 {
		if !(*load > 0 && *load <= 1) {
			return config{}, fmt.Errorf("-load (%v) must be in (0, 1]", *load)
		}
		sc = sc.WithLoad(*load)
	}
	strategies, err := sim.SelectStrategies(*names)
	if err != nil {
		return config{}, err
	}
	chartSet := false
	fs.Visit(func(f *flag.Flag) { chartSet = chartSet || f.Name == "chart" })
	if *grid && !chartSet {
		*chart = "fleetsim.png"
	}
	if *budgets && !chartSet {
		*chart = "fleetsim-budgets.png"
	}
	if *budgetsRealMode && !chartSet {
		*chart = "fleetsim-budgets-real.png"
	}
	if *chart != "" && !strings.HasSuffix(*chart, ".png") && (*grid || !strings.HasSuffix(*chart, ".svg")) {
		return config{}, fmt.Errorf("-chart %q must end in .png (or .svg, for the single run)", *chart)
	}
	cfg := config{mode: "single", scenario: sc, strategies: strategies, chart: *chart, parallel: g.Parallel, perSecond: *perSecond}
	switch {
	case *fleetBound:
		cfg.mode = "fleet-bound"
	case *budgets:
		cfg.mode = "budgets"
		cfg.budgets = sim.DefaultBudgets()
		fs.Visit(func(f *flag.Flag) { // the flags given replace the experiment's defaults
			b := &cfg.budgets.Base
			switch f.Name {
			case "clients":
				b.Clients = sc.Clients
			case "backlog":
				b.Backlog = sc.Backlog
			case "limit", "k", "load":
				b.Model = sc.Model
			case "pause": // the run goes on as long after it
				b.Duration += sc.Pause - b.Pause
				b.Pause = sc.Pause
			}
		})
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "strategies" {
				cfg.budgets.Strategies = strategies
			}
		})
		cfg.budgets.Processes = nil
		for f := range strings.SplitSeq(*processes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return config{}, fmt.Errorf("-processes: %q is not a number of processes", f)
			}
			cfg.budgets.Processes = append(cfg.budgets.Processes, n)
		}
	case *budgetsRealMode:
		cfg.mode = "budgets-real"
		br.pauseAt, br.pause = rc.pauseAt, rc.pause
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "real-duration" {
				br.duration = rc.duration
			}
		})
		if err := br.validate(); err != nil {
			return config{}, err
		}
		cfg.budgetsReal = br
	case *grid:
		cfg.mode = "grid"
		g.Base, g.Strategies = sc, strategies
		if g.Loads, err = parsePercents(*loads); err != nil {
			return config{}, fmt.Errorf("-grid-loads: %w", err)
		}
		if g.Outages, err = parseDurations(*outages); err != nil {
			return config{}, fmt.Errorf("-grid-outages: %w", err)
		}
		if err := g.Validate(); err != nil {
			return config{}, err
		}
		cfg.grid = g
	case *realMode:
		cfg.mode = "real"
		if err := rc.validate(); err != nil {
			return config{}, err
		}
		cfg.real = rc
	default:
		if err := sc.Validate(); err != nil {
			return config{}, err
		}
	}
	return cfg, nil
}

func parsePercents(s string) ([]float64, error) {
	var out []float64
	for f := range strings.SplitSeq(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(v > 0 && v <= 100) {
			return nil, fmt.Errorf("%q is not a percentage in (0, 100]", f)
		}
		out = append(out, v/100)
	}
	return out, nil
}

func parseDurations(s string) ([]time.Duration, error) {
	var out []time.Duration
	for f := range strings.SplitSeq(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d < 0 {
			return nil, fmt.Errorf("%q is not a non-negative duration", f)
		}
		out = append(out, d)
	}
	return out, nil
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	cfg, err := parse(args, stdout)
	if err != nil {
		return err
	}
	switch cfg.mode {
	case "grid":
		return runGrid(ctx, cfg, stdout)
	case "real":
		return runReal(ctx, cfg.real, cfg.strategies, stdout)
	case "budgets":
		cfg.budgets.Parallel = cfg.parallel
		return runBudgets(ctx, cfg.budgets, cfg.chart, stdout)
	case "budgets-real":
		return runBudgetsReal(ctx, cfg.budgetsReal, cfg.chart, stdout)
	case "fleet-bound":
		return runFleetBound(ctx, cfg.scenario.Seed, cfg.parallel, stdout)
	}
	sc := cfg.scenario
	fmt.Fprintf(stdout, "fleetsim: %d clients (%d per process), offered %.0f calls/s = %.0f%% of capacity, server limit %d at %v (growth %v per %v), pause %v at %v (backlog %d), %v\n",
		sc.Clients, sc.PerProcess, sc.Offered(), 100*sc.Offered()/sc.Capacity(), sc.Model.Limit, sc.Model.BaseLatency,
		sc.Model.Growth, sc.Model.K, sc.Pause, sc.PauseAt, sc.Backlog, sc.Duration)
	var results []sim.Result
	for _, st := range cfg.strategies {
		r, err := sim.RunFleet(ctx, sc, st, nil)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	summary(stdout, results)
	if cfg.perSecond {
		perSecondTables(stdout, results)
	}
	if cfg.chart != "" {
		if err := simchart.Write(cfg.chart, simchart.FleetFrame(sc), results); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\nchart: %s\n", cfg.chart)
	}
	return nil
}

func summary(w io.Writer, results []sim.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\trecovered\tsettled\tpeak conc.\tampl. outage\tampl. after\tOK calls\tfailed\trejected\tthrottled\tlost\tevents\tevents/s\twall\tB/client\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.1fM\t%v\t%.0f\t\n",
			r.Strategy, after(r.Recovered, r.RecoveredAfter), after(r.Settled, r.SettledAfter), r.PeakConcurrency,
			ratio(r.AmplificationOutage), ratio(r.AmplificationAfter), r.OK, r.Failed, r.Rejected, r.Throttled, r.Lost,
			r.Events, float64(r.Events)/r.Wall.Seconds()/1e6, r.Wall.Round(time.Millisecond), r.BytesPerClient)
	}
	tw.Flush()
	fmt.Fprint(w, `
recovered:  time after the resume to the first 5 s in a row with the server at or under its limit and
            a goodput of at least 90% of the offered load
settled:    time after the resume from which every second ended with at most limit requests in the server
            and limit calls waiting, to the end of the run
ampl.:      attempts per call started, during the pause and after it
rejected:   calls and retries rejected locally by adaptive throttling; throttled: retries refused by the budget
lost:       attempts that found the paused server's backlog full
B/client:   heap held at the end of the run per client (clients, processes, event queue, counters)
`)
}

// perSecondTables writes each result's samples, a second a line.
func perSecondTables(w io.Writer, results []sim.Result) {
	for _, r := range results {
		fmt.Fprintf(w, "\n%s, second by second:\n", r.Strategy)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "second\tstarted\tOK\tfailed\tattempts\tretries at the server\trefused\tin the server\t")
		for _, x := range r.Samples {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", x.Second, x.Started, x.OK, x.Failed, x.Attempts, x.ServerRetries, x.Refused, x.Concurrency)
		}
		tw.Flush()
	}
}

func after(ok bool, d time.Duration) string {
	if !ok {
		return "no"
	}
	return fmt.Sprintf("+%ds", int(d/time.Second))
}

func ratio(f float64) string {
	if math.IsNaN(f) {
		return "-"
	}
	return fmt.Sprintf("%.2f", f)
}

func runGrid(ctx context.Context, cfg config, w io.Writer) error {
	g := cfg.grid
	fmt.Fprintf(w, "fleetsim grid: %d clients, offered %.0f calls/s, loads %v of capacity, outages %v at %v, %v after, %d strategies, %d at once\n",
		g.Base.Clients, g.Base.Offered(), g.Loads, g.Outages, g.Base.PauseAt, g.After, len(g.Strategies), g.Parallel)
	start := time.Now()
	res, err := sim.RunGrid(ctx, g, func(done, total int, c sim.Cell) {
		r := c.Result
		fmt.Fprintf(w, "[%3d/%d %5.0fs] load %3.0f%% outage %-4v %-16s recovered %-5s %5.1fM events in %5.2fs (%.1fM/s), %4.0f B/client\n",
			done, total, time.Since(start).Seconds(), c.Load*100, c.Outage, c.Strategy, after(r.Recovered, r.RecoveredAfter),
			float64(r.Events)/1e6, r.Wall.Seconds(), float64(r.Events)/r.Wall.Seconds()/1e6, r.BytesPerClient)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%d runs, %.0fM events in %v (%.1fM events/s)\n\n", len(g.Strategies)*len(g.Loads)*len(g.Outages),
		float64(res.Events)/1e6, res.Wall.Round(time.Second), float64(res.Events)/res.Wall.Seconds()/1e6)
	gridTables(w, res)
	if cfg.chart != "" {
		if err := writeGridChart(cfg.chart, res); err != nil {
			return err
		}
		fmt.Fprintf(w, "\nchart: %s\n", cfg.chart)
	}
	return nil
}

// gridTables writes one table per strategy: recovery time by load and
// outage, and then how the default compares with the best in each cell.
func gridTables(w io.Writer, res sim.GridResult) {
	g := res.Grid
	for s, st := range g.Strategies {
		fmt.Fprintf(w, "%s: seconds from the resume to recovery (no: not within %v)\n", st.Name, g.After)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprint(tw, "load \\ outage\t")
		for _, o := range g.Outages {
			fmt.Fprintf(tw, "%v\t", o)
		}
		fmt.Fprintln(tw)
		for l, load := range g.Loads {
			fmt.Fprintf(tw, "%.0f%%\t", load*100)
			for o := range g.Outages {
				r := res.Cells[s][l][o].Result
				fmt.Fprintf(tw, "%s\t", after(r.Recovered, r.RecoveredAfter))
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	for _, st := range g.Strategies {
		if st.Name != sim.DefaultStrategy {
			continue
		}
		bad := res.Check(st.Name, 5*time.Second)
		if len(bad) == 0 {
			fmt.Fprintf(w, "%s (the default) recovers in every cell within 5 s of the best strategy\n", st.Name)
		} else {
			fmt.Fprintf(w, "%s (the default) against the best strategy of each cell (5 s of slack):\n", st.Name)
			for _, b := range bad {
				fmt.Fprintln(w, "  "+b)
			}
		}
	}
}
