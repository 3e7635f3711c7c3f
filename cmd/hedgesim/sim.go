// Package hedgesim measures what hedging does to the latency tail, with
// this module's real unary interceptor and a fake server whose latency
// follows a model, in the virtual time of a testing/synctest bubble: a
// hundred thousand calls of 10 ms take a few seconds of real time and the
// figures are exact.
//
// Run it with
//
//	go test -v -run TestTail ./cmd/hedgesim [-hedgesim.chart tail.png]
//
// It prints, for each latency model and each strategy (no hedging, fixed
// delays, the adaptive delay), the p50, p99 and p99.9 latency of the calls
// and the extra attempts sent per call, and checks the goal of README.md on
// the first model. See README.md for the models and the results.
package hedgesim

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
)

// Model is a server's latency distribution: each attempt draws its own.
type Model struct {
	Name   string
	Sample func(r *rand.Rand) time.Duration
}

// Bimodal returns the model of The Tail at Scale's example: uniform in
// [9 ms, 11 ms], except a share slow (0.01) of requests that take 1 s.
func Bimodal(slow float64) Model {
	return Model{
		Name: fmt.Sprintf("uniform 9-11ms, %.3g%% at 1s", slow*100),
		Sample: func(r *rand.Rand) time.Duration {
			if r.Float64() < slow {
				return time.Second
			}
			return 9*time.Millisecond + time.Duration(r.Int64N(int64(2*time.Millisecond)+1))
		},
	}
}

// LogNormal returns a model whose latency is log-normal with the given
// median and sigma (of the logarithm).
func LogNormal(median time.Duration, sigma float64) Model {
	return Model{
		Name: fmt.Sprintf("log-normal, median %v, sigma %.2g", median, sigma),
		Sample: func(r *rand.Rand) time.Duration {
			return time.Duration(float64(median) * math.Exp(sigma*r.NormFloat64()))
		},
	}
}

// Strategy is a way to call: Hedging nil means no hedging (the default
// Policy, which never retries here since every call succeeds).
type Strategy struct {
	Name    string
	Hedging *grpcbackoff.Hedging
	// NoBudget turns the retry budget off (interceptor.WithoutThrottle);
	// otherwise hedges are paid for by grpcbackoff.DefaultThrottle.
	NoBudget bool
}

// Strategies returns no hedging, fixed delays of 10, 15 and 20 ms, and the
// adaptive delay at p95 and p99, each with at most 2 attempts and the
// default retry budget, and the 10 ms delay without a budget.
func Strategies() []Strategy {
	fixed := func(d time.Duration) Strategy {
		return Strategy{Name: fmt.Sprintf("hedge after %v", d), Hedging: &grpcbackoff.Hedging{MaxAttempts: 2, Delay: d}}
	}
	adaptive := func(q float64) Strategy {
		return Strategy{Name: fmt.Sprintf("adaptive p%g [1ms, 1s]", 100*q), Hedging: &grpcbackoff.Hedging{
			MaxAttempts: 2, Delay: 20 * time.Millisecond,
			Quantile: q, MinDelay: time.Millisecond, MaxDelay: time.Second, Window: 10 * time.Second,
		}}
	}
	noBudget := fixed(10 * time.Millisecond)
	noBudget.Name += ", no budget"
	noBudget.NoBudget = true
	return []Strategy{
		{Name: "no hedging"},
		fixed(10 * time.Millisecond),
		fixed(15 * time.Millisecond),
		fixed(20 * time.Millisecond),
		adaptive(0.95),
		adaptive(0.99),
		noBudget,
	}
}

// Result is what one strategy gave on one model.
type Result struct {
	Model, Strategy string
	Calls           int
	Latencies       []time.Duration // of every call, sorted
	Attempts        int64           // attempts sent in all
}

// Quantile returns the latency that a share q of the calls did not
// exceed (nearest rank).
func (r Result) Quantile(q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(r.Latencies)))) - 1
	return r.Latencies[min(max(i, 0), len(r.Latencies)-1)]
}

// Extra returns the extra attempts sent per call.
func (r Result) Extra() float64 {
	return float64(r.Attempts-int64(r.Calls)) / float64(r.Calls)
}

const method = "/hedgesim.Server/Get"

// Run makes calls calls of method through the interceptor of s, from workers goroutines that each call in a loop,
// against a server following m, and returns the result. It must run inside
// a synctest bubble: it sleeps for the model's latencies.
func Run(m Model, s Strategy, calls, workers int, seed uint64) (Result, error) {
	var opts []interceptor.Option
	if s.Hedging != nil {
		opts = append(opts, interceptor.WithHedging(method, *s.Hedging))
	}
	if s.NoBudget {
		opts = append(opts, interceptor.WithoutThrottle())
	}
	r, err := interceptor.New(grpcbackoff.DefaultPolicy(), opts...)
	if err != nil {
		return Result{}, err
	}
	ic := r.Unary()
	srv := &server{model: m, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	lat := make([]time.Duration, calls)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < calls; i += workers {
				var reply string
				start := time.Now()
				if err := ic(context.Background(), method, "req", &reply, nil, srv.invoke); err != nil {
					errs[w] = err
					return
				}
				lat[i] = time.Since(start)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return Result{}, err
		}
	}
	slices.Sort(lat)
	return Result{Model: m.Name, Strategy: s.Name, Calls: calls, Latencies: lat, Attempts: srv.attempts.Load()}, nil
}

// server is the fake invoker: each attempt sleeps a latency drawn from the
// model, and ends early, as gRPC does, when its context is canceled.
type server struct {
	model    Model
	attempts atomic.Int64
	mu       sync.Mutex
	rng      *rand.Rand
}

func (s *server) invoke(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
	s.attempts.Add(1)
	s.mu.Lock()
	d := s.model.Sample(s.rng)
	s.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// WriteTable writes results as a Markdown table, with each strategy's
// p99.9 as a share of the first result's (no hedging).
func WriteTable(w io.Writer, results []Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintln(tw, "| strategy\t| p50\t| p99\t| p99.9\t| p99.9 gain\t| extra attempts per call\t|")
	fmt.Fprintln(tw, "|---\t|---\t|---\t|---\t|---\t|---\t|")
	base := results[0].Quantile(0.999)
	for _, r := range results {
		fmt.Fprintf(tw, "| %s\t| %s\t| %s\t| %s\t| %.1fx\t| %.2f%%\t|\n", r.Strategy,
			ms(r.Quantile(0.5)), ms(r.Quantile(0.99)), ms(r.Quantile(0.999)),
			float64(base)/float64(r.Quantile(0.999)), 100*r.Extra())
	}
	tw.Flush()
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}
