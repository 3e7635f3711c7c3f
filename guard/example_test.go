package guard_test

import (
	"context"
	"fmt"
	"log"
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
	"github.com/platformkit/grpcbackoff/guard"
	"github.com/platformkit/grpcbackoff/interceptor"
)

// A guarded server whose every call fails once, then is served: a flaky
// but healthy server. A count of retries would see half of the attempts
// retry, five times the guard's 10% share, and refuse them; but each retry
// is served, and a retry served costs nothing: the guard lets every one
// through, and every call succeeds.
func Example() {
	g, err := guard.New(guard.Options{})
	if err != nil {
		log.Fatal(err)
	}
	// Flaky: every first try fails with UNAVAILABLE before it reaches the
	// service, every retry is served.
	var attempts atomic.Int64
	flaky := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if attempts.Add(1)%2 == 1 {
			return nil, status.Error(codes.Unavailable, "blip")
		}
		return h(ctx, req)
	})
	srv := grpc.NewServer(append(g.ServerOptions(), flaky)...)
	testgrpc.RegisterTestServiceServer(srv, echo{})
	lis := bufconn.Listen(1 << 20)
	go srv.Serve(lis)
	defer srv.Stop()

	p := grpcbackoff.DefaultPolicy()
	p.Initial, p.Max, p.Jitter = time.Millisecond, time.Millisecond, 0
	conn, err := grpc.NewClient("passthrough:///flaky", append(interceptor.DialOptions(p, interceptor.WithoutThrottle(), interceptor.WithSafety("/grpc.testing.TestService/UnaryCall", interceptor.Idempotent)),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)
	served := 0
	for range 50 {
		if _, err := client.UnaryCall(context.Background(), &testgrpc.SimpleRequest{}); err == nil {
			served++
		}
	}
	s := g.State("/grpc.testing.TestService/UnaryCall")
	fmt.Printf("%d calls served of 50, in %d attempts\n", served, attempts.Load())
	fmt.Printf("retries %d, refunded %d, refused %d, over %v\n", s.Retries, s.Refunded, s.Refused, s.Over)
	// Output:
	// 50 calls served of 50, in 100 attempts
	// retries 50, refunded 50, refused 0, over false
}

// echo is a TestService whose UnaryCall succeeds.
type echo struct {
	testgrpc.UnimplementedTestServiceServer
}

func (echo) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{}, nil
}
