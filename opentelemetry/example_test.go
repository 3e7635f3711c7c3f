package opentelemetry_test

import (
	"context"
	"fmt"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/opentelemetry"
)

// A Recorder on an OpenTelemetry meter provider, given to a Retrier: a call
// that succeeds on its third attempt records 2 retries in
// grpc.client.call.retries.
func ExampleNew() {
	reader := sdkmetric.NewManualReader()
	rec, err := opentelemetry.New(opentelemetry.Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	if err != nil {
		panic(err)
	}
	p := grpcbackoff.DefaultPolicy()
	p.Initial, p.Jitter = time.Millisecond, 0 // fast, for the example
	r, err := interceptor.New(p, rec.Option())
	if err != nil {
		panic(err)
	}
	// conn, err := grpc.NewClient(target, append(r.DialOptions(), creds)...)

	// A call whose first two attempts fail, made through the interceptor as
	// a generated stub would make it.
	attempts := 0
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		if attempts++; attempts <= 2 {
			return status.Error(codes.Unavailable, "warming up")
		}
		return nil
	}
	err = r.Unary()(context.Background(), "/pkg.Svc/Get", "req", new(string), nil, invoker, grpc.StaticMethod())
	fmt.Println("call:", err)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == opentelemetry.MetricCallRetries {
				dp := m.Data.(metricdata.Histogram[int64]).DataPoints[0]
				fmt.Println(m.Name, "count", dp.Count, "sum", dp.Sum)
			}
		}
	}
	// Output:
	// call: <nil>
	// grpc.client.call.retries count 1 sum 2
}
