package bench

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/googleapis/gax-go/v2"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/opentelemetry"
)

// The mechanisms, as the mech= key of every benchmark names them. Each one is
// a client connection to the one fake server, set up as its users set it up.
const (
	bare       = "bare"          // no retry layer: grpc.NewClient's defaults; the limit
	ours       = "ours"          // interceptor.DialOptions(grpcbackoff.DefaultPolicy()): throttle on
	oursHook   = "ours+hook"     // ours with WithOnRetry
	oursNoop   = "ours+noop"     // ours with an opentelemetry.Recorder on noop.NewMeterProvider()
	oursSDK    = "ours+sdk"      // ours with the OpenTelemetry SDK and a manual reader
	oursAll    = "ours+all"      // ours with the hook and the SDK
	oursNoPB   = "ours-pushback" // ours with WithoutPushback: no grpc.Trailer option
	oursHedge  = "ours+hedge"    // ours with UnaryCall hedged: WithHedging(hedgedMethod, hedging)
	grpcRetry  = "grpcretry"     // grpc-go's built-in retry, from a service config, with its throttle
	middleware = "middleware"    // go-grpc-middleware/v2/interceptors/retry
	gaxInvoke  = "gax"           // gax.Invoke with gax.OnCodes around each call, as Google's clients do
)

// unaryNames are the mechanisms of the unary benchmarks; streamNames those of
// the stream benchmarks (the variants of ours that only matter on a retry
// are left out there).
var (
	unaryNames  = []string{bare, ours, oursHook, oursNoop, oursSDK, oursAll, oursNoPB, grpcRetry, middleware, gaxInvoke}
	streamNames = []string{bare, ours, oursAll, grpcRetry, middleware, gaxInvoke}
)

// A setting is how long the mechanisms wait before a retry.
type setting int

const (
	// defaults: each mechanism as documented for production, with the
	// Memorystore recipe (1 s, ×2, up to 32 s) where it can be expressed.
	// Only the success path is measured with it.
	defaults setting = iota
	// fast: every backoff 1 ns, so that a retry measures the retry and
	// not the sleep. Throttles let every call retry once (ours: Ratio 1;
	// grpc: tokenRatio 1), so that they stay on without refusing.
	fast
	// slow: every backoff an hour and no throttle refusing, so that calls
	// wait in backoff while their memory is measured.
	slow
)

// A mech is one mechanism, connected to srv.
type mech struct {
	name   string
	cc     *grpc.ClientConn
	client testgrpc.TestServiceClient
	// gax, when not nil, are the options of the gax.Invoke that wraps
	// every call and every stream open.
	gax []gax.CallOption
	// retries counts retries as the mechanism's hook sees them, where it
	// has one.
	retries *atomic.Int64
}

// newMechs connects one client per name to srv, set up as s says. The
// connections are closed when tb ends.
func newMechs(tb testing.TB, s setting, names ...string) []*mech {
	tb.Helper()
	ms := make([]*mech, len(names))
	for i, name := range names {
		m := &mech{name: name, retries: new(atomic.Int64)}
		m.cc = srv.dial(dialOptions(name, s, m.retries)...)
		m.client = testgrpc.NewTestServiceClient(m.cc)
		if name == gaxInvoke {
			m.gax = []gax.CallOption{gaxRetry(s, m.retries)}
		}
		tb.Cleanup(func() { m.cc.Close() })
		ms[i] = m
	}
	return ms
}

// codesRetried are the codes every mechanism retries: DefaultPolicy's.
var codesRetried = []codes.Code{codes.Unavailable, codes.ResourceExhausted}

// dialOptions returns the dial options of mechanism name.
func dialOptions(name string, s setting, retries *atomic.Int64) []grpc.DialOption {
	switch name {
	case bare, gaxInvoke:
		return nil
	case ours, oursHook, oursNoop, oursSDK, oursAll, oursNoPB, oursHedge:
		return oursDialOptions(name, s, retries)
	case grpcRetry:
		return []grpc.DialOption{grpc.WithDefaultServiceConfig(serviceConfig(s))}
	case middleware:
		opts := middlewareOptions(s, retries)
		return []grpc.DialOption{
			grpc.WithChainUnaryInterceptor(retry.UnaryClientInterceptor(opts...)),
			grpc.WithChainStreamInterceptor(retry.StreamClientInterceptor(opts...)),
		}
	}
	panic("bench: unknown mechanism " + name)
}

// oursDialOptions are interceptor.DialOptions with the options that the
// variant name adds.
func oursDialOptions(name string, s setting, retries *atomic.Int64) []grpc.DialOption {
	return interceptor.DialOptions(oursPolicy(s), oursOptions(name, s, retries)...)
}

func oursPolicy(s setting) grpcbackoff.Policy {
	p := grpcbackoff.DefaultPolicy()
	switch s {
	case fast:
		p.Initial, p.Max, p.Jitter = time.Nanosecond, time.Nanosecond, 0
	case slow:
		p.Initial, p.Max, p.Jitter = time.Hour, 2*time.Hour, 0
	}
	return p
}

func oursOptions(name string, s setting, retries *atomic.Int64) []interceptor.Option {
	// The test service's calls change nothing, but say so nowhere: stated,
	// or a failure the server sent would not be retried (interceptor.Safety).
	opts := []interceptor.Option{interceptor.WithSafety("/grpc.testing.TestService/", interceptor.Idempotent)}
	switch s {
	case fast:
		opts = append(opts, interceptor.WithThrottle(grpcbackoff.Throttle{Ratio: 1, PerSecond: 0.5, Burst: 10}))
	case slow:
		opts = append(opts, interceptor.WithoutThrottle())
	}
	hook := interceptor.WithOnRetry(func(interceptor.Retry) { retries.Add(1) })
	switch name {
	case oursHook:
		opts = append(opts, hook)
	case oursNoop:
		opts = append(opts, recorder(noop.NewMeterProvider()))
	case oursSDK:
		opts = append(opts, recorder(sdkProvider()))
	case oursAll:
		opts = append(opts, hook, recorder(sdkProvider()))
	case oursNoPB:
		opts = append(opts, interceptor.WithoutPushback())
	case oursHedge:
		opts = append(opts, interceptor.WithHedging(hedgedMethod, hedging))
	case ours:
		if s == slow { // the memory benchmark needs to know who waits
			opts = append(opts, hook)
		}
	}
	return opts
}

// recorder is the option of an opentelemetry.Recorder on mp.
func recorder(mp metric.MeterProvider) interceptor.Option {
	rec, err := opentelemetry.New(opentelemetry.Options{MeterProvider: mp})
	if err != nil {
		panic(err)
	}
	return rec.Option()
}

// sdkProvider is the OpenTelemetry SDK as an application sets it up, with a
// manual reader that nobody reads: the cost of recording, not of exporting.
func sdkProvider() *sdkmetric.MeterProvider {
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
}

// serviceConfig is grpc-go's built-in retry for every method of the test
// service, with its retry throttle. grpc caps maxAttempts at 5, and a
// throttle at 1000 tokens, which the memory benchmark's crowd would empty:
// it has none.
func serviceConfig(s setting) string {
	initial, max, throttle := "1s", "32s", `{"maxTokens": 10, "tokenRatio": 0.1}`
	switch s {
	case fast:
		initial, max, throttle = "0.000000001s", "0.000000001s", `{"maxTokens": 10, "tokenRatio": 1}`
	case slow:
		initial, max, throttle = "3600s", "7200s", "null"
	}
	return fmt.Sprintf(`{
	"methodConfig": [{
		"name": [{"service": "grpc.testing.TestService"}],
		"retryPolicy": {
			"maxAttempts": 5,
			"initialBackoff": %q,
			"maxBackoff": %q,
			"backoffMultiplier": 2,
			"retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]
		}
	}],
	"retryThrottling": %s
}`, initial, max, throttle)
}

func middlewareOptions(s setting, retries *atomic.Int64) []retry.CallOption {
	backoff := retry.BackoffExponentialWithJitterBounded(time.Second, 0.5, 32*time.Second)
	switch s {
	case fast:
		backoff = retry.BackoffLinear(time.Nanosecond)
	case slow:
		backoff = func(context.Context, uint) time.Duration { retries.Add(1); return time.Hour }
	}
	return []retry.CallOption{
		retry.WithMax(8), // attempts, despite the name
		retry.WithCodes(codesRetried...),
		retry.WithBackoff(backoff),
	}
}

// gaxRetry is the retry option Google's generated clients pass to gax.Invoke.
func gaxRetry(s setting, retries *atomic.Int64) gax.CallOption {
	bo := gax.Backoff{Initial: time.Second, Max: 32 * time.Second, Multiplier: 2}
	switch s {
	case fast:
		bo = gax.Backoff{Initial: time.Nanosecond, Max: time.Nanosecond, Multiplier: 2}
	case slow:
		// gax draws each pause from [1 ns, Initial]: make a quick one
		// unlikely.
		bo = gax.Backoff{Initial: 1000 * time.Hour, Max: 2000 * time.Hour, Multiplier: 2}
	}
	return gax.WithRetry(func() gax.Retryer {
		return countingRetryer{gax.OnCodes(codesRetried, bo), retries}
	})
}

// countingRetryer counts the retries of a gax.Retryer.
type countingRetryer struct {
	gax.Retryer
	n *atomic.Int64
}

func (r countingRetryer) Retry(err error) (time.Duration, bool) {
	d, ok := r.Retryer.Retry(err)
	if ok {
		r.n.Add(1)
	}
	return d, ok
}

// unary makes one UnaryCall, as the mechanism's users do.
func (m *mech) unary(ctx context.Context, req *testgrpc.SimpleRequest) error {
	if m.gax == nil {
		_, err := m.client.UnaryCall(ctx, req)
		return err
	}
	return gax.Invoke(ctx, func(ctx context.Context, cs gax.CallSettings) error {
		_, err := m.client.UnaryCall(ctx, req, cs.GRPC...)
		return err
	}, m.gax...)
}

// unaryRetried makes one UnaryCall that the server fails once: the bare
// client, which has nobody to retry for it, calls twice.
func (m *mech) unaryRetried(ctx context.Context, req *testgrpc.SimpleRequest) error {
	err := m.unary(ctx, req)
	if m.name == bare && status.Code(err) == codes.Unavailable {
		err = m.unary(ctx, req)
	}
	return err
}

func (m *mech) serverStream(ctx context.Context, req *testgrpc.StreamingOutputCallRequest) (st grpc.ServerStreamingClient[testgrpc.StreamingOutputCallResponse], err error) {
	if m.gax == nil {
		return m.client.StreamingOutputCall(ctx, req)
	}
	err = gax.Invoke(ctx, func(ctx context.Context, cs gax.CallSettings) error {
		st, err = m.client.StreamingOutputCall(ctx, req, cs.GRPC...)
		return err
	}, m.gax...)
	return st, err
}

func (m *mech) clientStream(ctx context.Context) (st grpc.ClientStreamingClient[testgrpc.StreamingInputCallRequest, testgrpc.StreamingInputCallResponse], err error) {
	if m.gax == nil {
		return m.client.StreamingInputCall(ctx)
	}
	err = gax.Invoke(ctx, func(ctx context.Context, cs gax.CallSettings) error {
		st, err = m.client.StreamingInputCall(ctx, cs.GRPC...)
		return err
	}, m.gax...)
	return st, err
}

func (m *mech) bidiStream(ctx context.Context) (st grpc.BidiStreamingClient[testgrpc.StreamingOutputCallRequest, testgrpc.StreamingOutputCallResponse], err error) {
	if m.gax == nil {
		return m.client.FullDuplexCall(ctx)
	}
	err = gax.Invoke(ctx, func(ctx context.Context, cs gax.CallSettings) error {
		st, err = m.client.FullDuplexCall(ctx, cs.GRPC...)
		return err
	}, m.gax...)
	return st, err
}

// successRequest is the request of the unary success paths.
func successRequest() *testgrpc.SimpleRequest {
	return &testgrpc.SimpleRequest{ResponseSize: payloadSize, Payload: newPayload(payloadSize)}
}

// flakyRequest is a request that the server fails every other time with
// UNAVAILABLE.
func flakyRequest() *testgrpc.SimpleRequest {
	req := successRequest()
	req.ResponseStatus = &testgrpc.EchoStatus{Code: int32(codes.Unavailable), Message: "bench: flaky"}
	return req
}

// order returns 0, ..., n-1 in the order in which b runs its sub-benchmarks:
// as listed, or shuffled by the seed in $BENCH_SEED (run.sh gives each round
// its own), so that no mechanism always runs first, or after the same
// neighbour, in every round.
func order(b *testing.B, n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	seed, err := strconv.ParseUint(os.Getenv("BENCH_SEED"), 10, 64)
	if err != nil {
		return idx
	}
	h := fnv.New64a()
	h.Write([]byte(b.Name()))
	rand.New(rand.NewPCG(seed, h.Sum64())).Shuffle(n, func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
	return idx
}

// warmUp runs op n times, before a sub-benchmark's timed loop, so that each
// mechanism starts measured with warm caches and pools.
func warmUp(b *testing.B, n int, op func() error) {
	for range n {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
}
