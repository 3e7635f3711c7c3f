package interceptor_test

import (
	"context"
	"errors"
	"math"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// newBackend is a scripted server whose first fail attempts fail with code;
// the others succeed.
func newBackend(t *testing.T, code codes.Code, fail int) *bufconntest.Server {
	return bufconntest.NewServer(t, func(_ string, n int) bufconntest.Step {
		if n < fail {
			return bufconntest.Fail(status.Error(code, "backend failure"))
		}
		return bufconntest.Succeed(1)
	})
}

// dialAs connects to b under target ("passthrough:///name"), which is what
// tells backends apart, with opts.
func dialAs(t *testing.T, b *bufconntest.Server, target string, opts ...grpc.DialOption) *grpc.ClientConn {
	dial := b.Dialer()
	base := []grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return dial(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}
	cc, err := grpc.NewClient(target, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func statesOf(r *interceptor.Retrier) map[string]float64 {
	m := make(map[string]float64)
	for _, s := range r.States() {
		m[s.Target] = s.Retries
	}
	return m
}

// One Retrier (one slice of dial options) shared by the clients of two
// backends: an outage of one uses up its own budget only, every ClientConn
// to one backend shares that backend's budget, and the budget outlives the
// ClientConns: a new one to the backend finds it as they left it.
// (Re-derived for issue 27: closed ClientConns left nothing behind, and a
// new one started with a full budget.)
func TestBudgetPerBackend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, err := interceptor.New(bufconntest.Exact(), testService, interceptor.WithThrottle(grpcbackoff.Throttle{Ratio: 0, PerSecond: 0, Burst: 3}))
		if err != nil {
			t.Fatal(err)
		}
		down := newBackend(t, codes.Unavailable, 1<<40)
		up := newBackend(t, codes.Unavailable, 2)
		a1 := dialAs(t, down, "passthrough:///backend-a", r.DialOptions()...)
		a2 := dialAs(t, down, "passthrough:///backend-a", r.DialOptions()...)
		b := dialAs(t, up, "passthrough:///backend-b", r.DialOptions()...)
		ctx := t.Context()

		if _, err := testgrpc.NewTestServiceClient(b).UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
			t.Fatalf("call to the healthy backend: %v, want success after two retries", err)
		}
		if n := int64(up.Count()); n != 3 {
			t.Errorf("healthy backend saw %d attempts, want 3", n)
		}
		if got := statesOf(r); got["passthrough:///backend-b"] != 2 || len(got) != 1 {
			t.Errorf("States() = %v, want backend-b 2 after a retry that failed and one that succeeded (given back)", got)
		}

		_, err = testgrpc.NewTestServiceClient(a1).UnaryCall(ctx, &testgrpc.SimpleRequest{})
		var ge *grpcbackoff.Error
		if !errors.As(err, &ge) || ge.Attempts != 4 || ge.Reason != grpcbackoff.ReasonThrottled {
			t.Fatalf("first call to the broken backend: err = %v, want 4 attempts (3 retries paid) then throttled", err)
		}
		_, err = testgrpc.NewTestServiceClient(a2).UnaryCall(ctx, &testgrpc.SimpleRequest{})
		if !errors.As(err, &ge) || ge.Attempts != 1 || ge.Reason != grpcbackoff.ReasonThrottled {
			t.Fatalf("call on another ClientConn to the broken backend: err = %v, want 1 attempt then throttled (one budget per backend)", err)
		}
		if got := statesOf(r); got["passthrough:///backend-a"] != 0 || got["passthrough:///backend-b"] != 2 || len(got) != 2 {
			t.Fatalf("States() = %v, want backend-a 0 and backend-b still 2", got)
		}
		if _, err := testgrpc.NewTestServiceClient(b).UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
			t.Errorf("call to the healthy backend during the other's outage: %v", err)
		}

		a1.Close()
		synctest.Wait()
		if got := statesOf(r); len(got) != 2 {
			t.Errorf("States() = %v after one of backend-a's two ClientConns closed, want both backends", got)
		}
		a2.Close()
		b.Close()
		synctest.Wait()
		if got := statesOf(r); got["passthrough:///backend-a"] != 0 || got["passthrough:///backend-b"] != 2 || len(got) != 2 {
			t.Errorf("States() = %v after every ClientConn closed, want both backends as they were", got)
		}
		a3 := dialAs(t, down, "passthrough:///backend-a", r.DialOptions()...)
		_, err = testgrpc.NewTestServiceClient(a3).UnaryCall(ctx, &testgrpc.SimpleRequest{})
		if !errors.As(err, &ge) || ge.Attempts != 1 || ge.Reason != grpcbackoff.ReasonThrottled {
			t.Errorf("call on a new ClientConn to the broken backend: err = %v, want 1 attempt then throttled (its budget is still spent)", err)
		}
	})
}

// closePolicy waits 1, 2, 4, 8, 16 s, then 32 s from 31 s to 63 s.
func closePolicy() grpcbackoff.Policy {
	p := bufconntest.Exact()
	p.MaxAttempts = 10
	return p
}

func checkClosing(t *testing.T, err error, start time.Time) {
	t.Helper()
	if got := time.Since(start); got != 40*time.Second {
		t.Errorf("call returned after %v, want 40s (at Close, during the 32 s wait)", got)
	}
	st := status.Convert(err)
	if st.Code() != codes.Canceled || st.Message() == "" {
		t.Errorf("err = %v, want CANCELED", err)
	}
	var ge *grpcbackoff.Error
	if !errors.As(err, &ge) || ge.Attempts != 6 || ge.Reason != grpcbackoff.ReasonCanceled ||
		status.Convert(ge.Err).Message() != "grpc: the client connection is closing" {
		t.Errorf("err = %#v, want a *grpcbackoff.Error of 6 attempts, ReasonCanceled, wrapping grpc's \"client connection is closing\"", err)
	}
}

func TestCloseEndsUnaryWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		down := newBackend(t, codes.Unavailable, 1<<40)
		cc := dialAs(t, down, "passthrough:///down", interceptor.DialOptions(closePolicy(), testService, interceptor.WithoutThrottle())...)
		time.AfterFunc(40*time.Second, func() { cc.Close() })
		start := time.Now()
		_, err := testgrpc.NewTestServiceClient(cc).UnaryCall(t.Context(), &testgrpc.SimpleRequest{})
		checkClosing(t, err, start)
		// What a plain call (no interceptor) on a closed connection gets.
		plainCC := dialAs(t, down, "passthrough:///down")
		plainCC.Close()
		_, plain := testgrpc.NewTestServiceClient(plainCC).UnaryCall(t.Context(), &testgrpc.SimpleRequest{})
		if got, want := status.Convert(err), status.Convert(plain); got.Code() != want.Code() || !strings.HasPrefix(got.Message(), want.Message()) {
			t.Errorf("err = %v, want what a plain call on a closed connection gets: %v", err, plain)
		}
	})
}

func TestCloseEndsStreamWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		down := newBackend(t, codes.Unavailable, 1<<40)
		cc := dialAs(t, down, "passthrough:///down", interceptor.DialOptions(closePolicy(), testService, interceptor.WithoutThrottle())...)
		time.AfterFunc(40*time.Second, func() { cc.Close() })
		start := time.Now()
		st, err := testgrpc.NewTestServiceClient(cc).StreamingOutputCall(t.Context(), &testgrpc.StreamingOutputCallRequest{})
		if err == nil {
			_, err = st.Recv()
		}
		checkClosing(t, err, start)
	})
}

// Calls made without a ClientConn share the state of target "", and a
// Retrier without a throttle reports +Inf retries.
func TestStatesWithoutConnOrThrottle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, err := interceptor.New(bufconntest.Exact(), testService, interceptor.WithThrottle(grpcbackoff.Throttle{Ratio: 0, PerSecond: 0, Burst: 5}))
		if err != nil {
			t.Fatal(err)
		}
		if got := r.States(); len(got) != 0 {
			t.Errorf("States() before any call = %v, want none", got)
		}
		s := &script{errs: bufconntest.Unavailable(2)}
		if err := r.Unary()(t.Context(), "/pkg.Svc/Get", "req", new(string), nil, s.invoke); err != nil {
			t.Fatal(err)
		}
		if got := r.States(); len(got) != 1 || got[0] != (interceptor.TargetState{Target: "", Retries: 4}) {
			t.Errorf("States() = %v, want target \"\" with 4 retries left (the retry that succeeded costs nothing)", got)
		}

		free, err := interceptor.New(bufconntest.Exact(), testService, interceptor.WithoutThrottle())
		if err != nil {
			t.Fatal(err)
		}
		down := newBackend(t, codes.Unavailable, 1)
		cc := dialAs(t, down, "passthrough:///free", free.DialOptions()...)
		if _, err := testgrpc.NewTestServiceClient(cc).UnaryCall(t.Context(), &testgrpc.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
		if got := free.States(); len(got) != 1 || got[0].Target != "passthrough:///free" || !math.IsInf(got[0].Retries, 1) {
			t.Errorf("States() without a throttle = %v, want +Inf retries", got)
		}
	})
}

// TestCloseEndsAttemptInFlight: cc.Close() ends a call while its retried
// attempt, or a hedge, is in flight; the call reports ReasonCanceled, as one
// Close finds waiting does. Before issue 20 it reported "code not
// retryable", a give-up.
func TestCloseEndsAttemptInFlight(t *testing.T) {
	hang := func(ctx context.Context, n int) error {
		if n == 0 {
			return status.Error(codes.Unavailable, "down")
		}
		<-ctx.Done()
		return ctx.Err()
	}
	cases := []struct {
		name     string
		opts     []interceptor.Option
		act      func(context.Context, int) error
		attempts int
	}{
		{"retried attempt", nil, hang, 2},
		{"committed after a retry", nil, nil, 2},
		{"hedge", []interceptor.Option{interceptor.WithHedging("/grpc.testing.TestService/UnaryCall", grpcbackoff.Hedging{MaxAttempts: 2, Delay: time.Second})},
			func(ctx context.Context, _ int) error { <-ctx.Done(); return ctx.Err() }, 2},
	}
	for _, tc := range cases {
		for _, k := range []callKind{unary, serverStream, bidi} {
			if tc.name == "hedge" && k != unary {
				continue
			}
			t.Run(tc.name+"/"+k.String(), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					srv := newFaultyServer(t, tc.act, respSize(1))
					if tc.act == nil { // a retry, then headers and no answer
						srv = bufconntest.NewServer(t, bufconntest.Steps(failWith(codes.Unavailable), bufconntest.Step{Header: true, Hang: true}))
					}
					rec := &recorder{}
					cc := srv.Conn(t, interceptor.DialOptions(bufconntest.Exact(), append(tc.opts, interceptor.WithoutThrottle(), interceptor.WithObserver(rec), testService)...)...)
					time.AfterFunc(5*time.Second, func() { cc.Close() })
					err := runCall(t.Context(), testgrpc.NewTestServiceClient(cc), k, []string{"q"}, howToRun{}).Err
					var ge *grpcbackoff.Error
					if !errors.As(err, &ge) || ge.Reason != grpcbackoff.ReasonCanceled || ge.Attempts != tc.attempts || status.Code(err) != codes.Canceled {
						t.Errorf("err = %v, want a *grpcbackoff.Error of %d attempts, CANCELED, ReasonCanceled", err, tc.attempts)
					}
					if len(rec.ends) != 1 || rec.ends[0].Reason != grpcbackoff.ReasonCanceled {
						t.Errorf("ends = %+v, want one, ReasonCanceled", rec.ends)
					}
				})
			})
		}
	}
}
