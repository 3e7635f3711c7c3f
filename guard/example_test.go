package guard_test

import (
	"context"
	"errors"
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

// A guarded server in an outage, and a client of this library that makes up
// to 5 attempts per call. Once the server counts 10 retries, more than 10%
// of its attempts (the 8 it has seen, and the 2 it expects: the last
// failures of calls 1 and 2, which it let through), its failures carry
// pushback −1 and the client stops retrying.
func Example() {
	g, err := guard.New(guard.Options{})
	if err != nil {
		log.Fatal(err)
	}
	// An outage: every attempt fails with UNAVAILABLE before it reaches
	// the service.
	var attempts atomic.Int64
	outage := grpc.ChainUnaryInterceptor(func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) {
		attempts.Add(1)
		return nil, status.Error(codes.Unavailable, "down")
	})
	srv := grpc.NewServer(append(g.ServerOptions(), outage)...)
	testgrpc.RegisterTestServiceServer(srv, testgrpc.UnimplementedTestServiceServer{})
	lis := bufconn.Listen(1 << 20)
	go srv.Serve(lis)
	defer srv.Stop()

	p := grpcbackoff.DefaultPolicy()
	p.Initial, p.Max, p.Jitter, p.MaxAttempts = time.Millisecond, time.Millisecond, 0, 5
	conn, err := grpc.NewClient("passthrough:///down", append(interceptor.DialOptions(p, interceptor.WithoutThrottle(), interceptor.WithSafety("/grpc.testing.TestService/UnaryCall", interceptor.Idempotent)),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)
	for call := 1; call <= 4; call++ {
		before := attempts.Load()
		_, err := client.UnaryCall(context.Background(), &testgrpc.SimpleRequest{})
		var e *grpcbackoff.Error
		errors.As(err, &e)
		fmt.Printf("call %d: attempts %d, %v\n", call, attempts.Load()-before, e.Reason)
	}
	fmt.Printf("%+v\n", g.State("/grpc.testing.TestService/UnaryCall"))
	// Output:
	// call 1: attempts 5, attempts exhausted
	// call 2: attempts 5, attempts exhausted
	// call 3: attempts 1, server asked not to retry
	// call 4: attempts 1, server asked not to retry
	// {FirstTries:4 Retries:8 Expected:2 Over:true Refused:2}
}
