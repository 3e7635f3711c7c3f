package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/platformkit/grpcbackoff/interceptor"
)

// Population is the clients of the experiment. Each client is a loop: think
// for an exponentially distributed time, then make one call, retried as the
// Strategy says until it succeeds or the Strategy gives up, then think again.
// A client waiting for its call starts no other (a closed loop, as in the
// original), so the offered load is about Clients/Interval calls per second.
type Population struct {
	// Clients is the number of clients. Default 1000.
	Clients int
	// Interval is the mean think time between calls of one client.
	// Default 10 s.
	Interval time.Duration
	// Timeout is the time after which an attempt is abandoned and retried:
	// every strategy's Policy.AttemptTimeout. The call itself has no
	// deadline. Default 2 s.
	Timeout time.Duration
	// Seed seeds the think times. (Jitter and goroutine scheduling are not
	// seeded, so two runs with one seed agree only in the large.)
	Seed uint64
}

// DefaultPopulation returns the clients of the original experiment.
func DefaultPopulation() Population {
	return Population{Clients: 1000, Interval: 10 * time.Second, Timeout: 2 * time.Second, Seed: 1}
}

// Offered returns the calls per second the population makes when every call
// succeeds at once.
func (p Population) Offered() float64 { return float64(p.Clients) / p.Interval.Seconds() }

// Storm is one experiment of RunStorm, the real-time engine: a server, its
// clients and the outage.
type Storm struct {
	Model      Model
	Population Population
	// PauseAt is when the server is paused. Default 10 s.
	PauseAt time.Duration
	// Pause is how long the server stays paused. Default 10 s.
	Pause time.Duration
	// Duration is the length of the run, rounded down to whole seconds.
	// Default 60 s.
	Duration time.Duration
	// Scale is the real duration of one second of model time, in seconds:
	// 0.1 runs ten times faster than real time. Every model duration is
	// scaled: latencies, think times, timeouts, the pause and the
	// strategies' delays and throttle. Default 1.
	Scale float64
}

// DefaultStorm returns the experiment of the document: the default
// Model and Population, an outage from 10 s to 20 s, 60 s in all, in real
// time.
func DefaultStorm() Storm {
	return Storm{Model: DefaultModel(), Population: DefaultPopulation(),
		PauseAt: 10 * time.Second, Pause: 10 * time.Second, Duration: 60 * time.Second, Scale: 1}
}

// Validate reports every field of sc that makes it unusable.
func (sc Storm) Validate() error {
	errs := []error{sc.Model.Validate()}
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("sim: "+format, args...)) }
	p := sc.Population
	if p.Clients < 1 {
		bad("clients (%d) must be at least 1", p.Clients)
	}
	if p.Interval <= 0 {
		bad("interval (%v) must be positive", p.Interval)
	}
	if p.Timeout <= 0 {
		bad("timeout (%v) must be positive", p.Timeout)
	}
	errs = append(errs, checkRun(sc.Duration, sc.PauseAt, sc.Pause)...)
	if !(sc.Scale > 0) || math.IsInf(sc.Scale, 0) {
		bad("scale (%v) must be a finite positive number", sc.Scale)
	}
	return errors.Join(errs...)
}

// seconds returns the number of whole model seconds in the run.
func (sc Storm) seconds() int { return int(sc.Duration / time.Second) }

// RunStorm runs Strategy st in sc, in real time (scaled by sc.Scale) over
// gRPC, and returns what happened. live, if
// not nil, is called with each Sample shortly after its second ends (its
// event counts may still miss events that were under way at the boundary;
// the Result's Samples are complete). RunStorm stops early, with ctx's error,
// if ctx is done.
//
// Every attempt goes through the interceptor's Retrier for st, whose Policy
// gets the Population's Timeout as its AttemptTimeout, so that the Retrier
// cuts a slow attempt and retries it; the call has no deadline of its own.
// An interceptor chained after the Retrier counts the attempts.
func RunStorm(ctx context.Context, sc Storm, st Strategy, live func(Sample)) (Result, error) {
	if err := sc.Validate(); err != nil {
		return Result{}, err
	}
	toReal := func(d time.Duration) time.Duration { return scaled(d, sc.Scale) }
	n := sc.seconds()
	rec := NewRecorder(time.Time{}, toReal(time.Second), n)

	st.Policy.AttemptTimeout = sc.Population.Timeout
	retrier, err := st.Retrier(sc.Scale, func(r interceptor.Retry) {
		if r.Throttled {
			rec.count(func(b *bucket) *atomic.Int64 { return &b.throttled })
		}
	})
	if err != nil {
		return Result{}, err
	}

	srv := newServer(sc.Model, sc.Scale)
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	gs.RegisterService(&serviceDesc, srv)
	go gs.Serve(lis)
	cc, err := grpc.NewClient("passthrough:///stormsim",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(retrier.Unary(), rec.CountAttempts()),
	)
	if err != nil {
		srv.Close()
		gs.Stop()
		return Result{}, err
	}
	defer func() {
		srv.Close()
		cc.Close()
		gs.Stop()
	}()
	cc.Connect()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	rec.t0 = time.Now()
	end := rec.t0.Add(toReal(time.Duration(n) * time.Second))

	// The outage, and the end of the run, which cancels the calls under way.
	var wg sync.WaitGroup
	wg.Go(func() {
		defer cancel()
		if !sleepUntil(ctx, rec.t0.Add(toReal(sc.PauseAt))) {
			return
		}
		srv.Pause()
		if !sleepUntil(ctx, rec.t0.Add(toReal(sc.PauseAt+sc.Pause))) {
			return
		}
		srv.Resume()
		sleepUntil(ctx, end)
	})

	// The per-second sampler.
	conc := make([]int, n)
	peaks := make([]int, n)
	wg.Go(func() {
		waiting := 0
		for i := range n {
			if !sleepUntil(ctx, rec.t0.Add(time.Duration(i+1)*rec.second)) {
				return
			}
			conc[i], peaks[i] = srv.sample()
			s := rec.Sample(i, conc[i], peaks[i], 0)
			waiting += s.Started - s.OK - s.Failed
			s.Waiting = waiting
			if live != nil {
				live(s)
			}
		}
	})

	// The clients.
	latencies := make([][]time.Duration, sc.Population.Clients)
	var clients sync.WaitGroup
	for i := range sc.Population.Clients {
		clients.Go(func() {
			latencies[i] = Client(runCtx, cc, rec, sc.Population, sc.Scale, uint64(i), end)
		})
	}
	clients.Wait()
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	return summarize(sc, st, rec, conc, peaks, slices.Concat(latencies...)), nil
}

// summarize turns the counts of a finished run into its Result.
func summarize(sc Storm, st Strategy, rec *Recorder, conc, peaks []int, lat []time.Duration) Result {
	res := Result{Strategy: st.Name}
	waiting := 0
	for i := range rec.buckets {
		s := rec.Sample(i, conc[i], peaks[i], 0)
		waiting += s.Started - s.OK - s.Failed
		s.Waiting = waiting
		res.Samples = append(res.Samples, s)
	}
	res.summarize(sc.PauseAt, sc.PauseAt+sc.Pause, sc.Model.Limit, sc.Population.Offered())
	slices.Sort(lat)
	res.P50, res.P99 = percentile(lat, 0.50), percentile(lat, 0.99)
	return res
}

// checkRun reports what is wrong with a run of duration whose pause of pause
// starts at pauseAt.
func checkRun(duration, pauseAt, pause time.Duration) []error {
	var errs []error
	if duration < time.Second {
		errs = append(errs, fmt.Errorf("sim: duration (%v) must be at least 1s", duration))
	}
	if pauseAt < 0 || pause < 0 || pauseAt+pause > duration {
		errs = append(errs, fmt.Errorf("sim: the pause (%v from %v) must lie within the run (%v)", pause, pauseAt, duration))
	}
	return errs
}
