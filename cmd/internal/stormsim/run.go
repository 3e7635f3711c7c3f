package stormsim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/emptypb"

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

// Scenario is one experiment: a server, its clients and the outage.
type Scenario struct {
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

// DefaultScenario returns the experiment of the document: the default
// Model and Population, an outage from 10 s to 20 s, 60 s in all, in real
// time.
func DefaultScenario() Scenario {
	return Scenario{Model: DefaultModel(), Population: DefaultPopulation(),
		PauseAt: 10 * time.Second, Pause: 10 * time.Second, Duration: 60 * time.Second, Scale: 1}
}

// Validate reports every field of sc that makes it unusable.
func (sc Scenario) Validate() error {
	errs := []error{sc.Model.Validate()}
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("stormsim: "+format, args...)) }
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
	if sc.Duration < time.Second {
		bad("duration (%v) must be at least 1s", sc.Duration)
	}
	if sc.PauseAt < 0 || sc.Pause < 0 || sc.PauseAt+sc.Pause > sc.Duration {
		bad("the pause (%v from %v) must lie within the run (%v)", sc.Pause, sc.PauseAt, sc.Duration)
	}
	if !(sc.Scale > 0) || math.IsInf(sc.Scale, 0) {
		bad("scale (%v) must be a finite positive number", sc.Scale)
	}
	return errors.Join(errs...)
}

// seconds returns the number of whole model seconds in the run.
func (sc Scenario) seconds() int { return int(sc.Duration / time.Second) }

// Sample is what happened in one second of model time, [Second, Second+1).
type Sample struct {
	Second int
	// Started is the number of calls started (first attempts).
	Started int
	// OK is the number of calls that succeeded: the goodput.
	OK int
	// Failed is the number of calls that ended in an error (the strategy
	// gave up or the throttle refused a retry).
	Failed int
	// Throttled is the number of retries the throttle refused.
	Throttled int
	// Attempts is the number of attempts sent, first ones included.
	Attempts int
	// TimedOut is the number of attempts abandoned at the timeout.
	TimedOut int
	// Concurrency is the number of requests in the server at the end of the
	// second, the paused server's backlog included.
	Concurrency int
	// Peak is the most requests in the server during the second.
	Peak int
	// Waiting is the number of calls started and not finished at the end of
	// the second: clients stuck in a call rather than thinking.
	Waiting int
}

// Result is what one Strategy did in one Scenario.
type Result struct {
	Strategy string
	Samples  []Sample
	// Recovered says whether the server recovered after the pause, and
	// RecoveredAfter how long after the resume: from then to the end of the
	// run, every second ended with at most Model.Limit requests in the
	// server and at most Model.Limit calls Waiting (so every other client
	// is back to its think time, and the goodput is the offered load).
	Recovered      bool
	RecoveredAfter time.Duration
	// PeakConcurrency is the most requests in the server at any time.
	PeakConcurrency int
	// Amplification is attempts sent per call started, during the outage
	// (the pause) and after it; NaN when no call started.
	AmplificationOutage, AmplificationAfter float64
	// OK, Failed, Started, Attempts and Throttled are totals over the run.
	OK, Failed, Started, Attempts, Throttled int
	// WaitingAtEnd is the number of calls still waiting at the end of the
	// run (they count in none of the latencies).
	WaitingAtEnd int
	// GoodputAfter is the mean goodput, in calls per second, over the last
	// third of the run.
	GoodputAfter float64
	// P50 and P99 are the latencies of the successful calls, retries
	// included, in model time.
	P50, P99 time.Duration
}

// bucket counts the events of one model second.
type bucket struct {
	started, ok, failed, throttled, attempts, timedOut atomic.Int64
}

// recorder counts events by the model second in which they happen.
type recorder struct {
	t0      time.Time
	second  time.Duration // real length of a model second
	buckets []bucket
}

// at returns the bucket for time now, or nil after the end of the run.
func (r *recorder) at(now time.Time) *bucket {
	i := int(now.Sub(r.t0) / r.second)
	if i < 0 || i >= len(r.buckets) {
		return nil
	}
	return &r.buckets[i]
}

func (r *recorder) count(field func(*bucket) *atomic.Int64) {
	if b := r.at(time.Now()); b != nil {
		field(b).Add(1)
	}
}

// Run runs Strategy st in Scenario sc and returns what happened. live, if
// not nil, is called with each Sample shortly after its second ends (its
// event counts may still miss events that were under way at the boundary;
// the Result's Samples are complete). Run stops early, with ctx's error,
// if ctx is done.
//
// Every attempt goes through the interceptor's Retrier for st, whose Policy
// gets the Population's Timeout as its AttemptTimeout, so that the Retrier
// cuts a slow attempt and retries it; the call has no deadline of its own.
// An interceptor chained after the Retrier counts the attempts.
func Run(ctx context.Context, sc Scenario, st Strategy, live func(Sample)) (Result, error) {
	if err := sc.Validate(); err != nil {
		return Result{}, err
	}
	toReal := func(d time.Duration) time.Duration { return scaled(d, sc.Scale) }
	n := sc.seconds()
	rec := &recorder{second: toReal(time.Second), buckets: make([]bucket, n)}

	st.Policy.AttemptTimeout = sc.Population.Timeout
	retrier, err := st.retrier(sc.Scale, func(r interceptor.Retry) {
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
		grpc.WithChainUnaryInterceptor(retrier.Unary(), countAttempts(rec)),
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
			s := rec.sample(i, conc[i], peaks[i], 0)
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
			latencies[i] = client(runCtx, cc, rec, sc, uint64(i), end)
		})
	}
	clients.Wait()
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	return summarize(sc, st, rec, conc, peaks, slices.Concat(latencies...)), nil
}

// countAttempts returns the interceptor that runs after the Retrier: it
// counts each attempt, and those its AttemptTimeout cut (the attempt's
// context, which carries that timeout, ended by its deadline; the calls
// themselves have none).
func countAttempts(rec *recorder) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		rec.count(func(b *bucket) *atomic.Int64 { return &b.attempts })
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err != nil && ctx.Err() == context.DeadlineExceeded {
			rec.count(func(b *bucket) *atomic.Int64 { return &b.timedOut })
		}
		return err
	}
}

// client is one client's loop until end; it returns the latencies of its
// successful calls, in model time.
func client(ctx context.Context, cc *grpc.ClientConn, rec *recorder, sc Scenario, id uint64, end time.Time) []time.Duration {
	rng := rand.New(rand.NewPCG(sc.Population.Seed, id))
	mean := float64(scaled(sc.Population.Interval, sc.Scale))
	var lat []time.Duration
	var in, out emptypb.Empty
	for {
		think := time.Duration(rng.ExpFloat64() * mean)
		if time.Now().Add(think).After(end) || !sleepUntil(ctx, time.Now().Add(think)) {
			return lat
		}
		start := time.Now()
		b := rec.at(start)
		if b == nil {
			return lat
		}
		b.started.Add(1)
		err := cc.Invoke(ctx, method, &in, &out)
		now := time.Now()
		if ctx.Err() != nil {
			return lat // the run is over; the call does not count
		}
		if b := rec.at(now); b != nil {
			if err == nil {
				b.ok.Add(1)
				lat = append(lat, time.Duration(float64(now.Sub(start))/sc.Scale))
			} else {
				b.failed.Add(1)
			}
		}
	}
}

// sleepUntil waits until t, and reports false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// sample returns the Sample of second i; waiting is the calls still
// outstanding at its end.
func (r *recorder) sample(i, concurrency, peak, waiting int) Sample {
	b := &r.buckets[i]
	return Sample{
		Second: i, Started: int(b.started.Load()), OK: int(b.ok.Load()), Failed: int(b.failed.Load()),
		Throttled: int(b.throttled.Load()), Attempts: int(b.attempts.Load()), TimedOut: int(b.timedOut.Load()),
		Concurrency: concurrency, Peak: peak, Waiting: waiting,
	}
}

// summarize turns the counts of a finished run into its Result.
func summarize(sc Scenario, st Strategy, rec *recorder, conc, peaks []int, lat []time.Duration) Result {
	res := Result{Strategy: st.Name}
	waiting := 0
	for i := range rec.buckets {
		s := rec.sample(i, conc[i], peaks[i], 0)
		waiting += s.Started - s.OK - s.Failed
		s.Waiting = waiting
		res.Samples = append(res.Samples, s)
		res.OK += s.OK
		res.Failed += s.Failed
		res.Started += s.Started
		res.Attempts += s.Attempts
		res.Throttled += s.Throttled
		res.PeakConcurrency = max(res.PeakConcurrency, s.Peak)
	}

	res.WaitingAtEnd = res.Samples[len(res.Samples)-1].Waiting

	n := len(res.Samples)
	pauseAt := min(int(sc.PauseAt/time.Second), n)
	resume := min(int(math.Ceil((sc.PauseAt + sc.Pause).Seconds())), n)
	res.AmplificationOutage = amplification(res.Samples[pauseAt:resume])
	res.AmplificationAfter = amplification(res.Samples[resume:])

	// Recovery: the first second after the resume from which every second
	// is healthy.
	limit := sc.Model.Limit
	first := -1
	for i := len(res.Samples) - 1; i >= resume; i-- {
		s := res.Samples[i]
		if s.Concurrency > limit || s.Waiting > limit {
			break
		}
		first = i
	}
	if first >= 0 {
		res.Recovered = true
		res.RecoveredAfter = time.Duration(first-resume) * time.Second
	}

	last := res.Samples[len(res.Samples)-len(res.Samples)/3:]
	ok := 0
	for _, s := range last {
		ok += s.OK
	}
	if len(last) > 0 {
		res.GoodputAfter = float64(ok) / float64(len(last))
	}

	slices.Sort(lat)
	res.P50, res.P99 = percentile(lat, 0.50), percentile(lat, 0.99)
	return res
}

// amplification is attempts per call started over the samples.
func amplification(samples []Sample) float64 {
	var attempts, started int
	for _, s := range samples {
		attempts += s.Attempts
		started += s.Started
	}
	if started == 0 {
		return math.NaN()
	}
	return float64(attempts) / float64(started)
}

// percentile returns the q-quantile of sorted (nearest rank), or 0.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}
