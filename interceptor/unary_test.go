package interceptor_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/platformkit/grpcbackoff/internal/bufconntest"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
)

func TestUnaryRetriesWithExactDelays(t *testing.T) {
	cases := []struct {
		name     string
		errs     []error
		wantGaps []time.Duration
		wantCode codes.Code
	}{
		{"success", nil, nil, codes.OK},
		{"one failure", bufconntest.Unavailable(1), []time.Duration{time.Second}, codes.OK},
		{"three failures", bufconntest.Unavailable(3), []time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second}, codes.OK},
		{"resource exhausted", []error{status.Error(codes.ResourceExhausted, "quota")}, []time.Duration{time.Second}, codes.OK},
		{"seven failures reach the cap", bufconntest.Unavailable(7),
			[]time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, 32 * time.Second}, codes.OK},
		{"not retryable", []error{status.Error(codes.NotFound, "no")}, nil, codes.NotFound},
		{"internal is not retried", []error{status.Error(codes.Internal, "bug")}, nil, codes.Internal},
		{"retryable then not", []error{status.Error(codes.Unavailable, "down"), status.Error(codes.InvalidArgument, "bad")},
			[]time.Duration{time.Second}, codes.InvalidArgument},
	}
	// A context that can end waits on a timer; one that cannot (Background)
	// sleeps.
	contexts := map[string]func(t *testing.T) context.Context{
		"ctx=test":       (*testing.T).Context,
		"ctx=background": func(*testing.T) context.Context { return context.Background() },
	}
	for _, tc := range cases {
		for ctxName, ctx := range contexts {
			t.Run(tc.name+"/"+ctxName, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					s := &script{errs: tc.errs}
					err := call(ctx(t), t, interceptor.Unary(bufconntest.Exact(), interceptor.WithoutThrottle()), s)
					if got := status.Code(err); got != tc.wantCode {
						t.Fatalf("code = %v, want %v (err %v)", got, tc.wantCode, err)
					}
					if got := s.gaps(); !slices.Equal(got, tc.wantGaps) {
						t.Errorf("gaps between attempts = %v, want %v", got, tc.wantGaps)
					}
				})
			})
		}
	}
}

func TestUnaryNotRetryableErrorIsUnchanged(t *testing.T) {
	want := status.Error(codes.NotFound, "no such instance")
	s := &script{errs: []error{want}}
	err := call(context.Background(), t, interceptor.Unary(bufconntest.Exact()), s)
	if err != want {
		t.Errorf("err = %#v, want the server's error itself", err)
	}
}

func TestUnaryExhausted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := bufconntest.Exact()
		p.MaxAttempts = 4
		st, _ := status.New(codes.Unavailable, "down").WithDetails(&errdetails.ErrorInfo{Reason: "MAINTENANCE"})
		s := &script{errs: []error{st.Err(), st.Err(), st.Err(), st.Err(), nil}}
		start := time.Now()
		err := call(t.Context(), t, interceptor.Unary(p, interceptor.WithoutThrottle()), s)
		if len(s.times) != 4 {
			t.Fatalf("attempts = %d, want 4", len(s.times))
		}
		if got, want := time.Since(start), 7*time.Second; got != want {
			t.Errorf("gave up after %v, want %v", got, want)
		}
		checkFinal(t, err, codes.Unavailable, 4, grpcbackoff.ReasonExhausted)
		got, _ := status.FromError(err)
		if len(got.Details()) != 1 {
			t.Fatalf("details = %v, want the ErrorInfo", got.Details())
		}
		if ei, ok := got.Details()[0].(*errdetails.ErrorInfo); !ok || ei.Reason != "MAINTENANCE" {
			t.Errorf("details[0] = %v, want ErrorInfo MAINTENANCE", got.Details()[0])
		}
		if msg := got.Message(); !strings.Contains(msg, "down") || !strings.Contains(msg, "4 attempts over 7s") {
			t.Errorf("message = %q, want the server's message and %q", msg, "4 attempts over 7s")
		}
	})
}

func TestUnaryDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Failures at 0 s and 1 s; the next wait (2 s) would end at 3 s,
		// past the deadline at 2.5 s: the call returns at 1 s.
		start := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), 2500*time.Millisecond)
		defer cancel()
		s := &script{errs: bufconntest.Unavailable(10)}
		err := call(ctx, t, interceptor.Unary(bufconntest.Exact(), interceptor.WithoutThrottle()), s)
		if got := time.Since(start); got != time.Second {
			t.Errorf("returned after %v, want 1s (at the failure, not at the deadline)", got)
		}
		checkFinal(t, err, codes.Unavailable, 2, grpcbackoff.ReasonDeadline)
	})
}

func TestUnaryWaitEndingExactlyAtDeadlineIsNotStarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		s := &script{errs: bufconntest.Unavailable(10)}
		err := call(ctx, t, interceptor.Unary(bufconntest.Exact(), interceptor.WithoutThrottle()), s)
		if len(s.times) != 1 {
			t.Errorf("attempts = %d, want 1: a retry at the deadline could not start before it", len(s.times))
		}
		checkFinal(t, err, codes.Unavailable, 1, grpcbackoff.ReasonDeadline)
	})
}

func TestUnaryCancelDuringWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(2500*time.Millisecond, cancel)
		s := &script{errs: bufconntest.Unavailable(10)}
		err := call(ctx, t, interceptor.Unary(bufconntest.Exact(), interceptor.WithoutThrottle()), s)
		if got := time.Since(start); got != 2500*time.Millisecond {
			t.Errorf("returned after %v, want 2.5s (at the cancel)", got)
		}
		checkFinal(t, err, codes.Canceled, 2, grpcbackoff.ReasonCanceled)
	})
}

func TestUnaryNoRetryOnceContextIsDone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	want := status.Error(codes.Unavailable, "down")
	s := &script{errs: []error{want}}
	err := call(ctx, t, interceptor.Unary(bufconntest.Exact()), s)
	if err != want || len(s.times) != 1 {
		t.Errorf("err = %v after %d attempts, want the attempt's error after 1", err, len(s.times))
	}
}

func TestUnaryServerHints(t *testing.T) {
	pushback := func(v ...string) metadata.MD {
		md := metadata.MD{}
		for _, s := range v {
			md.Append(grpcbackoff.PushbackKey, s)
		}
		return md
	}
	cases := []struct {
		name     string
		err      error
		trailer  metadata.MD
		wantGaps []time.Duration // nil: not retried
	}{
		{"RetryInfo longer than backoff", retryInfo(5 * time.Second), nil, []time.Duration{5 * time.Second}},
		{"RetryInfo shorter than backoff", retryInfo(100 * time.Millisecond), nil, []time.Duration{time.Second}},
		{"RetryInfo negative is ignored", retryInfo(-time.Second), nil, []time.Duration{time.Second}},
		{"RetryInfo at Max", retryInfo(32 * time.Second), nil, []time.Duration{32 * time.Second}},
		{"RetryInfo past Max is waited for", retryInfo(40 * time.Second), nil, []time.Duration{40 * time.Second}},
		{"RetryInfo past MaxHintDelay stops", retryInfo(grpcbackoff.MaxHintDelay + time.Millisecond), nil, nil},
		{"RetryInfo 100 years stops", retryInfo(100 * 365 * 24 * time.Hour), nil, nil},
		{"pushback past Max is waited for", status.Error(codes.Unavailable, "x"), pushback("40000"), []time.Duration{40 * time.Second}},
		{"pushback longer", status.Error(codes.Unavailable, "x"), pushback("3000"), []time.Duration{3 * time.Second}},
		{"pushback zero keeps the backoff", status.Error(codes.Unavailable, "x"), pushback("0"), []time.Duration{time.Second}},
		{"pushback negative stops", status.Error(codes.Unavailable, "x"), pushback("-1"), nil},
		{"pushback malformed stops", status.Error(codes.Unavailable, "x"), pushback("soon"), nil},
		{"pushback repeated stops", status.Error(codes.Unavailable, "x"), pushback("1", "2"), nil},
		{"both: the longer wins", retryInfo(4 * time.Second), pushback("6000"), []time.Duration{6 * time.Second}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &script{errs: []error{tc.err}, trailers: []metadata.MD{tc.trailer}}
				err := call(t.Context(), t, interceptor.Unary(bufconntest.Exact(), interceptor.WithoutThrottle()), s)
				if got := s.gaps(); !slices.Equal(got, tc.wantGaps) {
					t.Errorf("gaps = %v, want %v", got, tc.wantGaps)
				}
				if tc.wantGaps == nil {
					checkFinal(t, err, codes.Unavailable, 1, grpcbackoff.ReasonServerRefused)
				} else if err != nil {
					t.Errorf("err = %v, want success on the retry", err)
				}
			})
		})
	}
}

// TestUnaryHintAgainstDeadline: a server hint past Max is waited for when
// the caller's deadline allows it, and ends the call at once otherwise.
func TestUnaryHintAgainstDeadline(t *testing.T) {
	cases := []struct {
		name     string
		left     time.Duration
		hint     time.Duration
		wantGaps []time.Duration
	}{
		{"40 s under a 32 s Max, 10 min left: waited", 10 * time.Minute, 40 * time.Second, []time.Duration{40 * time.Second}},
		{"4 min, 10 min left: waited", 10 * time.Minute, 4 * time.Minute, []time.Duration{4 * time.Minute}},
		{"4 min, 1 min left: not waited", time.Minute, 4 * time.Minute, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), tc.left)
				defer cancel()
				s := &script{errs: []error{retryInfo(tc.hint)}}
				start := time.Now()
				err := call(ctx, t, interceptor.Unary(bufconntest.Exact(), interceptor.WithoutThrottle()), s)
				if got := s.gaps(); !slices.Equal(got, tc.wantGaps) {
					t.Errorf("gaps = %v, want %v", got, tc.wantGaps)
				}
				if tc.wantGaps == nil {
					checkFinal(t, err, codes.Unavailable, 1, grpcbackoff.ReasonDeadline)
					if took := time.Since(start); took != 0 {
						t.Errorf("the call returned after %v, want at once", took)
					}
				} else if err != nil {
					t.Errorf("err = %v, want success on the retry", err)
				}
			})
		})
	}
}

func TestUnaryTellsServerAboutRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &script{errs: bufconntest.Unavailable(2)}
		ctx := metadata.AppendToOutgoingContext(t.Context(), "x-user", "kept")
		if err := call(ctx, t, interceptor.Unary(bufconntest.Exact()), s); err != nil {
			t.Fatal(err)
		}
		for i, md := range s.md {
			got := md.Get(interceptor.PreviousAttemptsKey)
			var want []string
			if i > 0 {
				want = []string{string(rune('0' + i))}
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("attempt %d: %s = %q, want %q", i+1, interceptor.PreviousAttemptsKey, got, want)
			}
			if v := md.Get("x-user"); len(v) != 1 || v[0] != "kept" {
				t.Errorf("attempt %d: x-user = %q, want the caller's metadata kept", i+1, v)
			}
		}
	})
}

func TestUnaryKeepsCallerOptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var header metadata.MD
		s := &script{errs: bufconntest.Unavailable(1)}
		if err := call(t.Context(), t, interceptor.Unary(bufconntest.Exact()), s, grpc.Header(&header), grpc.WaitForReady(true)); err != nil {
			t.Fatal(err)
		}
		for i, opts := range s.opts {
			var sawHeader, sawWait bool
			for _, o := range opts {
				switch o.(type) {
				case grpc.HeaderCallOption:
					sawHeader = true
				case grpc.FailFastCallOption:
					sawWait = true
				}
			}
			if !sawHeader || !sawWait {
				t.Errorf("attempt %d options = %v, want the caller's Header and WaitForReady", i+1, opts)
			}
		}
	})
}

func TestUnaryOnRetryHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got []interceptor.Retry
		s := &script{errs: bufconntest.Unavailable(2)}
		ic := interceptor.Unary(bufconntest.Exact(), interceptor.WithOnRetry(func(r interceptor.Retry) { got = append(got, r) }))
		if err := call(t.Context(), t, ic, s); err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 {
			t.Fatalf("hook called %d times, want 2", len(got))
		}
		for i, r := range got {
			if r.Method != "/pkg.Svc/Get" || r.Attempt != i+1 || r.Code != codes.Unavailable || r.Delay != time.Second<<i || r.Throttled {
				t.Errorf("hook %d = %+v, want attempt %d, Unavailable, delay %v", i, r, i+1, time.Second<<i)
			}
		}
	})
}

func TestUnaryThrottled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := grpcbackoff.Throttle{Ratio: 0, PerSecond: 0, Burst: 2}
		var throttled int
		ic := interceptor.Unary(bufconntest.Exact(), interceptor.WithThrottle(th),
			interceptor.WithOnRetry(func(r interceptor.Retry) {
				if r.Throttled {
					throttled++
				}
			}))
		s := &script{errs: bufconntest.Unavailable(10)}
		err := call(t.Context(), t, ic, s)
		if len(s.times) != 3 {
			t.Errorf("attempts = %d, want 3 (two retries paid for)", len(s.times))
		}
		checkFinal(t, err, codes.Unavailable, 3, grpcbackoff.ReasonThrottled)
		if throttled != 1 {
			t.Errorf("hook saw %d throttled retries, want 1", throttled)
		}
	})
}

func TestLoneCallKeepsTheWholeRecipeUnderDefaultThrottle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &script{errs: bufconntest.Unavailable(7)}
		if err := call(t.Context(), t, interceptor.Unary(bufconntest.Exact()), s); err != nil {
			t.Fatalf("err = %v, want success on attempt 8", err)
		}
		if len(s.times) != 8 {
			t.Errorf("attempts = %d, want 8", len(s.times))
		}
	})
}

func TestInvalidConfiguration(t *testing.T) {
	bad := grpcbackoff.Policy{Initial: -time.Second, Multiplier: 2, Max: time.Second, MaxAttempts: 3, Codes: []codes.Code{codes.Unavailable}}
	wantMsg := bad.Validate().Error()
	if _, err := interceptor.New(bad); err == nil || err.Error() != wantMsg {
		t.Errorf("New(bad) error = %v, want %q", err, wantMsg)
	}
	for name, f := range map[string]func(){
		"Unary":       func() { interceptor.Unary(bad) },
		"Stream":      func() { interceptor.Stream(bad) },
		"DialOptions": func() { interceptor.DialOptions(bad) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if r := recover(); r != wantMsg {
					t.Errorf("panic = %v, want %q", r, wantMsg)
				}
			}()
			f()
		})
	}
	opts := []struct {
		opt  interceptor.Option
		want string
	}{
		{interceptor.WithBufferLimit(-1), "WithBufferLimit(-1)"},
		{interceptor.WithThrottle(grpcbackoff.Throttle{Ratio: 2, Burst: 1}), "Throttle.Ratio (2)"},
		{interceptor.WithObserver(nil), "WithObserver(nil)"},
		{interceptor.WithOnRetry(nil), "WithOnRetry(nil)"},
	}
	for _, o := range opts {
		if _, err := interceptor.New(grpcbackoff.DefaultPolicy(), o.opt); err == nil || !strings.Contains(err.Error(), o.want) {
			t.Errorf("New with bad option: error = %v, want it to name %q", err, o.want)
		}
	}
	// Every bad option, a nil one and a bad method name beside a bad
	// Policy included, by its index, all at once.
	_, err := interceptor.New(grpcbackoff.DefaultPolicy(), interceptor.WithLogger(nil), nil,
		interceptor.WithMethod("Get", bad), interceptor.WithBufferLimit(-1))
	want := "interceptor: opts[1]: the option is nil\n" +
		"interceptor: opts[2]: method name \"Get\": want \"/pkg.Service/Method\" or \"/pkg.Service/\"\n" +
		"interceptor: opts[2]: WithMethod(\"Get\"): " + wantMsg + "\n" +
		"interceptor: opts[3]: WithBufferLimit(-1): the limit must not be negative"
	if err == nil || err.Error() != want {
		t.Errorf("New with bad options: error =\n%v\nwant\n%s", err, want)
	}
}

func TestPolicyIsCopied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := bufconntest.Exact()
		ic := interceptor.Unary(p)
		p.Codes[0] = codes.NotFound // the caller changes its slice afterwards
		s := &script{errs: bufconntest.Unavailable(1)}
		if err := call(t.Context(), t, ic, s); err != nil || len(s.times) != 2 {
			t.Errorf("err = %v after %d attempts, want UNAVAILABLE still retried", err, len(s.times))
		}
	})
}

func TestUnarySuccessAllocatesNothing(t *testing.T) {
	invoke := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	ic := interceptor.Unary(grpcbackoff.DefaultPolicy())
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts []grpc.CallOption
	}{
		{"no options", nil},
		{"one option", opt(grpc.WaitForReady(true))},
		{"our option", opt(interceptor.CallMaxAttempts(3))},
	} {
		if n := testing.AllocsPerRun(1000, func() { ic(ctx, "/pkg.Svc/Get", nil, nil, nil, invoke, tc.opts...) }); n != 0 {
			t.Errorf("%s: a successful call allocates %v times, want 0", tc.name, n)
		}
	}
}

func TestUnaryManyCallOptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var opts []grpc.CallOption
		for range 12 {
			opts = append(opts, grpc.WaitForReady(true))
		}
		s := &script{errs: bufconntest.Unavailable(1)}
		if err := call(t.Context(), t, interceptor.Unary(bufconntest.Exact()), s, opts...); err != nil {
			t.Fatal(err)
		}
		// Issue 26: the layer mark that keeps a Retrier installed twice to
		// one layer. Issue 34: grpc.Header (commit), grpc.Peer and
		// grpc.OnFinish (sent) beside grpc.Trailer (pushback), as issue 20's
		// reading of the commit from the trailer trusted the server's words.
		for i, o := range s.opts {
			if len(o) != 17 {
				t.Errorf("attempt %d got %d options, want the caller's 12, the layer mark, grpc.Header, grpc.Peer, grpc.OnFinish and grpc.Trailer", i+1, len(o))
			}
		}
	})
}

func TestUnaryWithoutPushback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pushback := metadata.Pairs(grpcbackoff.PushbackKey, "5000")
		s := &script{errs: []error{retryInfo(3 * time.Second), status.Error(codes.Unavailable, "x")}, trailers: []metadata.MD{pushback, pushback}}
		ic := interceptor.Unary(bufconntest.Exact(), interceptor.WithoutPushback())
		if err := call(t.Context(), t, ic, s); err != nil {
			t.Fatal(err)
		}
		// RetryInfo still counts (3 s); the pushback of 5 s is not read.
		if got, want := s.gaps(), []time.Duration{3 * time.Second, 2 * time.Second}; !slices.Equal(got, want) {
			t.Errorf("gaps = %v, want %v", got, want)
		}
		for i, opts := range s.opts {
			for _, o := range opts {
				if _, ok := o.(grpc.TrailerCallOption); ok {
					t.Errorf("attempt %d asked gRPC for the trailer, want no grpc.Trailer option", i+1)
				}
			}
		}
	})
}
