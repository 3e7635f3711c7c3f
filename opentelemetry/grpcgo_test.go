package opentelemetry_test

import (
	"context"
	"io"
	"net"
	"testing"
	"testing/synctest"

	"github.com/platformkit/grpcbackoff/internal/bufconntest"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	grpcotel "google.golang.org/grpc/stats/opentelemetry"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/opentelemetry"
)

// serveFlaky serves a scripted server whose first failures attempts fail
// with UNAVAILABLE, over bufconn, until the test ends, and returns a client
// connection to it made with opts.
func serveFlaky(t *testing.T, failures int, opts ...grpc.DialOption) *grpc.ClientConn {
	srv := bufconntest.NewServer(t, func(_ string, n int) bufconntest.Step {
		if n < failures {
			return bufconntest.Fail(status.Error(codes.Unavailable, "warming up"))
		}
		return bufconntest.Succeed(1)
	})
	return srv.Conn(t, opts...)
}

// TestSideBySideWithGrpcGoPlugin makes one call that succeeds on its third
// attempt, with grpc-go's own OpenTelemetry plugin and our Recorder on one
// meter provider, and checks that both label it alike, and what grpc-go's
// per-call metrics count with its interceptor outside ours (one call, its
// whole time) and inside (each of our attempts is a call).
func TestSideBySideWithGrpcGoPlugin(t *testing.T) {
	const labels = "grpc.method=grpc.testing.TestService/UnaryCall grpc.target=passthrough:///bufconn"
	for _, tc := range []struct {
		name         string
		grpcGoFirst  bool
		callDuration map[string]string
	}{
		{"grpc-go outside", true, map[string]string{
			"grpc.method=grpc.testing.TestService/UnaryCall grpc.status=OK grpc.target=passthrough:///bufconn": "n=1 sum=3 min=3 max=3 <=5:1",
		}},
		{"grpc-go inside", false, map[string]string{
			"grpc.method=grpc.testing.TestService/UnaryCall grpc.status=OK grpc.target=passthrough:///bufconn":          "n=1 sum=0 min=0 max=0 <=0:1",
			"grpc.method=grpc.testing.TestService/UnaryCall grpc.status=UNAVAILABLE grpc.target=passthrough:///bufconn": "n=2 sum=0 min=0 max=0 <=0:2",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				reader, mp := newReader()
				rec := newRecorder(t, opentelemetry.Options{MeterProvider: mp})
				p := bufconntest.Exact()
				p.MaxAttempts = 3
				ours := interceptor.DialOptions(p, rec.Option(), interceptor.WithSafety("/grpc.testing.TestService/", interceptor.Idempotent))
				theirs := grpcotel.DialOption(grpcotel.Options{MetricsOptions: grpcotel.MetricsOptions{MeterProvider: mp}})
				opts := append(ours, theirs)
				if tc.grpcGoFirst {
					opts = append([]grpc.DialOption{theirs}, ours...)
				}
				cc := serveFlaky(t, 2, opts...)
				if _, err := testgrpc.NewTestServiceClient(cc).UnaryCall(t.Context(), &testgrpc.SimpleRequest{}); err != nil {
					t.Fatal(err)
				}

				got := collect(t, reader)
				check(t, got, opentelemetry.MetricCallRetries, countBounds, map[string]string{labels: "n=1 sum=2 min=2 max=2 <=2:1"})
				check(t, got, opentelemetry.MetricCallRetryDelay, opentelemetry.LatencyBuckets, map[string]string{labels: "n=1 sum=3 min=3 max=3 <=5:1"})
				check(t, got, "grpc.client.attempt.started", nil, map[string]string{labels: "3"})
				check(t, got, "grpc.client.call.duration", opentelemetry.LatencyBuckets, tc.callDuration)
			})
		})
	}
}

// TestStreamMetrics checks the metrics of a server stream that succeeds on
// its third attempt: its end is seen at io.EOF, with its method's name (the
// generated stub passes grpc.StaticMethod for streams too).
func TestStreamMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, mp := newReader()
		p := bufconntest.Exact()
		p.MaxAttempts = 3
		cc := serveFlaky(t, 2, interceptor.DialOptions(p, newRecorder(t, opentelemetry.Options{MeterProvider: mp}).Option(), interceptor.WithSafety("/grpc.testing.TestService/", interceptor.Idempotent))...)
		stream, err := testgrpc.NewTestServiceClient(cc).StreamingOutputCall(t.Context(), &testgrpc.StreamingOutputCallRequest{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for ; ; n++ {
			if _, err := stream.Recv(); err == io.EOF {
				break
			} else if err != nil {
				t.Fatal(err)
			}
		}
		if n != 1 {
			t.Fatalf("%d messages received, want 1", n)
		}
		const labels = "grpc.method=grpc.testing.TestService/StreamingOutputCall grpc.target=passthrough:///bufconn"
		got := collect(t, reader)
		check(t, got, opentelemetry.MetricCallRetries, countBounds, map[string]string{labels: "n=1 sum=2 min=2 max=2 <=2:1"})
		check(t, got, opentelemetry.MetricCallRetryDelay, opentelemetry.LatencyBuckets, map[string]string{labels: "n=1 sum=3 min=3 max=3 <=5:1"})
		check(t, got, opentelemetry.MetricCallGaveUp, nil, nil)
	})
}

// TestStreamGaveUp checks that a stream that gives up is recorded: one
// whose attempts fail when received from, and one whose attempts cannot
// open (no server: each NewStream fails).
func TestStreamGaveUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, mp := newReader()
		p := bufconntest.Exact()
		p.MaxAttempts = 3
		opts := interceptor.DialOptions(p, interceptor.WithoutThrottle(), newRecorder(t, opentelemetry.Options{MeterProvider: mp}).Option(), interceptor.WithSafety("/grpc.testing.TestService/", interceptor.Idempotent))
		cc := serveFlaky(t, 100, opts...)
		stream, err := testgrpc.NewTestServiceClient(cc).StreamingOutputCall(t.Context(), &testgrpc.StreamingOutputCallRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
			t.Fatalf("Recv: %v, want UNAVAILABLE after 3 attempts", err)
		}

		lis := bufconn.Listen(1 << 10)
		lis.Close()
		down, err := grpc.NewClient("passthrough:///down", append([]grpc.DialOption{
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
		}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		defer down.Close()
		if _, err := testgrpc.NewTestServiceClient(down).StreamingOutputCall(t.Context(), &testgrpc.StreamingOutputCallRequest{}); status.Code(err) != codes.Unavailable {
			t.Fatalf("StreamingOutputCall with no server: %v, want UNAVAILABLE after 3 attempts", err)
		}

		const method = "grpc.method=grpc.testing.TestService/StreamingOutputCall"
		got := collect(t, reader)
		check(t, got, opentelemetry.MetricCallGaveUp, nil, map[string]string{
			method + " grpc.status=UNAVAILABLE grpc.target=passthrough:///bufconn grpcbackoff.reason=exhausted": "1",
			method + " grpc.status=UNAVAILABLE grpc.target=passthrough:///down grpcbackoff.reason=exhausted":    "1",
		})
		check(t, got, opentelemetry.MetricCallRetries, countBounds, map[string]string{
			method + " grpc.target=passthrough:///bufconn": "n=1 sum=2 min=2 max=2 <=2:1",
			method + " grpc.target=passthrough:///down":    "n=1 sum=2 min=2 max=2 <=2:1",
		})
	})
}
