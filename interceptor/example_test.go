package interceptor_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/serviceconfig"
)

// flakyService is a TestService whose first two calls fail with
// UNAVAILABLE, as a server restarting would.
type flakyService struct {
	testgrpc.UnimplementedTestServiceServer
	calls atomic.Int32
}

func (s *flakyService) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if s.calls.Add(1) <= 2 {
		return nil, status.Error(codes.Unavailable, "restarting")
	}
	return &testgrpc.SimpleResponse{}, nil
}

// serve starts srv on an in-memory listener and returns a dialer for it.
func serve(svc testgrpc.TestServiceServer) (dial func(context.Context, string) (net.Conn, error), stop func()) {
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, svc)
	go srv.Serve(lis)
	return func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }, srv.Stop
}

// Every call of a connection retried with the Memorystore recipe (here
// 100 times faster, without jitter, so that the example runs in 300 ms and
// prints the same every time). UnaryCall changes nothing on the server, but
// nothing in its descriptor or its name says so: without WithSafety it
// would be treated as a write, not resent after an UNAVAILABLE the server
// sent (see Safety).
func ExampleDialOptions() {
	svc := &flakyService{}
	dial, stop := serve(svc)
	defer stop()

	p := grpcbackoff.DefaultPolicy()
	p.Initial, p.Max, p.Jitter = 10*time.Millisecond, 320*time.Millisecond, 0
	conn, err := grpc.NewClient("passthrough:///flaky", append(interceptor.DialOptions(p,
		interceptor.WithSafety("/grpc.testing.TestService/UnaryCall", interceptor.Idempotent)),
		grpc.WithContextDialer(dial), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		panic(err)
	}
	defer conn.Close()

	_, err = testgrpc.NewTestServiceClient(conn).UnaryCall(context.Background(), &testgrpc.SimpleRequest{})
	fmt.Println("err:", err, "attempts:", svc.calls.Load())
	// Output: err: <nil> attempts: 3
}

// New returns every bad setting at once, each named with its value; a
// Retrier built from good ones says what each method's calls will do.
func ExampleNew() {
	_, err := interceptor.New(grpcbackoff.Policy{Initial: time.Second, Multiplier: 0.5, MaxAttempts: 8},
		interceptor.WithMethod("pkg.Svc/Get", grpcbackoff.DefaultPolicy()))
	fmt.Println(err)

	reads := grpcbackoff.DefaultPolicy()
	reads.MaxAttempts = 4
	r, err := interceptor.New(grpcbackoff.DefaultPolicy(),
		interceptor.WithMethod("/pkg.Svc/Get", reads),
		interceptor.WithoutRetryFor("/pkg.Svc/Increment"),
		interceptor.WithHedging("/pkg.Svc/List", grpcbackoff.Hedging{MaxAttempts: 2, Delay: 50 * time.Millisecond}))
	if err != nil {
		panic(err)
	}
	for _, m := range []string{"Get", "Increment", "List", "CreateOrder"} {
		fmt.Println(r.Explain("/pkg.Svc/" + m))
	}
	// Output:
	// grpcbackoff: Multiplier (0.5) must be at least 1
	// grpcbackoff: Max (0s) must be positive
	// grpcbackoff: Codes is empty: no code would be retried
	// interceptor: opts[0]: method name "pkg.Svc/Get": want "/pkg.Service/Method" or "/pkg.Service/"
	// /pkg.Svc/Get: up to 4 attempts on UNAVAILABLE, RESOURCE_EXHAUSTED [WithMethod or WithServiceConfig for /pkg.Svc/Get]; idempotent: a standard read by its name (Get, AIP-131); no descriptor registered for pkg.Svc
	// /pkg.Svc/Increment: never retried (WithoutRetryFor, or a service config entry without a retryPolicy, for /pkg.Svc/Increment)
	// /pkg.Svc/List: unary calls hedged, 2 attempts at most in flight, one every 50ms while none answers; failures up to 8 attempts on UNAVAILABLE, RESOURCE_EXHAUSTED [the Retrier's Policy]; idempotent: a standard read by its name (List, AIP-132); no descriptor registered for pkg.Svc
	// /pkg.Svc/CreateOrder: up to 8 attempts on RESOURCE_EXHAUSTED (UNAVAILABLE only when the connection could not be made) [the Retrier's Policy]; not idempotent: treated as a write, resent only when its request carries a request_id (AIP-155): no descriptor registered for pkg.Svc, and its name is no standard read (Get, List, BatchGet, Search)
}

// A client moving from grpc-go's built-in retry keeps its service config:
// serviceconfig.Parse reads it, WithServiceConfig applies it, and Explain
// says what each method's calls then do.
func ExampleWithServiceConfig() {
	sc, err := serviceconfig.Parse([]byte(`{
		"methodConfig": [{
			"name": [{"service": "pkg.Svc", "method": "Get"}],
			"retryPolicy": {
				"maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "1s",
				"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]
			}
		}, {
			"name": [{}]
		}]
	}`))
	if err != nil {
		panic(err)
	}
	r, err := interceptor.New(grpcbackoff.DefaultPolicy(), interceptor.WithServiceConfig(sc))
	if err != nil {
		panic(err)
	}
	fmt.Println(r.Explain("/pkg.Svc/Get"))
	fmt.Println(r.Explain("/pkg.Svc/Put"))
	// Output:
	// /pkg.Svc/Get: up to 4 attempts on UNAVAILABLE [WithMethod or WithServiceConfig for /pkg.Svc/Get]; idempotent: a service config's retryPolicy for it (WithServiceConfig)
	// /pkg.Svc/Put: never retried (no default Policy: WithServiceConfig's default entry has no retryPolicy)
}
