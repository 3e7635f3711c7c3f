// Command stormsim reproduces the retry-storm experiment of "Exponential
// Backoff, or how not to knock the server down" with gRPC and this module's
// real interceptors, and compares retry strategies side by side.
//
// A server in the same process (over bufconn) answers in 100 ms up to 30
// requests in flight and ever slower above that; 1000 clients call it about
// 100 times a second in all, abandoning each attempt after 2 s; the server is
// paused from 10 s to 20 s. Each strategy gets its own server and clients,
// and all of them run at once. While they run, stormsim prints one line per
// model second and strategy; at the end, a summary table, and it writes a
// chart of server concurrency and goodput over time.
//
// Usage:
//
//	go run ./cmd/stormsim [flags]
//
// Durations are in model time: -scale 0.5 (the default) runs twice as fast
// as real time by scaling every duration of the model, the clients and the
// strategies, so the default run takes 30 s. See README.md for the model,
// the strategies and the results.
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
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/platformkit/grpcbackoff/cmd/internal/sim"
	"github.com/platformkit/grpcbackoff/cmd/internal/simchart"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "stormsim:", err)
		os.Exit(2)
	}
}

// config is what the flags say.
type config struct {
	scenario   sim.Storm
	strategies []sim.Strategy
	chart      string
	quiet      bool
}

func parse(args []string, stderr io.Writer) (config, error) {
	sc := sim.DefaultStorm()
	sc.Scale = 0.5
	fs := flag.NewFlagSet("stormsim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&sc.Population.Clients, "clients", sc.Population.Clients, "number of clients")
	fs.DurationVar(&sc.Population.Interval, "interval", sc.Population.Interval, "mean think time of a client between calls (exponentially distributed)")
	fs.DurationVar(&sc.Population.Timeout, "timeout", sc.Population.Timeout, "timeout of each attempt")
	fs.Uint64Var(&sc.Population.Seed, "seed", sc.Population.Seed, "seed of the think times")
	fs.DurationVar(&sc.PauseAt, "pause-at", sc.PauseAt, "when the server is paused")
	fs.DurationVar(&sc.Pause, "pause", sc.Pause, "how long the server stays paused")
	fs.DurationVar(&sc.Duration, "duration", sc.Duration, "length of the run")
	fs.IntVar(&sc.Model.Limit, "limit", sc.Model.Limit, "concurrency up to which the server answers in -base-latency")
	fs.DurationVar(&sc.Model.BaseLatency, "base-latency", sc.Model.BaseLatency, "latency of the server up to -limit requests in flight")
	fs.Float64Var(&sc.Model.Growth, "growth", sc.Model.Growth, "factor by which the latency grows for every -k requests above -limit")
	fs.Float64Var(&sc.Model.K, "k", sc.Model.K, "requests above -limit that multiply the latency by -growth")
	rule := fs.String("latency", sc.Model.Rule.String(), "when a request's latency is decided: start (from the concurrency when the server takes it) or current (it ends once its age reaches the latency at the current concurrency, as the original server)")
	fs.Float64Var(&sc.Scale, "scale", sc.Scale, "real seconds per model second: 1 is real time, 0.5 twice as fast (below about 0.5, a busy 2-core machine's scheduling delays start to show in the results)")
	names := fs.String("strategies", "fixed,exponential,recipe,recipe+budget", "comma-separated strategies to compare: fixed, exponential, recipe, recipe+budget, recipe+adaptive, recipe+both, fixed+adaptive, none (no retry)")
	chart := fs.String("chart", "stormsim.png", "chart file to write, .png or .svg (empty: none)")
	quiet := fs.Bool("q", false, "do not print the per-second lines")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if sc.Model.Rule, err = sim.ParseLatencyRule(*rule); err != nil {
		return config{}, err
	}
	if err := sc.Validate(); err != nil {
		return config{}, err
	}
	strategies, err := sim.SelectStrategies(*names)
	if err != nil {
		return config{}, err
	}
	if *chart != "" && !strings.HasSuffix(*chart, ".png") && !strings.HasSuffix(*chart, ".svg") {
		return config{}, fmt.Errorf("chart %q must end in .png or .svg", *chart)
	}
	return config{scenario: sc, strategies: strategies, chart: *chart, quiet: *quiet}, nil
}

// run is the whole command: it parses args, runs every strategy at once,
// and writes the per-second lines and the summary to stdout.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	cfg, err := parse(args, stdout)
	if err != nil {
		return err
	}
	sc := cfg.scenario
	fmt.Fprintf(stdout, "stormsim: %d clients, offered %.0f calls/s, timeout %v, server limit %d at %v (growth %v per %v, latency rule %v), pause %v at %v, %v per strategy at scale %v\n",
		sc.Population.Clients, sc.Population.Offered(), sc.Population.Timeout, sc.Model.Limit, sc.Model.BaseLatency,
		sc.Model.Growth, sc.Model.K, sc.Model.Rule, sc.Pause, sc.PauseAt, sc.Duration, sc.Scale)

	lines := newLiveLines(stdout, cfg.strategies)
	results := make([]sim.Result, len(cfg.strategies))
	errs := make([]error, len(cfg.strategies))
	var wg sync.WaitGroup
	for i, st := range cfg.strategies {
		wg.Go(func() {
			var live func(sim.Sample)
			if !cfg.quiet {
				live = func(s sim.Sample) { lines.add(i, s) }
			}
			results[i], errs[i] = sim.RunStorm(ctx, sc, st, live)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}

	fmt.Fprintln(stdout)
	summary(stdout, sc, results)
	if cfg.chart != "" {
		if err := simchart.Write(cfg.chart, simchart.StormFrame(sc), results); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\nchart: %s\n", cfg.chart)
	}
	return nil
}

// liveLines prints the per-second lines of strategies run at once, each
// second's lines together and in the strategies' order.
type liveLines struct {
	w     io.Writer
	names []string
	width int

	mu      sync.Mutex
	pending map[int][]*sim.Sample // by second, by strategy
	next    int                   // the next second to print
}

func newLiveLines(w io.Writer, strategies []sim.Strategy) *liveLines {
	l := &liveLines{w: w, pending: make(map[int][]*sim.Sample)}
	for _, st := range strategies {
		l.names = append(l.names, st.Name)
		l.width = max(l.width, len(st.Name))
	}
	return l
}

// add records strategy i's sample and prints every second now complete.
func (l *liveLines) add(i int, s sim.Sample) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending[s.Second] == nil {
		l.pending[s.Second] = make([]*sim.Sample, len(l.names))
	}
	l.pending[s.Second][i] = &s
	for {
		row := l.pending[l.next]
		if row == nil || slices.Contains(row, nil) {
			return
		}
		for j, s := range row {
			fmt.Fprintf(l.w, "t=%-3s  %-*s  OK %4d/s  errors %4d/s  timedout %4d/s  attempts %5d/s  concurrency %d\n",
				fmt.Sprintf("%ds", s.Second+1), l.width, l.names[j], s.OK, s.Failed, s.TimedOut, s.Attempts, s.Concurrency)
		}
		delete(l.pending, l.next)
		l.next++
	}
}

// summary writes the table of results and what its columns mean.
func summary(w io.Writer, sc sim.Storm, results []sim.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\trecovered\tsettled\tpeak conc.\tampl. outage\tampl. after\tOK calls\tfailed\tthrottled\twaiting at end\tgoodput end\tp50\tp99\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%d\t%d\t%d\t%.0f/s\t%s\t%s\t\n",
			r.Strategy, after(r.Recovered, r.RecoveredAfter), after(r.Settled, r.SettledAfter), r.PeakConcurrency, ratio(r.AmplificationOutage), ratio(r.AmplificationAfter),
			r.OK, r.Failed, r.Throttled, r.WaitingAtEnd, r.GoodputAfter, round(r.P50), round(r.P99))
	}
	tw.Flush()
	fmt.Fprintf(w, `
recovered:      time after the resume (at %v) to the first 5 s in a row with at most %d requests in the
                server at the end of each second and goodput at 90%% of the offered load (%.0f/s)
settled:        time after the resume from which every second ended with at most %[2]d requests in
                the server and at most %[2]d calls waiting, to the end of the run
peak conc.:     most requests in the server at once, backlog of the pause included
ampl.:          attempts sent per call started, during the pause and after it
failed:         calls that ended in an error (throttled: a retry refused by the throttle)
waiting at end: calls still waiting for an answer when the run ended
goodput end:    successful calls per second over the last third of the run
p50, p99:       latency of the successful calls, retries included
`, sc.PauseAt+sc.Pause, sc.Model.Limit, sc.Population.Offered())
}

// after is "+Ns" for a measure met N s after the resume, "no" otherwise.
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

func round(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(time.Second)
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}
