package interceptor_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// boom is the value the code under the library panics with.
type boom struct{ where string }

// raised calls f and returns what it panicked with, if it did.
func raised(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

// A panic in an interceptor chained after the library's, on a goroutine of
// the library (a hedged attempt's), is raised again on the caller's
// goroutine with the same value, as it would reach the caller without the
// library, once the other attempts ended; the ClientConn stays usable.
// (Issue 27: the process exited.)
func TestPanicOnHedgedAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := bufconntest.NewServer(t, bufconntest.Steps(bufconntest.Step{Pause: time.Second, Send: 1}))
		var attempts atomic.Int32
		panicky := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if attempts.Add(1) == 2 {
				panic(boom{"hedge"})
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		opts := append(interceptor.DialOptions(bufconntest.Exact(),
			interceptor.WithHedging("/grpc.testing.TestService/UnaryCall", grpcbackoff.Hedging{MaxAttempts: 2, Delay: 100 * time.Millisecond})),
			grpc.WithChainUnaryInterceptor(panicky))
		c := srv.Client(t, opts...)
		v := raised(func() { c.UnaryCall(t.Context(), &testgrpc.SimpleRequest{}) })
		if v != (boom{"hedge"}) {
			t.Errorf("the call raised %v, want the hedge's panic", v)
		}
		if _, err := c.UnaryCall(t.Context(), &testgrpc.SimpleRequest{}); err != nil {
			t.Errorf("a later call: %v", err)
		}
	})
}

// panickyStreams is a stream interceptor, chained after the library's, whose
// stream number n panics in its SendMsg.
func panickyStreams(n int32) grpc.StreamClientInterceptor {
	var streams atomic.Int32
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || streams.Add(1) != n {
			return cs, err
		}
		return panicSend{cs}, nil
	}
}

type panicSend struct{ grpc.ClientStream }

func (panicSend) SendMsg(any) error { panic(boom{"replay"}) }

// A panic in the code under the library during a stream's replay, on the
// replay's own goroutine, is raised again on the caller's goroutine by its
// current operation (the receive that retried), and by every later one,
// with the same value; no lock is left held. (Issue 27: the process exited,
// with "sync: unlock of unlocked mutex".)
func TestPanicDuringReplay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := bufconntest.NewServer(t, bufconntest.Steps(failWith(codes.Unavailable), bufconntest.Step{Recv: bufconntest.UntilHalfClose, Echo: true}))
		opts := append(interceptor.DialOptions(bufconntest.Exact(), testService), grpc.WithChainStreamInterceptor(panickyStreams(2)))
		s, err := srv.Client(t, opts...).FullDuplexCall(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range messages(2) {
			if err := s.Send(outputRequest(m)); err != nil {
				t.Fatal(err)
			}
		}
		if v := raised(func() { s.Recv() }); v != (boom{"replay"}) {
			t.Errorf("Recv raised %v, want the replay's panic", v)
		}
		if v := raised(func() { s.Send(outputRequest("m2")) }); v != (boom{"replay"}) {
			t.Errorf("a later Send raised %v, want the replay's panic", v)
		}
		if v := raised(func() { s.Header() }); v != (boom{"replay"}) {
			t.Errorf("a later Header raised %v, want the replay's panic", v)
		}
	})
}
