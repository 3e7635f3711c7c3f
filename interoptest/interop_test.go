package interoptest

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/grpclog"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/serviceconfig"
)

// grpc-go's own interop client cases (google.golang.org/grpc/interop's Do…
// functions, as its interop client runs them) against grpc-go's own interop
// server, through a Retrier: what no one here wrote says what a client
// must see. A case fails the way it fails in grpc-go's client: by
// grpclog's Fatal, which fatalLogger turns into a panic the test catches.

func TestMain(m *testing.M) {
	grpclog.SetLoggerV2(fatalLogger{grpclog.NewLoggerV2(io.Discard, io.Discard, io.Discard)})
	os.Exit(m.Run())
}

// failed is what a case's grpclog Fatal panics with.
type failed string

// fatalLogger is a grpclog.LoggerV2 whose Fatal functions panic instead of
// exiting the process.
type fatalLogger struct{ grpclog.LoggerV2 }

func (fatalLogger) Fatal(args ...any)                 { panic(failed(fmt.Sprint(args...))) }
func (fatalLogger) Fatalln(args ...any)               { panic(failed(fmt.Sprint(args...))) }
func (fatalLogger) Fatalf(format string, args ...any) { panic(failed(fmt.Sprintf(format, args...))) }
func (fatalLogger) FatalDepth(_ int, args ...any)     { panic(failed(fmt.Sprint(args...))) }

// service is the interop TestService, every method of it.
const service = "/grpc.testing.TestService/"

// serviceConfig retries the TestService as grpc-go's own retry would,
// through WithServiceConfig.
const serviceConfig = `{"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}],
	"retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.01s", "maxBackoff": "0.1s", "backoffMultiplier": 2,
	"retryableStatusCodes": ["UNAVAILABLE"]}}]}`

// setup is one way of dialing the interop server: bare grpc-go, or through
// a Retrier with options; slow delays the server's unary answers, so that a
// hedge is in flight when the first attempt answers.
type setup struct {
	name string
	dial func(t *testing.T) []grpc.DialOption
	slow time.Duration
}

func setups() []setup {
	policy := func(attemptTimeout time.Duration) grpcbackoff.Policy {
		p := grpcbackoff.DefaultPolicy()
		p.AttemptTimeout = attemptTimeout
		return p
	}
	retrier := func(p grpcbackoff.Policy, opts ...interceptor.Option) func(*testing.T) []grpc.DialOption {
		return func(*testing.T) []grpc.DialOption { return interceptor.DialOptions(p, opts...) }
	}
	return []setup{
		{name: "bare", dial: func(*testing.T) []grpc.DialOption { return nil }},
		{name: "default", dial: retrier(grpcbackoff.DefaultPolicy())},
		{name: "attempt-timeout", dial: retrier(policy(time.Second))},
		// A service's hedging entry hedges the methods known safe to send
		// twice: the interop service's descriptor says nothing of them.
		{name: "hedged", dial: retrier(grpcbackoff.DefaultPolicy(), interceptor.WithSafety(service, interceptor.Idempotent),
			interceptor.WithHedging(service, grpcbackoff.Hedging{MaxAttempts: 3, Delay: time.Second}))},
		{name: "hedge-in-flight", slow: 10 * time.Millisecond, dial: retrier(grpcbackoff.DefaultPolicy(), interceptor.WithSafety(service, interceptor.Idempotent),
			interceptor.WithHedging(service, grpcbackoff.Hedging{MaxAttempts: 2, Delay: time.Millisecond}))},
		{name: "service-config", dial: func(t *testing.T) []grpc.DialOption {
			sc, err := serviceconfig.Parse([]byte(serviceConfig))
			if err != nil {
				t.Fatal(err)
			}
			return interceptor.DialOptions(grpcbackoff.DefaultPolicy(), interceptor.WithServiceConfig(sc))
		}},
	}
}

// interopCase is one of grpc-go's interop client's test cases; compress
// says it runs again with gzip.
type interopCase struct {
	name     string
	compress bool
	run      func(ctx context.Context, cc *grpc.ClientConn, opts ...grpc.CallOption)
}

// redial makes a new connection to the server of the case running, as
// channel_soak needs; set per case.
type redialKey struct{}

// cases are grpc-go's interop client cases that need neither credentials,
// nor a load balancer of their own (pick_first_unary wants a server that
// fills its server ID; orca_per_rpc and orca_oob an ORCA load balancer).
func cases() []interopCase {
	tc := testgrpc.NewTestServiceClient
	soak := func(newChannel bool) func(context.Context, *grpc.ClientConn, ...grpc.CallOption) {
		return func(ctx context.Context, cc *grpc.ClientConn, _ ...grpc.CallOption) {
			interop.DoSoakTest(ctx, interop.SoakTestConfig{RequestSize: 271828, ResponseSize: 314159,
				PerIterationMaxAcceptableLatency: time.Second, OverallTimeout: 10 * time.Second, NumWorkers: 1, Iterations: 10,
				ChannelForTest: func() (*grpc.ClientConn, func()) {
					if !newChannel {
						return cc, func() {}
					}
					c := ctx.Value(redialKey{}).(func() *grpc.ClientConn)()
					return c, func() { c.Close() }
				}})
		}
	}
	return []interopCase{
		{"empty_unary", true, func(ctx context.Context, cc *grpc.ClientConn, o ...grpc.CallOption) {
			interop.DoEmptyUnaryCall(ctx, tc(cc), o...)
		}},
		{"large_unary", true, func(ctx context.Context, cc *grpc.ClientConn, o ...grpc.CallOption) {
			interop.DoLargeUnaryCall(ctx, tc(cc), o...)
		}},
		{"client_streaming", true, func(ctx context.Context, cc *grpc.ClientConn, o ...grpc.CallOption) {
			interop.DoClientStreaming(ctx, tc(cc), o...)
		}},
		{"server_streaming", true, func(ctx context.Context, cc *grpc.ClientConn, o ...grpc.CallOption) {
			interop.DoServerStreaming(ctx, tc(cc), o...)
		}},
		{"ping_pong", true, func(ctx context.Context, cc *grpc.ClientConn, o ...grpc.CallOption) {
			interop.DoPingPong(ctx, tc(cc), o...)
		}},
		{"empty_stream", true, func(ctx context.Context, cc *grpc.ClientConn, o ...grpc.CallOption) {
			interop.DoEmptyStream(ctx, tc(cc), o...)
		}},
		{"timeout_on_sleeping_server", true, func(ctx context.Context, cc *grpc.ClientConn, o ...grpc.CallOption) {
			interop.DoTimeoutOnSleepingServer(ctx, tc(cc), o...)
		}},
		{"cancel_after_begin", true, func(ctx context.Context, cc *grpc.ClientConn, o ...grpc.CallOption) {
			interop.DoCancelAfterBegin(ctx, tc(cc), o...)
		}},
		{"cancel_after_first_response", true, func(ctx context.Context, cc *grpc.ClientConn, o ...grpc.CallOption) {
			interop.DoCancelAfterFirstResponse(ctx, tc(cc), o...)
		}},
		{"status_code_and_message", true, func(ctx context.Context, cc *grpc.ClientConn, o ...grpc.CallOption) {
			interop.DoStatusCodeAndMessage(ctx, tc(cc), o...)
		}},
		{"special_status_message", true, func(ctx context.Context, cc *grpc.ClientConn, o ...grpc.CallOption) {
			interop.DoSpecialStatusMessage(ctx, tc(cc), o...)
		}},
		{"custom_metadata", true, func(ctx context.Context, cc *grpc.ClientConn, o ...grpc.CallOption) {
			interop.DoCustomMetadata(ctx, tc(cc), o...)
		}},
		{"unimplemented_method", false, func(ctx context.Context, cc *grpc.ClientConn, _ ...grpc.CallOption) {
			interop.DoUnimplementedMethod(ctx, cc)
		}},
		{"unimplemented_service", false, func(ctx context.Context, cc *grpc.ClientConn, _ ...grpc.CallOption) {
			interop.DoUnimplementedService(ctx, testgrpc.NewUnimplementedServiceClient(cc))
		}},
		{"rpc_soak", false, soak(false)},
		{"channel_soak", false, soak(true)},
	}
}

// TestInterop runs every case under every setup, each in a synctest bubble
// on a bufconn listener of its own, with and without gzip.
func TestInterop(t *testing.T) {
	for _, s := range setups() {
		t.Run(s.name, func(t *testing.T) {
			for _, c := range cases() {
				variants := []string{""}
				if c.compress {
					variants = append(variants, "gzip")
				}
				for _, v := range variants {
					name := c.name
					var opts []grpc.CallOption
					if v != "" {
						name += "/" + v
						opts = append(opts, grpc.UseCompressor(gzip.Name))
					}
					t.Run(name, func(t *testing.T) {
						synctest.Test(t, func(t *testing.T) {
							srv := newServer(t, s.slow)
							dialOpts := s.dial(t)
							cc := srv.dial(t, dialOpts)
							redial := func() *grpc.ClientConn { return srv.dial(t, dialOpts) }
							ctx := context.WithValue(t.Context(), redialKey{}, redial)
							runCase(t, func() { c.run(ctx, cc, opts...) })
						})
					})
				}
			}
		})
	}
}

// TestInteropHedgeInFlight checks that the hedge-in-flight setup does what
// its name says: status_code_and_message's calls each send a hedge, which
// the first attempt's answer (UNKNOWN, not retried) cancels; the caller
// still gets the server's error itself (TestInterop).
func TestInteropHedgeInFlight(t *testing.T) {
	var s setup
	for _, x := range setups() {
		if x.name == "hedge-in-flight" {
			s = x
		}
	}
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, s.slow)
		cc := srv.dial(t, s.dial(t))
		runCase(t, func() { interop.DoStatusCodeAndMessage(t.Context(), testgrpc.NewTestServiceClient(cc)) })
		if calls, attempts := srv.calls.Load(), srv.unary.Load(); attempts != 2*calls {
			t.Errorf("the server saw %d unary attempts for %d calls, want 2 each: a hedge in flight", attempts, calls)
		}
	})
}

// runCase runs a case, failing the test with the message of the grpclog
// Fatal that ended it, if one did.
func runCase(t *testing.T, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			msg, ok := r.(failed)
			if !ok {
				panic(r)
			}
			t.Errorf("the case failed: %s", strings.TrimSpace(string(msg)))
		}
	}()
	f()
}

// server is grpc-go's interop server on a bufconn listener, which counts
// the unary calls it saw (by their first attempt) and their attempts.
type server struct {
	lis          *bufconn.Listener
	calls, unary atomic.Int64
}

// newServer starts the interop server; slow delays each unary answer. It
// stops when the test ends.
func newServer(t *testing.T, slow time.Duration) *server {
	s := &server{lis: bufconn.Listen(1 << 20)}
	count := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		s.unary.Add(1)
		if md, _ := metadata.FromIncomingContext(ctx); len(md.Get(interceptor.PreviousAttemptsKey)) == 0 {
			s.calls.Add(1)
		}
		if slow > 0 {
			t := time.NewTimer(slow)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return h(ctx, req)
	}
	// Every stream's status waits a millisecond of the bubble's time, as it
	// would cross a network: grpc-go's client hears a cancellation made
	// after the stream's CloseSend (cancel_after_begin) before a status
	// that crosses no network at all, as on a real one. Without it, 1 run
	// of TestInterop in about 20 under load saw the status first, bare
	// grpc-go included.
	latency := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		err := h(srv, ss)
		t := time.NewTimer(time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ss.Context().Done():
		}
		return err
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(count), grpc.StreamInterceptor(latency))
	testgrpc.RegisterTestServiceServer(srv, interop.NewTestServer())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(s.lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return s
}

// dial returns a connection to s with opts, closed when the test ends.
func (s *server) dial(t *testing.T, opts []grpc.DialOption) *grpc.ClientConn {
	opts = append([]grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return s.lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}, opts...)
	cc, err := grpc.NewClient("passthrough:///bufconn", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}
