// Command metrics shows the OpenTelemetry metrics of grpcbackoff's
// interceptors as a dashboard reads them: the per-call retry histograms of
// gRFC A96 (grpc.client.call.retries, .retry_delay, .hedges and
// .transparent_retries), labelled with grpc.method and grpc.target as
// gRPC's own metrics are, and our grpcbackoff.* extras.
//
//	go run ./examples/metrics
//
// It needs nothing set up and takes about 3 s: it starts an in-process
// server (over an in-memory connection) that fails every call with
// UNAVAILABLE from 0.5 s to 1.7 s after the start, and three clients that
// call it every 50 ms for 2.5 s, each on its own connection with the
// Memorystore recipe at 1/10 time scale (first retry after 0.1 s, doubling)
// and a deadline of 1 s per call. Then it exports what the meter provider
// holds to stdout with the OpenTelemetry stdout exporter (JSON, as a
// collector would receive it), and prints a summary of the same data.
//
// Jitter is off so that the run tells the same story every time.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/opentelemetry"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// The script of the run, from its start.
const (
	outageStart = 500 * time.Millisecond
	outageEnd   = 1700 * time.Millisecond
	traffic     = 2500 * time.Millisecond // how long clients start calls
	pace        = 50 * time.Millisecond   // between a call's end and the next
	deadline    = time.Second             // of each call
)

// policy is the Memorystore recipe at 1/10 time scale, without jitter.
func policy() grpcbackoff.Policy {
	p := grpcbackoff.DefaultPolicy()
	p.Initial, p.Max, p.Jitter = 100*time.Millisecond, 3200*time.Millisecond, 0
	p.MaxAttempts = 5
	return p
}

// throttle is the default retry budget with fewer retries saved up, so that
// the outage empties it.
var throttle = grpcbackoff.Throttle{Ratio: 0.1, PerSecond: 0.5, Burst: 5}

// run plays the script and writes the metrics to out.
func run(ctx context.Context, out io.Writer) error {
	reader := metric.NewManualReader()
	mp := metric.NewMeterProvider(metric.WithReader(reader))
	defer mp.Shutdown(ctx)
	rec, err := opentelemetry.New(opentelemetry.Options{MeterProvider: mp})
	if err != nil {
		return err
	}

	start := time.Now()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, &server{start: start})
	served := make(chan struct{})
	go func() { defer close(served); srv.Serve(lis) }()
	defer func() { srv.Stop(); <-served }()

	// Three clients, each with its connection and its own retry budget, as
	// three instances of a service would have.
	clients := []func(context.Context, testgrpc.TestServiceClient) error{
		func(ctx context.Context, c testgrpc.TestServiceClient) error {
			_, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{})
			return err
		},
		func(ctx context.Context, c testgrpc.TestServiceClient) error {
			_, err := c.EmptyCall(ctx, &testgrpc.Empty{})
			return err
		},
		func(ctx context.Context, c testgrpc.TestServiceClient) error {
			stream, err := c.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
			for err == nil {
				_, err = stream.Recv()
			}
			if err == io.EOF {
				return nil
			}
			return err
		},
	}
	var wg sync.WaitGroup
	for _, do := range clients {
		// The test service's calls change nothing, but its descriptor does
		// not say so: stated, or they would be treated as writes, not
		// resent after an UNAVAILABLE the server sent (interceptor.Safety).
		opts := interceptor.DialOptions(policy(), rec.Option(), interceptor.WithThrottle(throttle),
			interceptor.WithSafety("/grpc.testing.TestService/", interceptor.Idempotent))
		cc, err := grpc.NewClient("passthrough:///in-process", append(opts,
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			return err
		}
		defer cc.Close()
		client := testgrpc.NewTestServiceClient(cc)
		wg.Go(func() {
			for time.Since(start) < traffic {
				ctx, cancel := context.WithTimeout(ctx, deadline)
				do(ctx, client) // the metrics tell how it went
				cancel()
				time.Sleep(pace)
			}
		})
	}
	wg.Wait()

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		return err
	}
	exp, err := stdoutmetric.New(stdoutmetric.WithWriter(out), stdoutmetric.WithPrettyPrint())
	if err != nil {
		return err
	}
	if err := exp.Export(ctx, &rm); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nAfter %v of traffic with an outage from %v to %v:\n", traffic, outageStart, outageEnd)
	summarize(out, rm)
	return nil
}

// server answers every method the clients call, and UNAVAILABLE to all of
// them during the outage.
type server struct {
	testgrpc.UnimplementedTestServiceServer
	start time.Time
}

func (s *server) down() error {
	if t := time.Since(s.start); t >= outageStart && t < outageEnd {
		return status.Error(codes.Unavailable, "scripted outage")
	}
	return nil
}

func (s *server) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{}, s.down()
}

func (s *server) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	return &testgrpc.Empty{}, s.down()
}

func (s *server) StreamingOutputCall(_ *testgrpc.StreamingOutputCallRequest, stream testgrpc.TestService_StreamingOutputCallServer) error {
	if err := s.down(); err != nil {
		return err
	}
	return stream.Send(&testgrpc.StreamingOutputCallResponse{})
}

// summarize writes, for each metric of the A96 set and our own, one line per
// attribute set: the count and sum of a histogram, the value of a counter or
// gauge.
func summarize(out io.Writer, rm metricdata.ResourceMetrics) {
	byName := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			byName[m.Name] = m
		}
	}
	for _, name := range []string{
		opentelemetry.MetricCallRetries, opentelemetry.MetricCallRetryDelay,
		opentelemetry.MetricCallHedges, opentelemetry.MetricCallTransparentRetries,
		opentelemetry.MetricCallGaveUp, opentelemetry.MetricBudgetRefused,
		opentelemetry.MetricBudgetAvailable,
	} {
		fmt.Fprintf(out, "%s\n", name)
		m, ok := byName[name]
		if !ok {
			why := "no call had one"
			if name == opentelemetry.MetricCallTransparentRetries {
				why = "never recorded: grpc-go does not show transparent retries to interceptors"
			} else if name == opentelemetry.MetricCallHedges {
				why = "the interceptors do not hedge yet"
			}
			fmt.Fprintf(out, "  (no data: %s)\n", why)
			continue
		}
		var lines []string
		switch d := m.Data.(type) {
		case metricdata.Histogram[int64]:
			for _, dp := range d.DataPoints {
				lines = append(lines, fmt.Sprintf("  %s: %d calls, %d in all", labels(dp.Attributes), dp.Count, dp.Sum))
			}
		case metricdata.Histogram[float64]:
			for _, dp := range d.DataPoints {
				lines = append(lines, fmt.Sprintf("  %s: %d calls, %.2f %s in all", labels(dp.Attributes), dp.Count, dp.Sum, m.Unit))
			}
		case metricdata.Sum[int64]:
			for _, dp := range d.DataPoints {
				lines = append(lines, fmt.Sprintf("  %s: %d", labels(dp.Attributes), dp.Value))
			}
		case metricdata.Gauge[float64]:
			for _, dp := range d.DataPoints {
				lines = append(lines, fmt.Sprintf("  %s: %.2f", labels(dp.Attributes), dp.Value))
			}
		}
		slices.Sort(lines)
		fmt.Fprintln(out, strings.Join(lines, "\n"))
	}
}

// labels writes s as "{k=v, k=v}".
func labels(s attribute.Set) string {
	var kvs []string
	for it := s.Iter(); it.Next(); {
		kv := it.Attribute()
		kvs = append(kvs, string(kv.Key)+"="+kv.Value.String())
	}
	return "{" + strings.Join(kvs, ", ") + "}"
}
