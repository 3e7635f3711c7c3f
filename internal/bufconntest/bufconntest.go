// Package bufconntest holds the gRPC fixtures of this repository's tests:
// a scripted TestService (Server) on private in-memory listeners or loopback
// TCP, a counting Invoker, and a fault-injecting Proxy in front of the real
// APIs' in-process fakes. Nothing is left running when a test ends (inside a
// testing/synctest bubble too).
package bufconntest

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

// Listen returns a new in-memory listener.
func Listen() *bufconn.Listener { return bufconn.Listen(1 << 20) }

// Serve serves srv on lis until the test ends; then it stops srv, which
// waits for its handlers if srv was built with grpc.WaitForHandlers(true),
// closes lis, and waits for Serve to return.
func Serve(tb testing.TB, srv *grpc.Server, lis net.Listener) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis) // nil after Stop
	}()
	tb.Cleanup(func() {
		srv.Stop()
		_ = lis.Close()
		<-done
	})
}

// Dial returns a connection that reaches its server through dial (such as a
// bufconn listener's DialContext), with opts added; it is closed when the
// test ends. It panics if the connection cannot be made, like the helpers of
// net/http/httptest.
func Dial(tb testing.TB, dial func(context.Context) (net.Conn, error), opts ...grpc.DialOption) *grpc.ClientConn {
	base := []grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return dial(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}
	cc, err := grpc.NewClient("passthrough:///bufconn", append(base, opts...)...)
	if err != nil {
		panic(err)
	}
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}
