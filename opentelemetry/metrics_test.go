package opentelemetry_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/opentelemetry"
)

// counts returns the sums of an Int64 counter by its code and reason attributes.
func counts(t *testing.T, rm metricdata.ResourceMetrics, name string) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				t.Fatalf("%s is %T, want a Sum[int64]", name, m.Data)
			}
			if !sum.IsMonotonic || sum.Temporality != metricdata.CumulativeTemporality {
				t.Errorf("%s: monotonic %v, temporality %v, want a monotonic cumulative sum", name, sum.IsMonotonic, sum.Temporality)
			}
			for _, dp := range sum.DataPoints {
				key := attr(dp.Attributes, "rpc.method") + " " + attr(dp.Attributes, "rpc.response.status_code")
				if r := attr(dp.Attributes, string(opentelemetry.ReasonKey)); r != "" {
					key += " " + r
				}
				if attr(dp.Attributes, "rpc.system.name") != "grpc" {
					t.Errorf("%s: rpc.system.name = %q, want grpc", name, attr(dp.Attributes, "rpc.system.name"))
				}
				got[key] += dp.Value
			}
		}
	}
	return got
}

func attr(s attribute.Set, k string) string {
	v, _ := s.Value(attribute.Key(k))
	return v.String()
}

func equalCounts(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		p := exact()
		p.MaxAttempts = 3
		ic := interceptor.Unary(p, opentelemetry.WithMeterProvider(mp),
			interceptor.WithThrottle(grpcbackoff.Throttle{Burst: 3}))

		call(t.Context(), t, ic, &script{})                                                // 1 OK attempt
		call(t.Context(), t, ic, &script{errs: unavailable(2)})                            // 2 retries, then OK
		call(t.Context(), t, ic, &script{errs: []error{status.Error(codes.NotFound, "")}}) // not retried: no gave_up
		call(t.Context(), t, ic, &script{errs: unavailable(5)})                            // 1 retry, then throttled

		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		const m = "pkg.Svc/Get"
		checks := []struct {
			metric string
			want   map[string]int64
		}{
			{opentelemetry.MetricAttempts, map[string]int64{m + " OK": 2, m + " UNAVAILABLE": 4, m + " NOT_FOUND": 1}},
			{opentelemetry.MetricRetries, map[string]int64{m + " UNAVAILABLE": 3}},
			{opentelemetry.MetricGaveUp, map[string]int64{m + " UNAVAILABLE throttled": 1}},
		}
		for _, c := range checks {
			if got := counts(t, rm, c.metric); !equalCounts(got, c.want) {
				t.Errorf("%s = %v, want %v", c.metric, got, c.want)
			}
		}
		var delays []float64
		for _, sm := range rm.ScopeMetrics {
			for _, mm := range sm.Metrics {
				if mm.Name == opentelemetry.MetricBackoff {
					for _, dp := range mm.Data.(metricdata.Histogram[float64]).DataPoints {
						delays = append(delays, float64(dp.Count), dp.Sum)
					}
				}
			}
		}
		// Three waits: 1 s and 2 s in the second call, 1 s in the last.
		if len(delays) != 2 || delays[0] != 3 || delays[1] != 4 {
			t.Errorf("%s (count, sum) = %v, want (3, 4s)", opentelemetry.MetricBackoff, delays)
		}
	})
}

func TestMetricsExhausted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		p := exact()
		p.MaxAttempts = 2
		ic := interceptor.Unary(p, interceptor.WithoutThrottle(),
			opentelemetry.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
		call(t.Context(), t, ic, &script{errs: unavailable(5)})
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		call(ctx, t, ic, &script{errs: unavailable(5)})
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		want := map[string]int64{"pkg.Svc/Get UNAVAILABLE exhausted": 1, "pkg.Svc/Get UNAVAILABLE deadline": 1}
		if got := counts(t, rm, opentelemetry.MetricGaveUp); !equalCounts(got, want) {
			t.Errorf("%s = %v, want %v", opentelemetry.MetricGaveUp, got, want)
		}
	})
}

// TestMetricsAcrossRetriersAndCollections checks that the counts, kept by
// each Retrier and reported when the provider collects, add up across two
// Retriers sharing a provider and stay cumulative from one collection to
// the next, as a counter's would.
func TestMetricsAcrossRetriersAndCollections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		p := exact()
		p.MaxAttempts = 2
		a := interceptor.Unary(p, opentelemetry.WithMeterProvider(mp))
		b := interceptor.Unary(p, opentelemetry.WithMeterProvider(mp))
		collect := func() map[string]int64 {
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(context.Background(), &rm); err != nil {
				t.Fatal(err)
			}
			return counts(t, rm, opentelemetry.MetricAttempts)
		}
		const m = "pkg.Svc/Get"

		call(t.Context(), t, a, &script{})
		call(t.Context(), t, b, &script{errs: unavailable(1)})
		if got, want := collect(), map[string]int64{m + " OK": 2, m + " UNAVAILABLE": 1}; !equalCounts(got, want) {
			t.Errorf("first collection: %s = %v, want %v", opentelemetry.MetricAttempts, got, want)
		}
		if got, want := collect(), map[string]int64{m + " OK": 2, m + " UNAVAILABLE": 1}; !equalCounts(got, want) {
			t.Errorf("second collection, no calls between: %s = %v, want %v", opentelemetry.MetricAttempts, got, want)
		}
		call(t.Context(), t, a, &script{errs: unavailable(2)})
		if got, want := collect(), map[string]int64{m + " OK": 2, m + " UNAVAILABLE": 3}; !equalCounts(got, want) {
			t.Errorf("third collection: %s = %v, want %v", opentelemetry.MetricAttempts, got, want)
		}
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		if got, want := counts(t, rm, opentelemetry.MetricRetries), map[string]int64{m + " UNAVAILABLE": 2}; !equalCounts(got, want) {
			t.Errorf("%s = %v, want %v (one retry by each Retrier)", opentelemetry.MetricRetries, got, want)
		}
		if got, want := counts(t, rm, opentelemetry.MetricGaveUp), map[string]int64{m + " UNAVAILABLE exhausted": 1}; !equalCounts(got, want) {
			t.Errorf("%s = %v, want %v", opentelemetry.MetricGaveUp, got, want)
		}
	})
}

// TestMetricsCountConcurrentCalls checks that successful attempts from many
// goroutines all add up, for a method whose name is a constant and for one
// built at run time (a new address each time).
func TestMetricsCountConcurrentCalls(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	ic := interceptor.Unary(exact(), opentelemetry.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	invoke := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	const goroutines, calls = 50, 200
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			method := "/pkg.Svc/Get"
			if g%2 == 1 {
				method = "/pkg.Svc/" + strings.Repeat("Put", 1) // not the constant's bytes
			}
			for range calls {
				if err := ic(context.Background(), method, nil, nil, nil, invoke); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"pkg.Svc/Get OK": goroutines / 2 * calls, "pkg.Svc/Put OK": goroutines / 2 * calls}
	if got := counts(t, rm, opentelemetry.MetricAttempts); !equalCounts(got, want) {
		t.Errorf("%s = %v, want %v", opentelemetry.MetricAttempts, got, want)
	}
}

func TestNoopMetricsAllocateNothing(t *testing.T) {
	ic := interceptor.Unary(exact(), opentelemetry.WithMeterProvider(noop.NewMeterProvider()))
	invoke := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	ctx := context.Background()
	ic(ctx, "/pkg.Svc/Get", nil, nil, nil, invoke) // warm the attribute cache
	if n := testing.AllocsPerRun(1000, func() { ic(ctx, "/pkg.Svc/Get", nil, nil, nil, invoke) }); n != 0 {
		t.Errorf("a successful call with no-op metrics allocates %v times, want 0", n)
	}
}

// TestMetricsRejectedLocally: calls rejected locally by adaptive throttling
// count as give-ups with their reason, and as no attempt.
func TestMetricsRejectedLocally(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		p := exact()
		p.MaxAttempts = 1
		ic := interceptor.Unary(p, interceptor.WithoutThrottle(),
			interceptor.WithAdaptiveThrottle(grpcbackoff.AdaptiveThrottle{K: 2, Window: time.Minute}),
			opentelemetry.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
		s := &script{errs: unavailable(100)}
		for range 100 {
			call(t.Context(), t, ic, s)
		}
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		sent := int64(s.n)
		if sent == 100 {
			t.Fatal("no call rejected locally")
		}
		want := map[string]int64{"pkg.Svc/Get UNAVAILABLE": sent}
		if got := counts(t, rm, opentelemetry.MetricAttempts); !equalCounts(got, want) {
			t.Errorf("%s = %v, want %v", opentelemetry.MetricAttempts, got, want)
		}
		want = map[string]int64{"pkg.Svc/Get UNAVAILABLE rejected_locally": 100 - sent, "pkg.Svc/Get UNAVAILABLE exhausted": sent}
		if got := counts(t, rm, opentelemetry.MetricGaveUp); !equalCounts(got, want) {
			t.Errorf("%s = %v, want %v", opentelemetry.MetricGaveUp, got, want)
		}
	})
}
