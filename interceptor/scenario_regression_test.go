package interceptor_test

// Regressions found by a review of the merged interceptor: hedging and a
// call marked not idempotent, hedging and response headers, hedges and
// adaptive throttling, a typed nil reply, a server's own DEADLINE_EXCEEDED
// under an AttemptTimeout, and short-lived ClientConns.

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// Many short-lived ClientConns to one target share its one state, which
// outlives them; short-lived ClientConns to ever new targets keep at most
// maxTargets states, and leave no goroutine behind. (Re-derived for issue
// 27: a target's state went with its last ClientConn.)
func TestShortLivedConnsShareOneState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer interceptor.SetMaxTargets(8)()
		r, err := interceptor.New(bufconntest.Exact())
		if err != nil {
			t.Fatal(err)
		}
		b := newBackend(t, codes.Unavailable, 0)
		call := func(target string) {
			cc := dialAs(t, b, target, r.DialOptions()...)
			if _, err := testgrpc.NewTestServiceClient(cc).UnaryCall(t.Context(), &testgrpc.SimpleRequest{}); err != nil {
				t.Fatal(err)
			}
			cc.Close()
		}
		for range 20 {
			call("passthrough:///x")
		}
		synctest.Wait()
		if got := r.States(); len(got) != 1 || got[0].Target != "passthrough:///x" {
			t.Errorf("States after 20 ClientConns to one target = %v, want its one state", got)
		}
		for i := range 100 {
			call(fmt.Sprintf("passthrough:///t%d", i))
		}
		synctest.Wait()
		if got := r.States(); len(got) > 8 {
			t.Errorf("States after 100 ClientConns to as many targets: %d states, want at most 8", len(got))
		}
	})
}

// Adaptive throttling must count hedged attempts.
func TestHedgesCountForAdaptiveThrottling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, hedged := range []bool{false, true} {
			opts := []interceptor.Option{interceptor.WithAdaptiveThrottle(grpcbackoff.DefaultAdaptiveThrottle()), interceptor.WithoutThrottle()}
			if hedged {
				opts = append(opts, interceptor.WithHedging("/pkg.Svc/", grpcbackoff.Hedging{MaxAttempts: 2, Delay: time.Second, NonFatalCodes: []codes.Code{codes.Internal}}))
			}
			r, err := interceptor.New(bufconntest.Exact(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			inv := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
				return status.Error(codes.Unavailable, "overloaded")
			}
			sent := 0
			for i := 0; i < 200; i++ {
				var err error
				if !hedged {
					err = r.Unary()(t.Context(), "/pkg.Svc/Get", "req", new(string), nil, inv, interceptor.NoRetry())
				}
				if hedged {
					err = r.Unary()(t.Context(), "/pkg.Svc/Get", "req", new(string), nil, inv)
				}
				if status.Convert(err).Message() != "grpcbackoff: call not sent: the backend has been refusing most requests" {
					sent++
				}
			}
			st := r.States()
			if st[0].RejectProbability == 0 {
				t.Errorf("hedged=%v: RejectProbability 0 after 200 UNAVAILABLE calls", hedged)
			}
		}
	})
}

// A call marked CallNotIdempotent must not be sent twice by hedging.
func TestHedgeNeverSendsACallNotIdempotentTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, err := interceptor.New(bufconntest.Exact(), interceptor.WithHedging("/pkg.Svc/", grpcbackoff.Hedging{MaxAttempts: 3, Delay: time.Second}))
		if err != nil {
			t.Fatal(err)
		}
		var n atomic.Int32
		inv := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
			if n.Add(1) == 1 {
				select {
				case <-time.After(5 * time.Second):
				case <-ctx.Done():
					return status.FromContextError(ctx.Err()).Err()
				}
			}
			return nil
		}
		err = r.Unary()(t.Context(), "/pkg.Svc/Charge", "req", new(string), nil, inv, interceptor.CallNotIdempotent())
		if n.Load() != 1 {
			t.Errorf("CallNotIdempotent call sent %d times (hedged), err %v", n.Load(), err)
		}
	})
}

func TestHedgeTypedNilReply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, err := interceptor.New(bufconntest.Exact(), interceptor.WithHedging("/pkg.Svc/", grpcbackoff.Hedging{MaxAttempts: 2, Delay: time.Second}))
		if err != nil {
			t.Fatal(err)
		}
		var n atomic.Int32
		inv := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
			if n.Add(1) == 1 {
				<-ctx.Done()
				return status.FromContextError(ctx.Err()).Err()
			}
			return nil
		}
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("panic: %v", p)
			}
		}()
		// A typed nil reply cannot take a hedge's answer: the call is not
		// hedged, and its one attempt ends with the caller's deadline.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		err = r.Unary()(ctx, "/pkg.Svc/Get", "req", (*testgrpc.SimpleResponse)(nil), nil, inv)
		if n.Load() != 1 || status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("%d attempts, %v; want 1, DEADLINE_EXCEEDED", n.Load(), err)
		}
	})
}

// A server's own DEADLINE_EXCEEDED, returned at once, is not a cut by
// AttemptTimeout: with Codes = [UNAVAILABLE] it must not be retried.
func TestUnaryServerDeadlineIsNotACut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := bufconntest.Exact()
		p.Codes = []codes.Code{codes.Unavailable}
		p.AttemptTimeout = 10 * time.Second
		r, err := interceptor.New(p)
		if err != nil {
			t.Fatal(err)
		}
		s := &script{errs: []error{status.Error(codes.DeadlineExceeded, "downstream deadline"), status.Error(codes.DeadlineExceeded, "downstream deadline")}}
		err = call(t.Context(), t, r.Unary(), s)
		if len(s.times) != 1 {
			t.Errorf("attempts = %d for a server DEADLINE_EXCEEDED at 0s (not a cut), err %v", len(s.times), err)
		}
	})
}

func TestHedgeCommitsOnHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, hedged := range []bool{false, true} {
			srv := bufconntest.NewServer(t, bufconntest.Steps(bufconntest.Step{Header: true,
				Err: status.Error(codes.Unavailable, "failed after headers")}))
			var opts []interceptor.Option
			if hedged {
				opts = append(opts, interceptor.WithHedging("/grpc.testing.TestService/UnaryCall",
					grpcbackoff.Hedging{MaxAttempts: 3, Delay: time.Second, NonFatalCodes: []codes.Code{codes.Unavailable}}))
			}
			r, err := interceptor.New(bufconntest.Exact(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			cc := srv.Conn(t, r.DialOptions()...)
			var hdr metadata.MD
			_, err = testgrpc.NewTestServiceClient(cc).UnaryCall(t.Context(), &testgrpc.SimpleRequest{}, grpc.Header(&hdr))
			if srv.Count() != 1 || status.Code(err) != codes.Unavailable || hdr.Get(bufconntest.AttemptKey) == nil {
				t.Errorf("hedged=%v: server saw %d attempts, call ended with %v and headers %v; want 1 attempt, committed by its headers, UNAVAILABLE",
					hedged, srv.Count(), err, hdr)
			}
			cc.Close()
		}
	})
}
