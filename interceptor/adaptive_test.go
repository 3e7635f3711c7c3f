package interceptor_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/platformkit/grpcbackoff/internal/bufconntest"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/serviceconfig"
)

func adaptiveRetrier(t *testing.T, p grpcbackoff.Policy, opts ...interceptor.Option) *interceptor.Retrier {
	t.Helper()
	r, err := interceptor.New(p, append([]interceptor.Option{interceptor.WithoutThrottle(),
		interceptor.WithAdaptiveThrottle(grpcbackoff.AdaptiveThrottle{K: 2, Window: time.Minute})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func rejectedLocally(err error) (*grpcbackoff.Error, bool) {
	var e *grpcbackoff.Error
	return e, errors.As(err, &e) && e.Reason == grpcbackoff.ReasonRejectedLocally
}

// TestAdaptiveThrottleRejectsLocally: once most requests fail with
// UNAVAILABLE, calls are rejected before the network with UNAVAILABLE and
// ReasonRejectedLocally, Attempts 0, and observers are told; Critical calls
// still go through.
func TestAdaptiveThrottleRejectsLocally(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := bufconntest.Exact()
		p.MaxAttempts = 1
		obs := &recorder{}
		ic := adaptiveRetrier(t, p, interceptor.WithObserver(obs)).Unary()
		s := &script{errs: append(make([]error, 10), bufconntest.Unavailable(1000)...)}
		for i := range 10 {
			if err := call(t.Context(), t, ic, s); err != nil {
				t.Fatalf("healthy call %d: %v", i, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		rejected := 0
		for i := range 200 {
			before := len(s.times)
			err := call(t.Context(), t, ic, s)
			time.Sleep(100 * time.Millisecond)
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("failing call %d: code %v, want UNAVAILABLE", i, status.Code(err))
			}
			e, ok := rejectedLocally(err)
			if !ok {
				continue
			}
			rejected++
			if len(s.times) != before {
				t.Fatalf("call %d rejected locally reached the invoker", i)
			}
			if e.Attempts != 0 {
				t.Errorf("rejected call: Attempts %d, want 0", e.Attempts)
			}
			if i < 10 {
				t.Errorf("call %d rejected while requests (%d) ≤ K·accepts (20)", i, 10+i)
			}
		}
		// Sent: the first 11 failures at least, then a share that falls as
		// requests pile up with no accepts.
		if rejected < 100 || rejected > 189 {
			t.Errorf("%d of 200 failing calls rejected locally, want between 100 and 189", rejected)
		}
		n := 0
		for _, e := range obs.ends {
			if e.Reason == grpcbackoff.ReasonRejectedLocally && e.Code == codes.Unavailable && e.Attempts == 0 {
				n++
			}
		}
		if n != rejected {
			t.Errorf("observers told of %d local rejections, want %d", n, rejected)
		}
		before := len(s.times)
		for range 50 {
			if _, ok := rejectedLocally(call(t.Context(), t, ic, s, interceptor.Critical())); ok {
				t.Fatal("a Critical call was rejected locally")
			}
		}
		if sent := len(s.times) - before; sent != 50 {
			t.Errorf("%d of 50 Critical calls reached the invoker, want 50", sent)
		}
	})
}

// TestAdaptiveThrottleCountsApplicationErrorsAsAccepted: a backend that
// answers every call with an application error is not throttled.
func TestAdaptiveThrottleCountsApplicationErrorsAsAccepted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ic := adaptiveRetrier(t, bufconntest.Exact()).Unary()
		errs := make([]error, 500)
		for i := range errs {
			errs[i] = status.Error([]codes.Code{codes.NotFound, codes.Internal, codes.InvalidArgument, codes.FailedPrecondition}[i%4], "no")
		}
		s := &script{errs: errs}
		for i := range 500 {
			if _, ok := rejectedLocally(call(t.Context(), t, ic, s)); ok {
				t.Fatalf("call %d rejected locally, but every call got an answer", i)
			}
		}
	})
}

// TestAdaptiveThrottleRejectsRetries: retries are asked of the adaptive
// throttle too; a rejected retry ends the call with its last error and
// ReasonRejectedLocally. Critical calls, and their retries, are exempt.
func TestAdaptiveThrottleRejectsRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := bufconntest.Exact()
		p.MaxAttempts = 2
		ic := adaptiveRetrier(t, p).Unary()
		sent := 0
		// Critical calls succeed (accepted, keeping the probability near
		// 1/3); the others fail with UNAVAILABLE.
		invoke := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
			sent++
			for _, o := range opts {
				if o == interceptor.Critical() {
					return nil
				}
			}
			return status.Error(codes.Unavailable, "down")
		}
		retriesRejected := 0
		for range 300 {
			if err := ic(t.Context(), "/pkg.Svc/Get", nil, nil, nil, invoke, interceptor.Critical()); err != nil {
				t.Fatalf("critical call: %v", err)
			}
			before := sent
			err := ic(t.Context(), "/pkg.Svc/Get", nil, nil, nil, invoke)
			if e, ok := rejectedLocally(err); ok && e.Attempts == 1 {
				retriesRejected++
				if sent-before != 1 {
					t.Fatalf("a call whose retry was rejected sent %d attempts, want 1", sent-before)
				}
				if status.Code(err) != codes.Unavailable || !errors.Is(err, e.Err) || e.Err.Error() != status.Error(codes.Unavailable, "down").Error() {
					t.Fatalf("rejected retry: error %v, want the last attempt's", err)
				}
			}
		}
		if retriesRejected < 10 {
			t.Errorf("%d retries rejected locally in 300 calls, want at least 10", retriesRejected)
		}
	})
}

// TestAdaptiveThrottleStreams: a stream is rejected before its first
// attempt like a unary call, and its failed attempts count.
func TestAdaptiveThrottleStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := bufconntest.Exact()
		p.MaxAttempts = 1
		sic := adaptiveRetrier(t, p).Stream()
		opened := 0
		streamer := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			opened++
			return nil, status.Error(codes.Unavailable, "down")
		}
		rejected := 0
		for range 100 {
			before := opened
			_, err := sic(t.Context(), &grpc.StreamDesc{ServerStreams: true}, nil, "/pkg.Svc/Watch", streamer)
			if _, ok := rejectedLocally(err); ok {
				rejected++
				if opened != before {
					t.Fatal("a stream rejected locally was opened")
				}
			}
		}
		if rejected < 50 {
			t.Errorf("%d of 100 failing streams rejected locally, want at least 50", rejected)
		}
	})
}

func TestAdaptiveThrottleOptions(t *testing.T) {
	_, err := interceptor.New(bufconntest.Exact(), interceptor.WithAdaptiveThrottle(grpcbackoff.AdaptiveThrottle{K: 0.5, Window: time.Minute}))
	if err == nil || err.Error() != "interceptor: opts[0]: grpcbackoff: AdaptiveThrottle.K (0.5) must be a finite number ≥ 1" {
		t.Errorf("New with K 0.5: %v, want the field named", err)
	}
}

func TestUnarySuccessAllocatesNothingUnderAdaptiveThrottle(t *testing.T) {
	invoke := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	ic := interceptor.Unary(grpcbackoff.DefaultPolicy(), interceptor.WithAdaptiveThrottle(grpcbackoff.DefaultAdaptiveThrottle()))
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() { ic(ctx, "/pkg.Svc/Get", nil, nil, nil, invoke) }); n != 0 {
		t.Errorf("a successful call allocates %v times, want 0", n)
	}
}

// TestAdaptiveThrottleOffByDefault: without WithAdaptiveThrottle no call is
// rejected locally, however many fail (the decision and its figures are in
// cmd/fleetsim/README.md).
func TestAdaptiveThrottleOffByDefault(t *testing.T) {
	p := bufconntest.Exact()
	p.MaxAttempts = 1
	ic := interceptor.Unary(p)
	s := &script{errs: bufconntest.Unavailable(1000)}
	for i := range 1000 {
		if _, ok := rejectedLocally(call(context.Background(), t, ic, s)); ok {
			t.Fatalf("call %d rejected locally by a default Retrier", i)
		}
	}
	if len(s.times) != 1000 {
		t.Errorf("%d of 1000 calls reached the invoker, want all", len(s.times))
	}
}

// TestAdaptiveThrottleIgnoresCallerCancellations: a healthy backend (each
// call answers after 100 ms) and an application that cancels 70% of its
// calls first, at 50 ms, with the default AdaptiveThrottle. The backend
// refused nothing, so no call is rejected locally. Before issue 20 the
// cancellations counted as refusals: 1931 of 2000 calls were rejected.
func TestAdaptiveThrottleIgnoresCallerCancellations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, err := interceptor.New(bufconntest.Exact(), interceptor.WithAdaptiveThrottle(grpcbackoff.DefaultAdaptiveThrottle()))
		if err != nil {
			t.Fatal(err)
		}
		slow := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
			select {
			case <-time.After(100 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return status.FromContextError(ctx.Err()).Err()
			}
		}
		rejected, sent := 0, 0
		for i := range 2000 {
			ctx, cancel := context.WithCancel(t.Context())
			if i%10 < 7 {
				time.AfterFunc(50*time.Millisecond, cancel)
			}
			err := r.Unary()(ctx, "/pkg.Svc/Get", "req", new(string), nil, func(ctx context.Context, m string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
				sent++
				return slow(ctx, m, req, reply, cc, opts...)
			})
			cancel()
			if _, ok := rejectedLocally(err); ok {
				rejected++
			}
		}
		if rejected != 0 || sent != 2000 {
			t.Errorf("%d of 2000 calls rejected locally, %d sent; want none rejected", rejected, sent)
		}
	})
}

// TestAdaptiveThrottleCountsDeadlines: a hung backend, which answers
// nothing, called every 100 ms for a minute, each call bounded by the
// caller's 1 s deadline, by a service config's timeout of 1 s, or by an
// AttemptTimeout of 1 s. An attempt ended by a deadline before any answer is
// not accepted, as the SRE book's client counts it, so the calls are soon
// rejected locally: at most 20 of 600 reach the backend. (Re-derived for
// issue 27, which found 600 of 600 reaching it under a deadline: the
// caller's deadline was not counted; it replaces
// TestAdaptiveThrottleIgnoresCallerDeadline.)
func TestAdaptiveThrottleCountsDeadlines(t *testing.T) {
	sc, err := serviceconfig.Parse([]byte(`{"methodConfig": [{"name": [{"service": "pkg.Svc"}], "timeout": "1s"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	cut := bufconntest.Exact()
	cut.AttemptTimeout, cut.MaxAttempts = time.Second, 1
	for _, tc := range []struct {
		name     string
		policy   grpcbackoff.Policy
		opts     []interceptor.Option
		deadline bool
	}{
		{"the caller's deadline", bufconntest.Exact(), nil, true},
		{"a service config's timeout", bufconntest.Exact(), []interceptor.Option{interceptor.WithServiceConfig(sc)}, false},
		{"AttemptTimeout", cut, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, err := interceptor.New(tc.policy, append(tc.opts, interceptor.WithAdaptiveThrottle(grpcbackoff.DefaultAdaptiveThrottle()),
					interceptor.WithoutThrottle())...)
				if err != nil {
					t.Fatal(err)
				}
				var reached atomic.Int64
				hung := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
					reached.Add(1)
					<-ctx.Done()
					return status.FromContextError(ctx.Err()).Err()
				}
				var wg sync.WaitGroup
				for range 600 {
					wg.Go(func() {
						ctx := t.Context()
						if tc.deadline {
							var cancel context.CancelFunc
							ctx, cancel = context.WithTimeout(ctx, time.Second)
							defer cancel()
						}
						r.Unary()(ctx, "/pkg.Svc/Get", "req", new(string), nil, hung)
					})
					time.Sleep(100 * time.Millisecond)
				}
				wg.Wait()
				t.Logf("%d of 600 calls reached the hung backend", reached.Load())
				// The throttle admits at random: 10 to 24 of 600, 16 on
				// average, in 900 runs (the first second's 10 calls, before any
				// failure is counted, then about one in the requests seen).
				// Not counting the cut attempts, 600 of 600 reach it.
				if n := reached.Load(); n > 40 {
					t.Errorf("%d of 600 calls reached the hung backend, want at most 40", n)
				}
			})
		})
	}
}
