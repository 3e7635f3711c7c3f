package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/platformkit/grpcbackoff/cmd/internal/sim"
)

// serverFlag, as the first argument, makes the binary the server process of
// -real.
const serverFlag = "-fleetsim-server"

// realConfig is the experiment of -real, in real time.
type realConfig struct {
	clients  int
	interval time.Duration
	timeout  time.Duration // per attempt
	pauseAt  time.Duration
	pause    time.Duration
	duration time.Duration
	model    sim.Model
}

// defaultRealConfig is the article's experiment: 1000 clients, a 10 s pause
// at 10 s, 40 s in all.
func defaultRealConfig() realConfig {
	return realConfig{clients: 1000, interval: 10 * time.Second, timeout: 2 * time.Second,
		pauseAt: 10 * time.Second, pause: 10 * time.Second, duration: 40 * time.Second, model: sim.DefaultModel()}
}

func (rc realConfig) validate() error {
	var errs []error
	if rc.clients < 1 || rc.clients > 20000 {
		errs = append(errs, fmt.Errorf("-real-clients (%d) must be between 1 and 20000", rc.clients))
	}
	if rc.pause < 0 || rc.pauseAt+rc.pause > rc.duration {
		errs = append(errs, fmt.Errorf("-real-pause (%v at %v) must end within -real-duration (%v)", rc.pause, rc.pauseAt, rc.duration))
	}
	if rc.duration > 10*time.Minute {
		errs = append(errs, fmt.Errorf("-real-duration (%v) must be at most 10m", rc.duration))
	}
	return errors.Join(errs...)
}

// realResult is one strategy's run of -real.
type realResult struct {
	strategy           string
	samples            []sim.Sample
	recovered, settled bool
	recoveredAfter     time.Duration
	settledAfter       time.Duration
	peak               int
}

// serveChild is the server process: it serves stormsim's model on
// 127.0.0.1, prints "addr ADDRESS", then every 100 ms "c NOW PEAK" (the
// requests in flight), and exits when its standard input closes (the parent
// ended) or after its -max-life.
func serveChild(args []string) error {
	m := sim.DefaultModel()
	fs := flag.NewFlagSet("fleetsim server", flag.ContinueOnError)
	fs.IntVar(&m.Limit, "limit", m.Limit, "")
	fs.Float64Var(&m.K, "k", m.K, "")
	fs.DurationVar(&m.BaseLatency, "base-latency", m.BaseLatency, "")
	fs.Float64Var(&m.Growth, "growth", m.Growth, "")
	life := fs.Duration("max-life", 11*time.Minute, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := m.Validate(); err != nil {
		return err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	svc := sim.NewService(m)
	gs := grpc.NewServer()
	svc.Register(gs)
	go gs.Serve(lis)
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(out, "addr %s\n", lis.Addr())
	out.Flush()
	gone := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(gone) }()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(*life)
	for {
		select {
		case <-tick.C:
			now, peak := svc.Sample()
			fmt.Fprintf(out, "c %d %d\n", now, peak)
			out.Flush()
		case <-gone:
			svc.Close()
			gs.Stop()
			return nil
		case <-deadline.C:
			return errors.New("lived past -max-life")
		}
	}
}

// runReal runs every strategy at once, each with its own server process,
// and prints their recovery beside the simulator's for the same scenario.
func runReal(ctx context.Context, rc realConfig, strategies []sim.Strategy, w io.Writer) error {
	if sigStop == nil {
		return errors.New("-real runs on Linux only")
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "fleetsim -real: %d clients, %v attempt timeout, server limit %d in its own process on 127.0.0.1, SIGSTOP at %v, SIGCONT at %v, %v per strategy, all at once\n",
		rc.clients, rc.timeout, rc.model.Limit, rc.pauseAt, rc.pauseAt+rc.pause, rc.duration)
	ctx, cancel := context.WithTimeout(ctx, rc.duration+30*time.Second)
	defer cancel()
	results := make([]realResult, len(strategies))
	errs := make([]error, len(strategies))
	var wg sync.WaitGroup
	for i, st := range strategies {
		wg.Go(func() { results[i], errs[i] = runRealOne(ctx, exe, rc, st) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}

	sc := sim.DefaultFleet()
	sc.Clients, sc.PerProcess, sc.Model, sc.Interval = rc.clients, rc.clients, rc.model, rc.interval
	sc.PauseAt, sc.Pause, sc.Duration, sc.Backlog = rc.pauseAt, rc.pause, rc.duration, 0
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\treal: recovered\tsettled\tpeak conc.\tOK calls\tsimulated: recovered\tsettled\tpeak conc.\tOK calls\t")
	for _, r := range results {
		var st sim.Strategy
		for _, s := range strategies {
			if s.Name == r.strategy {
				st = s
			}
		}
		sim, err := sim.RunFleet(ctx, sc, st, nil)
		if err != nil {
			return err
		}
		ok := 0
		for _, s := range r.samples {
			ok += s.OK
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%d\t%d\t\n", r.strategy,
			after(r.recovered, r.recoveredAfter), after(r.settled, r.settledAfter), r.peak, ok,
			after(sim.Recovered, sim.RecoveredAfter), after(sim.Settled, sim.SettledAfter), sim.PeakConcurrency, sim.OK)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nreal: the server's own count of requests in flight, reported every 100 ms (none while stopped); simulated: fleetsim with the same scenario and no backlog bound")
	return nil
}

// runRealOne runs one strategy against a server process of its own.
func runRealOne(ctx context.Context, exe string, rc realConfig, st sim.Strategy) (realResult, error) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(cctx, exe, serverFlag,
		"-limit", strconv.Itoa(rc.model.Limit), "-k", fmt.Sprint(rc.model.K),
		"-base-latency", rc.model.BaseLatency.String(), "-growth", fmt.Sprint(rc.model.Growth),
		"-max-life", (rc.duration + time.Minute).String())
	cmd.SysProcAttr = childAttr()
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return realResult{}, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return realResult{}, err
	}
	if err := cmd.Start(); err != nil {
		return realResult{}, err
	}
	defer func() {
		stdin.Close()
		cmd.Process.Signal(sigCont) // so that it may see its stdin close and exit
		cmd.Process.Kill()
		cmd.Wait()
	}()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "addr ") {
		return realResult{}, fmt.Errorf("%s: the server process did not give its address", st.Name)
	}
	addr := strings.TrimPrefix(lines.Text(), "addr ")
	var conc, peak atomic.Int64
	go func() {
		for lines.Scan() {
			var now, p int64
			if _, err := fmt.Sscanf(lines.Text(), "c %d %d", &now, &p); err == nil {
				conc.Store(now)
				for {
					old := peak.Load()
					if p <= old || peak.CompareAndSwap(old, p) {
						break
					}
				}
			}
		}
	}()

	n := int(rc.duration / time.Second)
	t0 := time.Now()
	rec := sim.NewRecorder(t0, time.Second, n)
	// The Retrier cuts each attempt at the timeout and retries it as a
	// timed-out attempt, which only the budget's long-run allowance pays
	// for, as in the simulator.
	st.Policy.AttemptTimeout = rc.timeout
	r, err := st.Retrier(1, nil)
	if err != nil {
		return realResult{}, err
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(r.Unary(), rec.CountAttempts()), grpc.WithDisableRetry())
	if err != nil {
		return realResult{}, err
	}
	defer cc.Close()

	end := t0.Add(rc.duration)
	runCtx, stopClients := context.WithDeadline(cctx, end)
	defer stopClients()
	pop := sim.Population{Clients: rc.clients, Interval: rc.interval, Timeout: rc.timeout, Seed: 1}
	var wg sync.WaitGroup
	for i := range rc.clients {
		wg.Go(func() { sim.Client(runCtx, cc, rec, pop, 1, uint64(i), end) })
	}
	// The outage.
	signals := make(chan error, 1)
	go func() {
		var err error
		if sleepCtx(cctx, time.Until(t0.Add(rc.pauseAt))) {
			err = cmd.Process.Signal(sigStop)
		}
		if err == nil && sleepCtx(cctx, time.Until(t0.Add(rc.pauseAt+rc.pause))) {
			err = cmd.Process.Signal(sigCont)
		}
		signals <- err
	}()
	// The per-second samples.
	res := realResult{strategy: st.Name, samples: make([]sim.Sample, n)}
	for i := range n {
		if !sleepCtx(cctx, time.Until(t0.Add(time.Duration(i+1)*time.Second))) {
			break
		}
		res.samples[i] = rec.Sample(i, int(conc.Load()), int(peak.Swap(conc.Load())), 0)
		res.peak = max(res.peak, res.samples[i].Peak)
	}
	if err := <-signals; err != nil {
		return realResult{}, fmt.Errorf("%s: signalling the server process: %w", st.Name, err)
	}
	stopClients()
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return realResult{}, err
	}
	waiting := 0
	for i := range res.samples {
		s := &res.samples[i]
		waiting += s.Started - s.OK - s.Failed
		s.Waiting = waiting
	}
	resume := int((rc.pauseAt + rc.pause + time.Second - 1) / time.Second)
	offered := float64(rc.clients) / rc.interval.Seconds()
	res.recovered, res.recoveredAfter = sim.Recovery(res.samples, resume, rc.model.Limit, offered)
	res.settled, res.settledAfter = sim.Settled(res.samples, resume, rc.model.Limit)
	return res, nil
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
