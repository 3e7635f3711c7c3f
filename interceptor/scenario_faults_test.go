package interceptor_test

// Faults production brings, on the unary side: an attempt that hangs (cut by
// Policy.AttemptTimeout), a failure after response headers (the call has
// committed), and messages larger than a size limit (no retry can mend
// them). Each runs over bufconn inside a synctest bubble.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// newFaultyServer is a scripted server whose attempt n (from 0) first runs
// act, if not nil: its error ends the attempt; otherwise the attempt answers
// with a response of size() bytes, or two on a stream.
func newFaultyServer(tb testing.TB, act func(ctx context.Context, n int) error, size func() int, opts ...grpc.ServerOption) *bufconntest.Server {
	return bufconntest.NewServer(tb, func(_ string, n int) bufconntest.Step {
		st := bufconntest.Step{Send: 2, Payload: size()}
		if act != nil {
			st.Before = func(ctx context.Context) error { return act(ctx, n) }
		}
		return st
	}, opts...)
}

// respSize is a fixed size of newFaultyServer's responses.
func respSize(n int) func() int { return func() int { return n } }

// fastExact is a policy with short exact waits: 100, 200, 400 ms … over five
// attempts.
func fastExact() grpcbackoff.Policy {
	p := bufconntest.Exact()
	p.Initial, p.Max, p.MaxAttempts = 100*time.Millisecond, time.Second, 5
	return p
}

// headersThenUnavailable sends response headers, then fails with
// UNAVAILABLE: the response is not trailers-only.
func headersThenUnavailable(ctx context.Context, _ int) error {
	if err := grpc.SendHeader(ctx, metadata.Pairs("x-sent", "headers")); err != nil {
		return err
	}
	return status.Error(codes.Unavailable, "headers, then down")
}

// TestUnaryCommitsOnHeaders: once the server sent response headers, a unary
// call is not retried (gRFC A6), side by side with grpc-go's built-in retry
// configured with the same policy; a trailers-only failure, which carries no
// headers, is retried by both.
func TestUnaryCommitsOnHeaders(t *testing.T) {
	const grpcRetry = `{"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}], "retryPolicy": {
		"maxAttempts": 5, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2,
		"retryableStatusCodes": ["UNAVAILABLE"]}}]}`
	cases := []struct {
		name string
		act  func(ctx context.Context, n int) error
		want int // attempts, for both clients
		code codes.Code
	}{
		{"headers, then UNAVAILABLE: committed", headersThenUnavailable, 1, codes.Unavailable},
		{"trailers-only UNAVAILABLE twice: retried", func(_ context.Context, n int) error {
			if n < 2 {
				return status.Error(codes.Unavailable, "down, trailers only")
			}
			return nil
		}, 3, codes.OK},
	}
	clients := map[string]func(*attemptLog) []grpc.DialOption{
		"grpcbackoff": func(a *attemptLog) []grpc.DialOption {
			return append(interceptor.DialOptions(fastExact(), testService, interceptor.WithoutThrottle()), a.dialOptions()...)
		},
		"grpc-go": func(a *attemptLog) []grpc.DialOption {
			return append(a.dialOptions(), grpc.WithDefaultServiceConfig(grpcRetry))
		},
	}
	for _, tc := range cases {
		for name, opts := range clients {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					srv := newFaultyServer(t, tc.act, respSize(1))
					var a attemptLog
					c := srv.Client(t, opts(&a)...)
					var header metadata.MD
					_, err := c.UnaryCall(t.Context(), &testgrpc.SimpleRequest{}, grpc.Header(&header))
					if got := status.Code(err); got != tc.code {
						t.Errorf("code = %v, want %v (%v)", got, tc.code, err)
					}
					if got := srv.Count(); got != tc.want {
						t.Errorf("attempts the server saw = %d, want %d", got, tc.want)
					}
					if tc.code != codes.OK {
						// Committed: the server's error as it is, and its
						// headers reach the caller's grpc.Header.
						var e *grpcbackoff.Error
						if errors.As(err, &e) {
							t.Errorf("err = %v, want the server's error unchanged", err)
						}
						if got := header.Get("x-sent"); len(got) != 1 {
							t.Errorf("grpc.Header got %v, want the server's headers", header)
						}
					}
				})
			})
		}
	}
}

// bigRequest returns a request of n bytes of payload.
func bigRequest(n int) *testgrpc.SimpleRequest {
	return &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: make([]byte, n)}}
}

// TestTooLargeIsNotRetried: a message larger than a size limit fails the
// same way on every attempt, so it returns at once, though
// RESOURCE_EXHAUSTED is a retryable code, and costs the budget nothing: a
// budget of one retry still has it for the next call.
func TestTooLargeIsNotRetried(t *testing.T) {
	const limit = 1 << 10
	cases := []struct {
		name        string
		clientOpts  []grpc.DialOption
		serverOpts  []grpc.ServerOption
		request     int // bytes of request payload
		response    int // bytes of response payload
		stream      bool
		wantHandler int // handler runs
		wantMsg     string
	}{
		{name: "request larger than the client's send limit",
			clientOpts: []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(limit))},
			request:    2 * limit, wantHandler: 0, wantMsg: "trying to send message larger than max"},
		{name: "request larger than the server's receive limit",
			serverOpts: []grpc.ServerOption{grpc.MaxRecvMsgSize(limit)},
			request:    2 * limit, wantHandler: 0, wantMsg: "grpc: received message larger than max"},
		{name: "response larger than the client's receive limit",
			clientOpts: []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(limit))},
			response:   2 * limit, wantHandler: 1, wantMsg: "grpc: received message larger than max"},
		{name: "server stream: response larger than the client's receive limit",
			clientOpts: []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(limit))},
			response:   2 * limit, stream: true, wantHandler: 1, wantMsg: "grpc: received message larger than max"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// The next call, after the too-large one, fails once with
				// UNAVAILABLE and needs the budget's one retry.
				var tooLarge atomic.Bool
				tooLarge.Store(true)
				var size atomic.Int64
				size.Store(int64(tc.response))
				srv := newFaultyServer(t, func(_ context.Context, n int) error {
					if !tooLarge.Load() && n == tc.wantHandler {
						return status.Error(codes.Unavailable, "down once")
					}
					return nil
				}, func() int { return int(size.Load()) }, tc.serverOpts...)
				var a attemptLog
				var retries []interceptor.Retry
				r, err := interceptor.New(fastExact(), testService,
					interceptor.WithThrottle(grpcbackoff.Throttle{Ratio: 0, PerSecond: 0, Burst: 1}),
					interceptor.WithOnRetry(func(r interceptor.Retry) { retries = append(retries, r) }))
				if err != nil {
					t.Fatal(err)
				}
				c := srv.Client(t, append(append(r.DialOptions(), a.dialOptions()...), tc.clientOpts...)...)

				start := time.Now()
				if tc.stream {
					err = recvServerStream(t.Context(), c, tc.request)
				} else {
					_, err = c.UnaryCall(t.Context(), bigRequest(tc.request))
				}
				if got := status.Code(err); got != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), tc.wantMsg) {
					t.Fatalf("err = %v, want RESOURCE_EXHAUSTED %q", err, tc.wantMsg)
				}
				var e *grpcbackoff.Error
				if errors.As(err, &e) {
					t.Errorf("err = %v, want gRPC's error unchanged", err)
				}
				if n := a.count(); n != 1 || time.Since(start) != 0 || len(retries) != 0 {
					t.Errorf("%d attempts over %v, %d retries announced; want 1 attempt at once, none", n, time.Since(start), len(retries))
				}
				if got := srv.Count(); got != tc.wantHandler {
					t.Errorf("server handler ran %d times, want %d", got, tc.wantHandler)
				}

				// The budget still holds its one retry.
				tooLarge.Store(false)
				size.Store(1)
				if tc.stream {
					err = recvServerStream(t.Context(), c, 1)
				} else {
					_, err = c.UnaryCall(t.Context(), bigRequest(1))
				}
				if err != nil || len(retries) != 1 {
					t.Errorf("next call: err = %v after %d retries, want success after 1 (the budget untouched)", err, len(retries))
				}
			})
		})
	}
}

// recvServerStream makes a server stream with a request of n bytes and receives
// until its end.
func recvServerStream(ctx context.Context, c testgrpc.TestServiceClient, n int) error {
	st, err := c.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{Payload: &testgrpc.Payload{Body: make([]byte, n)}})
	if err != nil {
		return err
	}
	for {
		if _, err := st.Recv(); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

// TestQuotaFailureIsRetried: RESOURCE_EXHAUSTED with a QuotaFailure detail
// is a quota or rate limit, not a size limit, and is retried as the Policy
// says: per-minute quotas recover within the recipe's span.
func TestQuotaFailureIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, _ := status.New(codes.ResourceExhausted, "grpc: received message larger than max (quota words)").WithDetails(
			&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: "project:p", Description: "Read requests per minute"}}})
		s := &script{errs: []error{st.Err(), st.Err()}}
		if err := call(t.Context(), t, interceptor.Unary(bufconntest.Exact(), interceptor.WithoutThrottle()), s); err != nil {
			t.Fatalf("err = %v, want success on attempt 3", err)
		}
		if len(s.times) != 3 {
			t.Errorf("attempts = %d, want 3", len(s.times))
		}
	})
}

// hangUntil blocks attempts that start before thaw until their context ends;
// later ones answer at once.
func hangUntil(start time.Time, thaw time.Duration) func(ctx context.Context, n int) error {
	return func(ctx context.Context, _ int) error {
		if time.Since(start) < thaw {
			return hang(ctx)
		}
		return nil
	}
}

// TestUnaryAttemptTimeout: each attempt runs under the earlier of the
// caller's deadline and its start plus AttemptTimeout. One cut by its own
// timeout is retried, though DEADLINE_EXCEEDED is not among the Codes; one
// cut by the caller's deadline never is.
func TestUnaryAttemptTimeout(t *testing.T) {
	cases := []struct {
		name     string
		timeout  time.Duration // AttemptTimeout
		deadline time.Duration // the caller's
		thaw     time.Duration // attempts starting before it hang
		starts   []time.Duration
		ends     []time.Duration
		code     codes.Code
		reason   grpcbackoff.Reason // 0: the error as it is
	}{
		{name: "cut twice, then answered", timeout: 10 * time.Second, deadline: 600 * time.Second, thaw: 20 * time.Second,
			starts: bufconntest.Seconds(0, 10.1, 20.3), ends: bufconntest.Seconds(10, 20.1, 20.3), code: codes.OK},
		{name: "the caller's deadline first: not retried", timeout: 10 * time.Second, deadline: 5 * time.Second, thaw: time.Hour,
			starts: bufconntest.Seconds(0), ends: bufconntest.Seconds(5), code: codes.DeadlineExceeded},
		{name: "the caller's deadline cuts the third", timeout: 10 * time.Second, deadline: 25 * time.Second, thaw: time.Hour,
			starts: bufconntest.Seconds(0, 10.1, 20.3), ends: bufconntest.Seconds(10, 20.1, 25), code: codes.DeadlineExceeded, reason: grpcbackoff.ReasonDeadline},
		{name: "cut on every attempt: exhausted", timeout: time.Second, deadline: 600 * time.Second, thaw: time.Hour,
			starts: bufconntest.Seconds(0, 1.1, 2.3, 3.7, 5.5), ends: bufconntest.Seconds(1, 2.1, 3.3, 4.7, 6.5), code: codes.DeadlineExceeded, reason: grpcbackoff.ReasonExhausted},
		{name: "no AttemptTimeout: the caller's deadline", deadline: 600 * time.Second, thaw: time.Hour,
			starts: bufconntest.Seconds(0), ends: bufconntest.Seconds(600), code: codes.DeadlineExceeded},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				srv := newFaultyServer(t, hangUntil(start, tc.thaw), respSize(1))
				p := fastExact()
				p.AttemptTimeout = tc.timeout
				var a attemptLog
				c := srv.Client(t, append(interceptor.DialOptions(p, testService, interceptor.WithoutThrottle()), a.dialOptions()...)...)
				ctx, cancel := context.WithTimeout(t.Context(), tc.deadline)
				defer cancel()
				_, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{})
				if got := status.Code(err); got != tc.code {
					t.Errorf("code = %v, want %v (%v)", got, tc.code, err)
				}
				var e *grpcbackoff.Error
				switch isErr := errors.As(err, &e); {
				case tc.reason == 0 && isErr:
					t.Errorf("err = %v, want the error unchanged", err)
				case tc.reason != 0 && (!isErr || e.Reason != tc.reason || e.Attempts != len(tc.starts)):
					t.Errorf("err = %v, want a *grpcbackoff.Error of %d attempts, %v", err, len(tc.starts), tc.reason)
				}
				a.mu.Lock()
				defer a.mu.Unlock()
				var starts, ends []time.Duration
				for i := range a.times {
					starts = append(starts, a.times[i].Sub(start))
					ends = append(ends, a.ends[i].Sub(start))
				}
				if !slices.Equal(starts, tc.starts) || !slices.Equal(ends, tc.ends) {
					t.Errorf("attempts started at %v and ended at %v, want %v and %v", starts, ends, tc.starts, tc.ends)
				}
			})
		})
	}
}

// TestCutAttemptsDrawOnTheLongRunAllowance: the retry of an attempt cut by
// its AttemptTimeout is paid by the long-run allowance alone (here one
// retry), however large the reserve; the retries of attempts the server
// answered with UNAVAILABLE are paid by the reserve.
func TestCutAttemptsDrawOnTheLongRunAllowance(t *testing.T) {
	th := grpcbackoff.Throttle{Burst: 1, MinReserve: 100, Window: time.Minute}
	cases := []struct {
		name string
		act  func(ctx context.Context, n int) error
		want int // attempts
		why  grpcbackoff.Reason
	}{
		{"hung: cut, one retry", func(ctx context.Context, _ int) error {
			return hang(ctx)
		}, 2, grpcbackoff.ReasonThrottled},
		{"UNAVAILABLE: every retry", func(context.Context, int) error {
			return status.Error(codes.Unavailable, "down")
		}, 5, grpcbackoff.ReasonExhausted},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := newFaultyServer(t, tc.act, respSize(1))
				p := fastExact()
				p.AttemptTimeout = time.Second
				c := srv.Client(t, interceptor.DialOptions(p, testService, interceptor.WithThrottle(th))...)
				_, err := c.UnaryCall(t.Context(), &testgrpc.SimpleRequest{})
				var e *grpcbackoff.Error
				if !errors.As(err, &e) || e.Attempts != tc.want || e.Reason != tc.why {
					t.Errorf("err = %v, want %d attempts, %v", err, tc.want, tc.why)
				}
			})
		})
	}
}

// TestAttemptTimeoutNotSentToServer: an attempt's AttemptTimeout is the
// client's to enforce, not a deadline the server is told of: a server with
// the call (its headers sent) may rightly take longer, and must not cut it
// either. The server sees the caller's deadline only; each hung attempt is
// still cut at 1 s and retried, hedged or not. (Re-derived for issue 27:
// the attempt's timeout was sent as its deadline, and a server that reset
// the call as it passed was taken as cut: TestHedgedAttemptTimeoutServerResetFirst
// and TestUnaryAttemptTimeoutServerResetFirst.)
func TestAttemptTimeoutNotSentToServer(t *testing.T) {
	for _, hedged := range []bool{false, true} {
		t.Run(fmt.Sprintf("hedged %v", hedged), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var deadlines []time.Duration
				srv := newFaultyServer(t, func(ctx context.Context, n int) error {
					dl, _ := ctx.Deadline()
					deadlines = append(deadlines, time.Until(dl).Round(time.Second))
					if n >= 2 {
						return nil
					}
					<-ctx.Done()
					return status.FromContextError(ctx.Err()).Err()
				}, respSize(1))
				p := fastExact()
				p.AttemptTimeout = time.Second
				opts := []interceptor.Option{interceptor.WithoutThrottle(), testService}
				if hedged {
					// The hedge follows the first attempt after 1.5 s: after
					// its cut, so that each attempt is alone on the wire.
					opts = append(opts, interceptor.WithHedging("/grpc.testing.TestService/UnaryCall", grpcbackoff.Hedging{MaxAttempts: 2, Delay: 1500 * msec}))
				}
				r, err := interceptor.New(p, opts...)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
				defer cancel()
				if _, err := srv.Client(t, r.DialOptions()...).UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
					t.Errorf("call failed: %v; want the third attempt's success", err)
				}
				if n := srv.Count(); n != 3 {
					t.Errorf("the server saw %d attempts, want 3", n)
				}
				for i, d := range deadlines {
					if d < 59*time.Minute {
						t.Errorf("attempt %d reached the server with %v to its deadline, want the caller's hour", i+1, d)
					}
				}
			})
		})
	}
}

// TestUnaryAttemptTimeoutCommitsOnHeaders: AttemptTimeout 1 s, and a server
// that sends its response headers at once and answers at 3 s. Once the
// headers arrived the server has the call: the attempt is neither cut nor
// resent, and the caller gets the answer, hedged or not. With Unary alone,
// which cannot see headers come, the attempt is cut at 1 s but never resent:
// the handler runs once. (Issue 27: the handler ran 8 times and the caller
// got DEADLINE_EXCEEDED after 1m43s; hedged, it ran once but its committed
// attempt was cut.)
func TestUnaryAttemptTimeoutCommitsOnHeaders(t *testing.T) {
	for _, tc := range []struct {
		name   string
		hedged bool
		alone  bool
		code   codes.Code
	}{
		{"DialOptions", false, false, codes.OK},
		{"DialOptions, hedged", true, false, codes.OK},
		{"Unary alone", false, true, codes.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := bufconntest.NewServer(t, bufconntest.Steps(bufconntest.Step{Header: true, Pause: 3 * time.Second, Send: 1}))
				p := bufconntest.Exact()
				p.AttemptTimeout = time.Second
				opts := []interceptor.Option{interceptor.WithoutThrottle()}
				if tc.hedged {
					opts = append(opts, interceptor.WithHedging("/grpc.testing.TestService/UnaryCall", grpcbackoff.Hedging{MaxAttempts: 3, Delay: 500 * msec}))
				}
				r, err := interceptor.New(p, opts...)
				if err != nil {
					t.Fatal(err)
				}
				dial := r.DialOptions()
				if tc.alone {
					dial = []grpc.DialOption{grpc.WithUnaryInterceptor(r.Unary())}
				}
				start := time.Now()
				_, err = srv.Client(t, dial...).UnaryCall(t.Context(), &testgrpc.SimpleRequest{})
				if status.Code(err) != tc.code || srv.Count() != 1 {
					t.Errorf("err %v after %v, %d attempts; want %v and one attempt", err, time.Since(start), srv.Count(), tc.code)
				}
			})
		})
	}
}
