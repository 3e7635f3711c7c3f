package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	chart "github.com/wcharczuk/go-chart/v2"
	"github.com/wcharczuk/go-chart/v2/drawing"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/cmd/internal/sim"
	"github.com/platformkit/grpcbackoff/cmd/internal/simchart"
	"github.com/platformkit/grpcbackoff/fleetbudget"
	"github.com/platformkit/grpcbackoff/interceptor"
)

// clientFlag, as the first argument, makes the binary a client process of
// -budgets-real.
const clientFlag = "-fleetsim-client"

// budgetsReal is the experiment of -budgets-real: two fleets of client
// processes, one with a budget per process and one with the fleet's on a
// real redis-server, each against a backend process of its own, paused
// with SIGSTOP; Redis is killed once, later, and started again.
type budgetsReal struct {
	processes, clients   int // per fleet; clients per process
	pauseAt, pause       time.Duration
	killAt, down         time.Duration // Redis: killed at, for
	duration, lease      time.Duration
	redisServer          string
	model                sim.Model
	interval, attemptOut time.Duration
}

func defaultBudgetsReal() budgetsReal {
	return budgetsReal{processes: 50, clients: 20, pauseAt: 10 * time.Second, pause: 10 * time.Second,
		killAt: 30 * time.Second, down: 10 * time.Second, duration: 55 * time.Second, lease: time.Second,
		redisServer: "redis-server", model: sim.DefaultModel(), interval: 10 * time.Second, attemptOut: 2 * time.Second}
}

func (c budgetsReal) validate() error {
	var errs []error
	if c.processes < 1 || c.processes > 200 || c.clients < 1 || c.clients > 1000 {
		errs = append(errs, fmt.Errorf("-real-processes (%d) must be 1 to 200, -real-per-process (%d) 1 to 1000", c.processes, c.clients))
	}
	if c.pauseAt+c.pause > c.duration || c.killAt+c.down > c.duration || c.duration > 5*time.Minute {
		errs = append(errs, fmt.Errorf("the pause (%v at %v) and Redis's outage (%v at %v) must end within -real-duration (%v, at most 5m)",
			c.pause, c.pauseAt, c.down, c.killAt, c.duration))
	}
	return errors.Join(errs...)
}

// realSecond is what one fleet did in one second, all processes added up.
type realSecond struct {
	started, ok, failed, attempts, throttled int
	fallen                                   int // processes not holding a lease at the end of the second (fleet)
}

// realFleet is one fleet's run.
type realFleet struct {
	name      string
	seconds   []realSecond
	fellAfter []time.Duration // per process: from Redis's kill to its fallback
	rejoined  []time.Duration // per process: from Redis's restart to its next lease
	warnings  []int           // per process: the times it logged that it could not renew
}

// runBudgetsReal runs both fleets at once and reports them.
func runBudgetsReal(ctx context.Context, c budgetsReal, chartPath string, w io.Writer) error {
	if sigStop == nil {
		return errors.New("-budgets-real runs on Linux only")
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	redisPath, err := exec.LookPath(c.redisServer)
	if err != nil {
		return fmt.Errorf("-budgets-real needs a redis-server (apt-get install redis-server): %w", err)
	}
	fmt.Fprintf(w, "fleetsim -budgets-real: 2 fleets of %d client processes × %d clients, each against a backend process paused (SIGSTOP) %v at %v; the fleet budget's redis-server killed at %v and started again %v later; %v\n",
		c.processes, c.clients, c.pause, c.pauseAt, c.killAt, c.down, c.duration)
	ctx, cancel := context.WithTimeout(ctx, c.duration+time.Minute)
	defer cancel()

	port, err := freePort()
	if err != nil {
		return err
	}
	redisURL := fmt.Sprintf("redis://127.0.0.1:%d", port)
	startRedis := func() (*exec.Cmd, error) {
		cmd := exec.CommandContext(ctx, redisPath, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
		cmd.SysProcAttr = childAttr()
		return cmd, cmd.Start()
	}
	redis, err := startRedis()
	if err != nil {
		return err
	}
	var redisMu sync.Mutex
	defer func() {
		redisMu.Lock()
		redis.Process.Kill()
		redis.Wait()
		redisMu.Unlock()
	}()
	if err := waitListening(ctx, fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
		return fmt.Errorf("redis-server: %w", err)
	}

	t0 := time.Now().Add(2 * time.Second) // the processes start their clients at t0
	var fleets [2]*realFleet
	var errs [2]error
	var wg sync.WaitGroup
	for i, url := range []string{"", redisURL} {
		wg.Go(func() { fleets[i], errs[i] = runRealFleet(ctx, exe, c, url, t0) })
	}
	// Redis's outage.
	wg.Go(func() {
		if !sleepCtx(ctx, time.Until(t0.Add(c.killAt))) {
			return
		}
		redisMu.Lock()
		defer redisMu.Unlock()
		redis.Process.Kill()
		redis.Wait()
		if !sleepCtx(ctx, time.Until(t0.Add(c.killAt+c.down))) {
			return
		}
		if r, err := startRedis(); err == nil {
			redis = r
		}
	})
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return err
	}
	fleets[0].name, fleets[1].name = "budget per process", "fleet budget (Redis)"

	th := grpcbackoff.DefaultThrottle()
	from, to := int(c.pauseAt/time.Second), int((c.pauseAt+c.pause)/time.Second)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\nbudget\tretries in the pause\tbound, one budget\tbound, per process\tthrottled\tfailed calls while Redis was down\t")
	for _, f := range fleets {
		retries, started, failedDown := 0, 0, 0
		for i, s := range f.seconds {
			if i >= from && i < to {
				retries += s.attempts - s.started
				started += s.started
			}
			if i >= int(c.killAt/time.Second) && i < int((c.killAt+c.down)/time.Second) {
				failedDown += s.failed
			}
		}
		// A paused server's failures are timeouts: the long-run allowance pays.
		one := float64(th.Burst) + th.Ratio*float64(started) + th.PerSecond*c.pause.Seconds()
		per := float64(c.processes)*(float64(th.Burst)+th.PerSecond*c.pause.Seconds()) + th.Ratio*float64(started)
		throttled := 0
		for _, s := range f.seconds {
			throttled += s.throttled
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%d\t%d\t\n", f.name, retries, one, per, throttled, failedDown)
	}
	tw.Flush()
	fl := fleets[1]
	worst, rejoin := time.Duration(0), time.Duration(0)
	for _, d := range fl.fellAfter {
		worst = max(worst, d)
	}
	for _, d := range fl.rejoined {
		rejoin = max(rejoin, d)
	}
	fmt.Fprintf(w, "\nRedis killed at %v: %d of %d processes fell back to their share, the last %v after the kill (lease period %v); all %d joined again within %v of its restart\n",
		c.killAt, len(fl.fellAfter), c.processes, worst.Round(time.Millisecond), c.lease, len(fl.rejoined), rejoin.Round(time.Millisecond))
	once := 0
	for _, n := range fl.warnings {
		if n == 1 {
			once++
		}
	}
	fmt.Fprintf(w, "%d of %d processes logged the fallback exactly once\n", once, c.processes)
	fmt.Fprintln(w, "\nretries per second (attempts less calls started):")
	fmt.Fprint(w, "second:     ")
	for i := range fleets[0].seconds {
		fmt.Fprintf(w, "%5d", i)
	}
	for _, f := range fleets {
		fmt.Fprintf(w, "\n%-12s", strings.Fields(f.name)[0]+":")
		for _, s := range f.seconds {
			fmt.Fprintf(w, "%5d", s.attempts-s.started)
		}
	}
	fmt.Fprintln(w)
	if chartPath != "" {
		if err := writeRealBudgetChart(chartPath, c, fleets); err != nil {
			return err
		}
		fmt.Fprintf(w, "\nchart: %s\n", chartPath)
	}
	return nil
}

// runRealFleet runs one fleet: its backend process and its client
// processes, with the fleet budget on redisURL if it is not "".
func runRealFleet(ctx context.Context, exe string, c budgetsReal, redisURL string, t0 time.Time) (*realFleet, error) {
	backend := exec.CommandContext(ctx, exe, serverFlag, "-limit", strconv.Itoa(c.model.Limit), "-k", fmt.Sprint(c.model.K),
		"-max-life", (c.duration + time.Minute).String())
	backend.SysProcAttr = childAttr()
	stdin, err := backend.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := backend.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := backend.Start(); err != nil {
		return nil, err
	}
	defer func() {
		stdin.Close()
		backend.Process.Signal(sigCont)
		backend.Process.Kill()
		backend.Wait()
	}()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "addr ") {
		return nil, errors.New("the backend process did not give its address")
	}
	addr := strings.TrimPrefix(lines.Text(), "addr ")
	go io.Copy(io.Discard, stdout)
	go func() {
		if sleepCtx(ctx, time.Until(t0.Add(c.pauseAt))) {
			backend.Process.Signal(sigStop)
		}
		if sleepCtx(ctx, time.Until(t0.Add(c.pauseAt+c.pause))) {
			backend.Process.Signal(sigCont)
		}
	}()

	n := int(c.duration / time.Second)
	f := &realFleet{seconds: make([]realSecond, n)}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, c.processes)
	for p := range c.processes {
		wg.Go(func() {
			cmd := exec.CommandContext(ctx, exe, clientFlag, "-addr", addr, "-redis", redisURL, "-clients", strconv.Itoa(c.clients),
				"-seed", strconv.Itoa(p), "-t0", strconv.FormatInt(t0.UnixNano(), 10), "-duration", c.duration.String(), "-lease", c.lease.String())
			cmd.SysProcAttr = childAttr()
			var logs strings.Builder
			cmd.Stderr = &logs
			out, err := cmd.StdoutPipe()
			if err != nil {
				errs[p] = err
				return
			}
			if err := cmd.Start(); err != nil {
				errs[p] = err
				return
			}
			var fell, rejoined time.Duration = -1, -1
			joined := make([]bool, n) // at the end of each second
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				fs := strings.Fields(sc.Text())
				switch {
				case len(fs) == 3 && fs[0] == "j":
					ms, _ := strconv.Atoi(fs[1])
					at := time.Duration(ms) * time.Millisecond
					if sec := int(at / time.Second); sec >= 0 && sec < n {
						joined[sec] = fs[2] == "1"
					}
					if at >= c.killAt && fell < 0 && fs[2] == "0" {
						fell = at - c.killAt
					}
					if at >= c.killAt+c.down && fell >= 0 && rejoined < 0 && fs[2] == "1" {
						rejoined = at - c.killAt - c.down
					}
				case len(fs) == 7 && fs[0] == "s":
					v := make([]int, 6)
					for i := range v {
						v[i], _ = strconv.Atoi(fs[i+1])
					}
					if v[0] >= 0 && v[0] < n {
						mu.Lock()
						s := &f.seconds[v[0]]
						s.started += v[1]
						s.ok += v[2]
						s.failed += v[3]
						s.attempts += v[4]
						s.throttled += v[5]
						mu.Unlock()
					}
				}
			}
			if errs[p] = cmd.Wait(); errs[p] != nil {
				errs[p] = fmt.Errorf("client process %d: %w\n%s", p, errs[p], logs.String())
			}
			mu.Lock()
			defer mu.Unlock()
			f.warnings = append(f.warnings, strings.Count(logs.String(), "cannot renew"))
			if redisURL != "" {
				for i, j := range joined {
					if !j && i > 0 {
						f.seconds[i].fallen++
					}
				}
				if fell >= 0 {
					f.fellAfter = append(f.fellAfter, fell)
				}
				if rejoined >= 0 {
					f.rejoined = append(f.rejoined, rejoined)
				}
			}
		})
	}
	wg.Wait()
	return f, errors.Join(errs...)
}

// clientChild is a client process: -clients clients calling the backend at
// -addr from -t0 for -duration through a Retrier with the default budget,
// per process or, with -redis, the fleet's. It prints "j MS 0|1" every 50
// ms (holding a lease or not), then "s SECOND STARTED OK FAILED ATTEMPTS
// THROTTLED" for each second.
func clientChild(args []string) error {
	fs := flag.NewFlagSet("fleetsim client", flag.ContinueOnError)
	addr := fs.String("addr", "", "")
	redisURL := fs.String("redis", "", "")
	clients := fs.Int("clients", 20, "")
	seed := fs.Uint64("seed", 1, "")
	t0ns := fs.Int64("t0", 0, "")
	duration := fs.Duration("duration", time.Minute, "")
	leasePeriod := fs.Duration("lease", time.Second, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	t0 := time.Unix(0, *t0ns)
	end := t0.Add(*duration)
	n := int(*duration / time.Second)
	throttled := make([]atomic.Int64, n)
	st := sim.RecipeBudget()
	opts := []interceptor.Option{interceptor.WithSafety(sim.Method, interceptor.Idempotent), interceptor.WithThrottle(*st.Throttle), interceptor.WithOnRetry(func(r interceptor.Retry) {
		if i := int(time.Since(t0) / time.Second); r.Throttled && i >= 0 && i < n {
			throttled[i].Add(1)
		}
	})}
	if *redisURL != "" {
		fleet, err := fleetbudget.New(fleetbudget.Options{URL: *redisURL, LeasePeriod: *leasePeriod, FleetSize: 50})
		if err != nil {
			return err
		}
		defer fleet.Close()
		opts = append(opts, fleet.Option())
	}
	p := st.Policy
	p.AttemptTimeout = 2 * time.Second
	r, err := interceptor.New(p, opts...)
	if err != nil {
		return err
	}
	rec := sim.NewRecorder(t0, time.Second, n)
	cc, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(r.Unary(), rec.CountAttempts()), grpc.WithDisableRetry())
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	out := bufio.NewWriter(os.Stdout)
	var wg sync.WaitGroup
	pop := sim.Population{Clients: *clients, Interval: 10 * time.Second, Timeout: 2 * time.Second, Seed: *seed}
	sleepCtx(ctx, time.Until(t0))
	for i := range *clients {
		wg.Go(func() { sim.Client(ctx, cc, rec, pop, 1, *seed*1000+uint64(i), end) })
	}
	tick := time.NewTicker(50 * time.Millisecond)
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case now := <-tick.C:
			if *redisURL == "" {
				continue
			}
			joined := "0"
			for _, s := range r.States() {
				if s.Shared != nil && s.Shared.Joined {
					joined = "1"
				}
			}
			fmt.Fprintf(out, "j %d %s\n", now.Sub(t0).Milliseconds(), joined)
			out.Flush()
		}
	}
	tick.Stop()
	wg.Wait()
	for i := range n {
		s := rec.Sample(i, 0, 0, 0)
		fmt.Fprintf(out, "s %d %d %d %d %d %d\n", i, s.Started, s.OK, s.Failed, s.Attempts, throttled[i].Load())
	}
	return out.Flush()
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitListening waits, at most 5 s, until addr accepts connections.
func waitListening(ctx context.Context, addr string) error {
	for i := 0; i < 100; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			return c.Close()
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			break
		}
	}
	return fmt.Errorf("%s does not accept connections", addr)
}

// writeRealBudgetChart draws the retries per second of both fleets, and the
// processes of the fleet budget on their share, with the pause and Redis's
// outage marked.
func writeRealBudgetChart(path string, c budgetsReal, fleets [2]*realFleet) error {
	colors := []drawing.Color{{R: 214, G: 39, B: 40, A: 255}, {R: 44, G: 160, B: 44, A: 255}}
	grey := drawing.Color{R: 120, G: 120, B: 120, A: 255}
	var series []chart.Series
	top := 10.0
	for i, f := range fleets {
		var x, y []float64
		for s, v := range f.seconds {
			x, y = append(x, float64(s+1)), append(y, float64(v.attempts-v.started))
			top = max(top, float64(v.attempts-v.started))
		}
		series = append(series, chart.ContinuousSeries{Name: []string{"per process", "fleet (Redis)"}[i], XValues: x, YValues: y,
			Style: chart.Style{StrokeColor: colors[i], StrokeWidth: 2}})
	}
	var x, y []float64
	scale := top / float64(c.processes)
	for s, v := range fleets[1].seconds {
		x, y = append(x, float64(s+1)), append(y, float64(v.fallen)*scale)
	}
	series = append(series, chart.ContinuousSeries{Name: fmt.Sprintf("fleet: processes on their share (top: all %d)", c.processes),
		XValues: x, YValues: y, Style: chart.Style{StrokeColor: colors[1], StrokeWidth: 1, StrokeDashArray: []float64{4, 3}}})
	band := func(name string, from, to time.Duration) {
		st := chart.Style{StrokeColor: grey, StrokeWidth: 1, StrokeDashArray: []float64{2, 4}}
		series = append(series,
			chart.ContinuousSeries{Name: name, XValues: []float64{from.Seconds(), from.Seconds()}, YValues: []float64{0, top}, Style: st},
			chart.ContinuousSeries{XValues: []float64{to.Seconds(), to.Seconds()}, YValues: []float64{0, top}, Style: st})
	}
	band(fmt.Sprintf("paused %v-%v", c.pauseAt, c.pauseAt+c.pause), c.pauseAt, c.pauseAt+c.pause)
	band(fmt.Sprintf("Redis down %v-%v", c.killAt, c.killAt+c.down), c.killAt, c.killAt+c.down)
	end := c.duration.Seconds()
	var ticks []chart.Tick
	for v := 0.0; v <= end; v += 5 {
		ticks = append(ticks, chart.Tick{Value: v, Label: fmt.Sprintf("%.0f", v)})
	}
	ch := chart.Chart{
		Title: fmt.Sprintf("Retries per second: two fleets of %d client processes × %d clients, each against a backend process paused by SIGSTOP",
			c.processes, c.clients),
		TitleStyle: chart.Style{FontSize: 11, Padding: chart.Box{Top: 6}},
		Width:      simchart.Width, Height: 520,
		Background: chart.Style{Padding: chart.Box{Top: 90, Left: 20, Right: 30, Bottom: 10}},
		XAxis:      chart.XAxis{Name: "seconds", Range: &chart.ContinuousRange{Min: 0, Max: end}, Ticks: ticks},
		YAxis: chart.YAxis{Range: &chart.ContinuousRange{Min: 0, Max: math.Ceil(top*1.05/10) * 10},
			ValueFormatter: func(v any) string { return fmt.Sprintf("%.0f", v.(float64)) }},
		Series: series,
	}
	ch.Elements = []chart.Renderable{chart.LegendThin(&ch, chart.Style{FontSize: 9})}
	fh, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := ch.Render(chart.PNG, fh); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}
