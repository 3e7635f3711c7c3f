package opentelemetry_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/platformkit/grpcbackoff/internal/bufconntest"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
)

// call calls "/pkg.Svc/Get" through ic, as a generated stub does
// (grpc.StaticMethod), with s as its invoker and no ClientConn.
func call(ctx context.Context, ic grpc.UnaryClientInterceptor, s *bufconntest.Invoker, opts ...grpc.CallOption) error {
	return s.Call(ctx, ic, append(opts, grpc.StaticMethod())...)
}

// newReader returns a manual reader and a meter provider that it reads.
func newReader() (*sdkmetric.ManualReader, *sdkmetric.MeterProvider) {
	reader := sdkmetric.NewManualReader()
	return reader, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
}

// collect returns the metrics reader has, by name.
func collect(t *testing.T, reader *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if _, dup := got[m.Name]; dup {
				t.Fatalf("metric %s is reported twice", m.Name)
			}
			got[m.Name] = m
		}
	}
	return got
}

// attrs writes s as "k=v k=v", in key order.
func attrs(s attribute.Set) string {
	var kvs []string
	for it := s.Iter(); it.Next(); {
		kv := it.Attribute()
		kvs = append(kvs, string(kv.Key)+"="+kv.Value.String())
	}
	return strings.Join(kvs, " ")
}

// points returns, by attribute set (attrs), a summary of each data point of
// m: "n=<count> sum=<sum> min=<min> max=<max> <=<bound>:<count> ..." (non-empty
// buckets only) for a histogram, the value for a counter or gauge. It checks
// that histograms have the bucket bounds bounds and that counters are
// monotonic and cumulative.
func points(t *testing.T, m metricdata.Metrics, bounds []float64) map[string]string {
	t.Helper()
	got := map[string]string{}
	switch d := m.Data.(type) {
	case metricdata.Histogram[int64]:
		for _, dp := range d.DataPoints {
			got[attrs(dp.Attributes)] = histogram(t, m.Name, dp, bounds)
		}
	case metricdata.Histogram[float64]:
		for _, dp := range d.DataPoints {
			got[attrs(dp.Attributes)] = histogram(t, m.Name, dp, bounds)
		}
	case metricdata.Sum[int64]:
		if !d.IsMonotonic || d.Temporality != metricdata.CumulativeTemporality {
			t.Errorf("%s: monotonic %v, temporality %v, want a monotonic cumulative sum", m.Name, d.IsMonotonic, d.Temporality)
		}
		for _, dp := range d.DataPoints {
			got[attrs(dp.Attributes)] = fmt.Sprint(dp.Value)
		}
	case metricdata.Gauge[float64]:
		for _, dp := range d.DataPoints {
			got[attrs(dp.Attributes)] = fmt.Sprint(dp.Value)
		}
	default:
		t.Fatalf("%s is a %T", m.Name, m.Data)
	}
	return got
}

func histogram[N int64 | float64](t *testing.T, name string, dp metricdata.HistogramDataPoint[N], bounds []float64) string {
	t.Helper()
	if fmt.Sprint(dp.Bounds) != fmt.Sprint(bounds) {
		t.Errorf("%s: bounds %v, want %v", name, dp.Bounds, bounds)
	}
	min, _ := dp.Min.Value()
	max, _ := dp.Max.Value()
	s := fmt.Sprintf("n=%d sum=%v min=%v max=%v", dp.Count, dp.Sum, min, max)
	for i, n := range dp.BucketCounts {
		if n == 0 {
			continue
		}
		upper := math.Inf(1)
		if i < len(dp.Bounds) {
			upper = dp.Bounds[i]
		}
		s += fmt.Sprintf(" <=%v:%d", upper, n)
	}
	return s
}

// equal reports whether a and b hold the same entries.
func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
