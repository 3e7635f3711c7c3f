package opentelemetry_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/platformkit/grpcbackoff/internal/bufconntest"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/opentelemetry"
)

var countBounds = []float64{1, 2, 3, 4, 5}

// get is the label set of the calls of the tests' fake invoker: the method
// of call, no ClientConn.
const get = "grpc.method=pkg.Svc/Get grpc.target="

func newRecorder(t *testing.T, o opentelemetry.Options) *opentelemetry.Recorder {
	t.Helper()
	rec, err := opentelemetry.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// check compares the points of metric name with want; no metric means no
// point.
func check(t *testing.T, got map[string]metricdata.Metrics, name string, bounds []float64, want map[string]string) {
	t.Helper()
	m, ok := got[name]
	var pts map[string]string
	if ok {
		pts = points(t, m, bounds)
	}
	if !equal(pts, want) {
		t.Errorf("%s = %v, want %v", name, pts, want)
	}
}

func TestMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, mp := newReader()
		rec := newRecorder(t, opentelemetry.Options{MeterProvider: mp})
		p := bufconntest.Exact()
		p.MaxAttempts = 3
		ic := interceptor.Unary(p, rec.Option(), interceptor.WithThrottle(grpcbackoff.Throttle{Burst: 2}))

		call(t.Context(), ic, &bufconntest.Invoker{})                                                // 1 OK attempt: nothing
		call(t.Context(), ic, &bufconntest.Invoker{Errs: bufconntest.Unavailable(2)})                // 2 retries (1 s, 2 s), then OK: the one served given back
		call(t.Context(), ic, &bufconntest.Invoker{Errs: []error{status.Error(codes.NotFound, "")}}) // not retried: nothing
		call(t.Context(), ic, &bufconntest.Invoker{Errs: bufconntest.Unavailable(5)})                // 1 retry (1 s), then throttled

		got := collect(t, reader)
		check(t, got, opentelemetry.MetricCallRetries, countBounds, map[string]string{
			get: "n=2 sum=3 min=1 max=2 <=1:1 <=2:1",
		})
		check(t, got, opentelemetry.MetricCallRetryDelay, opentelemetry.LatencyBuckets, map[string]string{
			get: "n=2 sum=4 min=1 max=3 <=1:1 <=5:1",
		})
		check(t, got, opentelemetry.MetricCallHedges, nil, nil)
		check(t, got, opentelemetry.MetricCallTransparentRetries, nil, nil)
		check(t, got, opentelemetry.MetricCallGaveUp, nil, map[string]string{
			"grpc.method=pkg.Svc/Get grpc.status=UNAVAILABLE grpc.target= grpcbackoff.reason=throttled": "1",
		})
		check(t, got, opentelemetry.MetricBudgetRefused, nil, map[string]string{
			get + " grpcbackoff.attempt_type=retry": "1",
		})
	})
}

func TestMetricsInstruments(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, mp := newReader()
		rec := newRecorder(t, opentelemetry.Options{MeterProvider: mp})
		ic := interceptor.Unary(bufconntest.Exact(), rec.Option(), interceptor.WithThrottle(grpcbackoff.Throttle{Burst: 1}))
		call(t.Context(), ic, &bufconntest.Invoker{Errs: bufconntest.Unavailable(5)}) // a retry, then throttled
		got := collect(t, reader)
		for name, unit := range map[string]string{
			opentelemetry.MetricCallRetries:                  "{retry}",
			opentelemetry.MetricCallRetryDelay:               "s",
			opentelemetry.MetricCallGaveUp:                   "{call}",
			opentelemetry.MetricBudgetRefused:                "{attempt}",
			opentelemetry.MetricBudgetAvailable:              "{retry}",
			opentelemetry.MetricThrottleRejectionProbability: "1",
		} {
			if m, ok := got[name]; !ok || m.Unit != unit || m.Description == "" {
				t.Errorf("%s: present %v, unit %q, description %q; want unit %q and a description", name, ok, m.Unit, m.Description, unit)
			}
		}
		if len(got) != 6 {
			t.Errorf("%d metrics reported, want 6 (no hedge, no transparent retry)", len(got))
		}
	})
}

func TestMetricsGaveUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, mp := newReader()
		p := bufconntest.Exact()
		p.MaxAttempts = 2
		ic := interceptor.Unary(p, interceptor.WithoutThrottle(), newRecorder(t, opentelemetry.Options{MeterProvider: mp}).Option())
		call(t.Context(), ic, &bufconntest.Invoker{Errs: bufconntest.Unavailable(5)})
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		call(ctx, ic, &bufconntest.Invoker{Errs: bufconntest.Unavailable(5)}) // no time for a retry: gives up at once
		ctx, cancel = context.WithCancel(t.Context())
		time.AfterFunc(300*time.Millisecond, cancel)
		call(ctx, ic, &bufconntest.Invoker{Errs: bufconntest.Unavailable(5)}) // canceled 0.3 s into its wait
		call(t.Context(), ic, &bufconntest.Invoker{Errs: []error{status.Error(codes.Unavailable, ""), status.Error(codes.NotFound, "")}})

		got := collect(t, reader)
		check(t, got, opentelemetry.MetricCallGaveUp, nil, map[string]string{
			"grpc.method=pkg.Svc/Get grpc.status=UNAVAILABLE grpc.target= grpcbackoff.reason=exhausted":   "1",
			"grpc.method=pkg.Svc/Get grpc.status=UNAVAILABLE grpc.target= grpcbackoff.reason=deadline":    "1",
			"grpc.method=pkg.Svc/Get grpc.status=CANCELLED grpc.target= grpcbackoff.reason=canceled":      "1",
			"grpc.method=pkg.Svc/Get grpc.status=NOT_FOUND grpc.target= grpcbackoff.reason=not_retryable": "1",
		})
		// Retries: the exhausted call's and the NOT_FOUND call's. Delays:
		// theirs (1 s each) and the canceled call's 0.3 s wait; the call
		// that gave up at once waited for nothing.
		check(t, got, opentelemetry.MetricCallRetries, countBounds, map[string]string{get: "n=2 sum=2 min=1 max=1 <=1:2"})
		check(t, got, opentelemetry.MetricCallRetryDelay, opentelemetry.LatencyBuckets, map[string]string{
			get: "n=3 sum=2.3 min=0.3 max=1 <=0.3:1 <=1:2",
		})
		check(t, got, opentelemetry.MetricBudgetRefused, nil, nil)
	})
}

// TestMetricsAcrossRetriersAndCollections checks that the values of two
// Retriers sharing a Recorder, and of a second Recorder on the same
// provider, add up, and stay cumulative from one collection to the next.
func TestMetricsAcrossRetriersAndCollections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, mp := newReader()
		p := bufconntest.Exact()
		p.MaxAttempts = 2
		rec := newRecorder(t, opentelemetry.Options{MeterProvider: mp})
		a := interceptor.Unary(p, rec.Option())
		b := interceptor.Unary(p, rec.Option())
		c := interceptor.Unary(p, newRecorder(t, opentelemetry.Options{MeterProvider: mp}).Option())

		call(t.Context(), a, &bufconntest.Invoker{})
		call(t.Context(), b, &bufconntest.Invoker{Errs: bufconntest.Unavailable(1)})
		call(t.Context(), c, &bufconntest.Invoker{Errs: bufconntest.Unavailable(1)})
		want := map[string]string{get: "n=2 sum=2 min=1 max=1 <=1:2"}
		check(t, collect(t, reader), opentelemetry.MetricCallRetries, countBounds, want)
		check(t, collect(t, reader), opentelemetry.MetricCallRetries, countBounds, want) // no calls between

		call(t.Context(), a, &bufconntest.Invoker{Errs: bufconntest.Unavailable(2)})
		got := collect(t, reader)
		check(t, got, opentelemetry.MetricCallRetries, countBounds, map[string]string{get: "n=3 sum=3 min=1 max=1 <=1:3"})
		check(t, got, opentelemetry.MetricCallGaveUp, nil, map[string]string{
			"grpc.method=pkg.Svc/Get grpc.status=UNAVAILABLE grpc.target= grpcbackoff.reason=exhausted": "1",
		})
	})
}

// TestMetricsConcurrentCalls checks that calls from many goroutines all add
// up, for a method whose name is a constant and for one built at run time (a
// new address each time).
func TestMetricsConcurrentCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, mp := newReader()
		ic := interceptor.Unary(bufconntest.Exact(), interceptor.WithoutThrottle(), interceptor.WithSafety("/pkg.Svc/", interceptor.Idempotent),
			newRecorder(t, opentelemetry.Options{MeterProvider: mp}).Option())
		const goroutines, calls = 50, 100
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				method := "/pkg.Svc/Get"
				if g%2 == 1 {
					method = "/pkg.Svc/" + strings.Repeat("Put", 1) // not the constant's bytes
				}
				for range calls {
					s := &bufconntest.Invoker{Errs: bufconntest.Unavailable(1)}
					if err := ic(t.Context(), method, nil, nil, nil, s.Invoke, grpc.StaticMethod()); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		got := collect(t, reader)
		const n = "n=2500 sum=2500 min=1 max=1 <=1:2500"
		check(t, got, opentelemetry.MetricCallRetries, countBounds, map[string]string{
			get: n, "grpc.method=pkg.Svc/Put grpc.target=": n,
		})
	})
}

func TestMetricsMethodLabel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, mp := newReader()
		rec := newRecorder(t, opentelemetry.Options{
			MeterProvider:         mp,
			MethodAttributeFilter: func(m string) bool { return m == "pkg.Svc/Allowed" },
		})
		ic := interceptor.Unary(bufconntest.Exact(), rec.Option(), interceptor.WithSafety("/pkg.Svc/", interceptor.Idempotent))
		for _, c := range []struct {
			method string
			opts   []grpc.CallOption
		}{
			{"/pkg.Svc/Static", []grpc.CallOption{grpc.StaticMethod()}},
			{"/pkg.Svc/Generic", nil},
			{"/pkg.Svc/Other", nil},
			{"/pkg.Svc/Allowed", nil},
		} {
			s := &bufconntest.Invoker{Errs: bufconntest.Unavailable(1)}
			if err := ic(t.Context(), c.method, nil, nil, nil, s.Invoke, c.opts...); err != nil {
				t.Fatal(err)
			}
		}
		check(t, collect(t, reader), opentelemetry.MetricCallRetries, countBounds, map[string]string{
			"grpc.method=pkg.Svc/Static grpc.target=":  "n=1 sum=1 min=1 max=1 <=1:1",
			"grpc.method=other grpc.target=":           "n=2 sum=2 min=1 max=1 <=1:2",
			"grpc.method=pkg.Svc/Allowed grpc.target=": "n=1 sum=1 min=1 max=1 <=1:1",
		})
	})
}

// TestMetricsTargetLabel checks grpc.target: the ClientConn's canonical
// target, or "other" for the targets the filter rejects.
func TestMetricsTargetLabel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, mp := newReader()
		var asked []string
		rec := newRecorder(t, opentelemetry.Options{
			MeterProvider: mp,
			TargetAttributeFilter: func(target string) bool {
				asked = append(asked, target)
				return !strings.Contains(target, "10.0.0.1")
			},
		})
		ic := interceptor.Unary(bufconntest.Exact(), rec.Option(), interceptor.WithoutThrottle())
		for _, target := range []string{"example.com:443", "passthrough:///bufnet", "10.0.0.1:80", "example.com:443"} {
			cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			s := &bufconntest.Invoker{Errs: bufconntest.Unavailable(1)}
			if err := ic(t.Context(), "/pkg.Svc/Get", nil, nil, cc, s.Invoke, grpc.StaticMethod()); err != nil {
				t.Fatal(err)
			}
			cc.Close()
		}
		one := "n=1 sum=1 min=1 max=1 <=1:1"
		check(t, collect(t, reader), opentelemetry.MetricCallRetries, countBounds, map[string]string{
			"grpc.method=pkg.Svc/Get grpc.target=dns:///example.com:443": "n=2 sum=2 min=1 max=1 <=1:2",
			"grpc.method=pkg.Svc/Get grpc.target=passthrough:///bufnet":  one,
			"grpc.method=pkg.Svc/Get grpc.target=other":                  one,
		})
		if want := "dns:///example.com:443 passthrough:///bufnet dns:///10.0.0.1:80"; strings.Join(asked, " ") != want {
			t.Errorf("the filter was asked about %q, want each target once: %q", asked, want)
		}
	})
}

// TestSuccessAllocatesNothing checks that a call that succeeds at once
// records nothing and allocates nothing, with no-op metrics, with the SDK,
// and with a recording span.
func TestSuccessAllocatesNothing(t *testing.T) {
	_, sdk := newReader()
	invoke := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	ctx, span := newTracer().Start(context.Background(), "call")
	defer span.End()
	for name, mp := range map[string]metric.MeterProvider{"noop": noop.NewMeterProvider(), "sdk": sdk} {
		rec, err := opentelemetry.New(opentelemetry.Options{MeterProvider: mp})
		if err != nil {
			t.Fatal(err)
		}
		ic := interceptor.Unary(bufconntest.Exact(), rec.Option())
		opts := []grpc.CallOption{grpc.StaticMethod()}
		ic(ctx, "/pkg.Svc/Get", nil, nil, nil, invoke, opts...)
		if n := testing.AllocsPerRun(1000, func() { ic(ctx, "/pkg.Svc/Get", nil, nil, nil, invoke, opts...) }); n != 0 {
			t.Errorf("%s: a successful call allocates %v times, want 0", name, n)
		}
	}
}

func TestNewRejectsNilPointerProvider(t *testing.T) {
	var mp *noop.MeterProvider
	_, err := opentelemetry.New(opentelemetry.Options{MeterProvider: mp})
	if err == nil || !strings.Contains(err.Error(), "opentelemetry: New: Options.MeterProvider is a nil *noop.MeterProvider") {
		t.Errorf("New with a nil pointer provider: %v, want an error naming it", err)
	}
}

// TestMetricsRejectedLocally: calls rejected locally by adaptive throttling
// are counted as rejected, with no attempt and no give-up, and the gauge
// shows the rejection probability that rejected them.
func TestMetricsRejectedLocally(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, mp := newReader()
		rec := newRecorder(t, opentelemetry.Options{MeterProvider: mp})
		p := bufconntest.Exact()
		p.MaxAttempts = 1
		ic := interceptor.Unary(p, rec.Option(), interceptor.WithoutThrottle(),
			interceptor.WithAdaptiveThrottle(grpcbackoff.AdaptiveThrottle{K: 2, Window: time.Minute}))
		s := &bufconntest.Invoker{Errs: bufconntest.Unavailable(100)}
		for range 100 {
			call(t.Context(), ic, s)
		}
		sent := s.Attempts()
		if sent == 100 {
			t.Fatal("no call rejected locally")
		}
		got := collect(t, reader)
		check(t, got, opentelemetry.MetricCallRejected, nil, map[string]string{get: fmt.Sprint(100 - sent)})
		check(t, got, opentelemetry.MetricCallGaveUp, nil, map[string]string{
			"grpc.method=pkg.Svc/Get grpc.status=UNAVAILABLE grpc.target= grpcbackoff.reason=exhausted": fmt.Sprint(sent),
		})
		pts := points(t, got[opentelemetry.MetricThrottleRejectionProbability], nil)
		if v, err := strconv.ParseFloat(pts["grpc.target="], 64); err != nil || v < 0.5 || v >= 1 {
			t.Errorf("%s = %v, want a probability in [0.5, 1) for target \"\"", opentelemetry.MetricThrottleRejectionProbability, pts)
		}
	})
}

// TestMetricsBudgetRefusedKinds: each attempt the budget refuses is counted
// once, as what it was. A hedged call's retry refused counts as a retry;
// a hedge refused counts as a hedge, though the call then succeeds. Before,
// refusals were counted from the call's end: a hedged call's refused retry
// was a "hedge", and a refused hedge of a call that succeeded was missed.
func TestMetricsBudgetRefusedKinds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, mp := newReader()
		rec := newRecorder(t, opentelemetry.Options{MeterProvider: mp})
		r, err := interceptor.New(bufconntest.Exact(), rec.Option(),
			interceptor.WithHedging("/pkg.Svc/Get", grpcbackoff.Hedging{MaxAttempts: 2, Delay: 100 * time.Millisecond}),
			interceptor.WithThrottle(grpcbackoff.Throttle{Burst: 1}))
		if err != nil {
			t.Fatal(err)
		}
		ic := r.Unary()
		slow := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
			time.Sleep(200 * time.Millisecond)
			return nil
		}
		hedged := func(invoker grpc.UnaryInvoker) error {
			return ic(t.Context(), "/pkg.Svc/Get", "req", new(string), nil, invoker, grpc.StaticMethod())
		}
		if err := hedged(slow); err != nil { // its hedge spends the budget's one retry
			t.Fatal(err)
		}
		if err := hedged(slow); err != nil { // its hedge is refused; it succeeds
			t.Fatal(err)
		}
		failing := &bufconntest.Invoker{Errs: bufconntest.Unavailable(10)}
		if err := hedged(failing.Invoke); status.Code(err) != codes.Unavailable { // its retry is refused
			t.Fatalf("err = %v, want UNAVAILABLE", err)
		}
		check(t, collect(t, reader), opentelemetry.MetricBudgetRefused, nil, map[string]string{
			get + " grpcbackoff.attempt_type=hedge": "1",
			get + " grpcbackoff.attempt_type=retry": "1",
		})
	})
}
