package gaxretry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"testing/synctest"
	"time"

	gax "github.com/googleapis/gax-go/v2"
	"github.com/googleapis/gax-go/v2/apierror"
	"google.golang.org/api/googleapi"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/gaxretry"
)

// fast is a Policy with small exact delays: 1, 2, 4, 8, 10, 10 ms for
// retries 0 to 5.
func fast(attempts int) grpcbackoff.Policy {
	p := grpcbackoff.DefaultPolicy()
	p.Initial = time.Millisecond
	p.Max = 10 * time.Millisecond
	p.Jitter = 0
	p.MaxAttempts = attempts
	return p
}

func unavailable() error { return status.Error(codes.Unavailable, "down") }

func withRetryInfo(c codes.Code, d time.Duration) error {
	st, err := status.New(c, "slow down").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

// httpError is the error a REST client of cloud.google.com/go gets: a
// googleapi.Error whose body may carry a RetryInfo.
func httpError(code int, retryDelay string) error {
	body := fmt.Sprintf(`{"error": {"code": %d, "message": "http %d"}}`, code, code)
	if retryDelay != "" {
		body = fmt.Sprintf(`{"error": {"code": %d, "message": "http %d", "details": [
			{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": %q}]}}`, code, code, retryDelay)
	}
	return &googleapi.Error{Code: code, Message: fmt.Sprintf("http %d", code), Body: body}
}

// asGax wraps err as gax.Invoke does before it calls Retry.
func asGax(err error) error {
	if ae, ok := apierror.FromError(err); ok {
		return ae
	}
	return err
}

type decision struct {
	pause time.Duration
	retry bool
}

func TestRetryer(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name string
		p    grpcbackoff.Policy
		errs []error
		want []decision // one per error
	}{
		{"exact delays up to MaxAttempts", fast(7),
			[]error{unavailable(), unavailable(), unavailable(), unavailable(), unavailable(), unavailable(), unavailable()},
			[]decision{{1 * ms, true}, {2 * ms, true}, {4 * ms, true}, {8 * ms, true}, {10 * ms, true}, {10 * ms, true}, {0, false}}},
		{"MaxAttempts 1 never retries", fast(1), []error{unavailable()}, []decision{{0, false}}},
		{"resource exhausted", fast(3), []error{status.Error(codes.ResourceExhausted, "quota")}, []decision{{1 * ms, true}}},
		{"a code not in Codes", fast(3), []error{status.Error(codes.NotFound, "no")}, []decision{{0, false}}},
		{"internal", fast(3), []error{unavailable(), status.Error(codes.Internal, "bug")}, []decision{{1 * ms, true}, {0, false}}},
		{"an error without a status", fast(3), []error{io.ErrUnexpectedEOF}, []decision{{0, false}}},
		{"a context error", fast(3), []error{context.DeadlineExceeded}, []decision{{0, false}}},
		{"RetryInfo lengthens the wait", fast(3), []error{withRetryInfo(codes.Unavailable, 7*ms), withRetryInfo(codes.Unavailable, 1*ms)},
			[]decision{{7 * ms, true}, {2 * ms, true}}},
		{"RetryInfo past Max is honoured", fast(3), []error{withRetryInfo(codes.Unavailable, 11*ms)}, []decision{{11 * ms, true}}},
		{"RetryInfo past MaxHintDelay stops", fast(3), []error{withRetryInfo(codes.Unavailable, grpcbackoff.MaxHintDelay+ms)}, []decision{{0, false}}},
		{"RetryInfo at Max is honoured", fast(3), []error{withRetryInfo(codes.ResourceExhausted, 10*ms)}, []decision{{10 * ms, true}}},
		{"RetryInfo on a code not retried", fast(3), []error{withRetryInfo(codes.NotFound, 1*ms)}, []decision{{0, false}}},
		{"as gax.Invoke wraps it", fast(3), []error{asGax(unavailable()), asGax(withRetryInfo(codes.Unavailable, 5*ms))},
			[]decision{{1 * ms, true}, {5 * ms, true}}},
		{"wrapped with %w", fast(3), []error{fmt.Errorf("getting: %w", unavailable())}, []decision{{1 * ms, true}}},
		{"the interceptor's error", fast(3), []error{&grpcbackoff.Error{Err: unavailable(), Attempts: 3, Reason: grpcbackoff.ReasonExhausted}},
			[]decision{{1 * ms, true}}},
		{"HTTP 503 and 429", fast(4), []error{httpError(503, ""), asGax(httpError(429, "")), httpError(502, "")},
			[]decision{{1 * ms, true}, {2 * ms, true}, {0, false}}},
		{"HTTP RetryInfo", fast(3), []error{asGax(httpError(503, "0.006s")), httpError(429, "0.001s")},
			[]decision{{6 * ms, true}, {2 * ms, true}}},
		{"HTTP RetryInfo past Max", fast(3), []error{asGax(httpError(503, "1s"))}, []decision{{time.Second, true}}},
		{"HTTP RetryInfo past MaxHintDelay", fast(3), []error{asGax(httpError(503, "301s"))}, []decision{{0, false}}},
		{"HTTP 404", fast(3), []error{asGax(httpError(404, ""))}, []decision{{0, false}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := gaxretry.Retryer(tc.p)
			if err != nil {
				t.Fatal(err)
			}
			for i, e := range tc.errs {
				pause, retry := r.Retry(e)
				if got := (decision{pause, retry}); got != tc.want[i] {
					t.Errorf("Retry(%v) after %d failed attempts = %v, %v, want %v, %v", e, i, pause, retry, tc.want[i].pause, tc.want[i].retry)
				}
			}
		})
	}
}

func TestRetryerJitter(t *testing.T) {
	p := fast(3)
	p.Jitter = 3 * time.Millisecond
	for range 1000 {
		r, _ := gaxretry.Retryer(p)
		d, ok := r.Retry(unavailable())
		if !ok || d < time.Millisecond || d > 4*time.Millisecond {
			t.Fatalf("Retry(UNAVAILABLE) = %v, %v, want a delay in [1ms, 4ms]", d, ok)
		}
	}
}

func TestInvalidPolicy(t *testing.T) {
	bad := fast(0)
	bad.Codes = nil
	want := bad.Validate().Error()
	if r, err := gaxretry.Retryer(bad); r != nil || err == nil || err.Error() != want {
		t.Errorf("Retryer(bad) = %v, %v, want nil, %q", r, err, want)
	}
	if co, err := gaxretry.CallOption(bad); co != nil || err == nil || err.Error() != want {
		t.Errorf("CallOption(bad) = %v, %v, want nil, %q", co, err, want)
	}
	defer func() {
		if r := recover(); r != want {
			t.Errorf("MustCallOption(bad) panicked with %v, want %q", r, want)
		}
	}()
	gaxretry.MustCallOption(bad)
}

func TestPolicyIsCopied(t *testing.T) {
	p := fast(3)
	r, _ := gaxretry.Retryer(p)
	co := gaxretry.MustCallOption(p)
	p.Codes[0] = codes.NotFound // the caller changes its slice afterwards
	if _, ok := r.Retry(unavailable()); !ok {
		t.Error("Retryer: UNAVAILABLE no longer retried after the caller changed its Policy")
	}
	var cs gax.CallSettings
	co.Resolve(&cs)
	if _, ok := cs.Retry().Retry(unavailable()); !ok {
		t.Error("CallOption: UNAVAILABLE no longer retried after the caller changed its Policy")
	}
}

// failing is a gax.APICall that fails with errs[i] on attempt i (nil past
// the end) and records when each attempt started.
type failing struct {
	errs  []error
	times []time.Time
}

func (f *failing) call(context.Context, gax.CallSettings) error {
	i := len(f.times)
	f.times = append(f.times, time.Now())
	if i < len(f.errs) {
		return f.errs[i]
	}
	return nil
}

func (f *failing) gaps() []time.Duration {
	var g []time.Duration
	for i := 1; i < len(f.times); i++ {
		g = append(g, f.times[i].Sub(f.times[i-1]))
	}
	return g
}

func repeat(err error, n int) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

func TestInvoke(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name     string
		errs     []error
		wantGaps []time.Duration
		wantCode codes.Code
	}{
		{"success", nil, nil, codes.OK},
		{"two failures", repeat(unavailable(), 2), []time.Duration{1 * ms, 2 * ms}, codes.OK},
		{"exhausted", repeat(unavailable(), 9), []time.Duration{1 * ms, 2 * ms, 4 * ms}, codes.Unavailable},
		{"not retryable", []error{status.Error(codes.PermissionDenied, "no")}, nil, codes.PermissionDenied},
		{"RetryInfo", []error{withRetryInfo(codes.Unavailable, 9*ms)}, []time.Duration{9 * ms}, codes.OK},
		{"RetryInfo past Max", []error{withRetryInfo(codes.Unavailable, time.Second)}, []time.Duration{time.Second}, codes.OK},
		{"RetryInfo past MaxHintDelay", []error{withRetryInfo(codes.Unavailable, time.Hour)}, nil, codes.Unavailable},
	}
	co := gaxretry.MustCallOption(fast(4))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &failing{errs: tc.errs}
				err := gax.Invoke(t.Context(), f.call, co)
				if got := status.Code(err); got != tc.wantCode {
					t.Fatalf("Invoke: code = %v, want %v (err %v)", got, tc.wantCode, err)
				}
				if got := f.gaps(); fmt.Sprint(got) != fmt.Sprint(tc.wantGaps) {
					t.Errorf("Invoke: gaps between attempts = %v, want %v", got, tc.wantGaps)
				}
				// gax returns the last attempt's error, details included.
				if err != nil && !errors.Is(err, tc.errs[len(f.times)-1]) {
					t.Errorf("Invoke: err = %v, want the last attempt's error %v", err, tc.errs[len(f.times)-1])
				}
			})
		})
	}
}

// TestInvokeFreshRetryerPerCall checks that every call gets the whole
// Policy: the attempts of one call do not count against the next.
func TestInvokeFreshRetryerPerCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		co := gaxretry.MustCallOption(fast(3))
		for call := range 3 {
			f := &failing{errs: repeat(unavailable(), 9)}
			_ = gax.Invoke(t.Context(), f.call, co)
			if len(f.times) != 3 {
				t.Errorf("call %d: attempts = %d, want 3", call, len(f.times))
			}
		}
	})
}

// TestInvokeDeadline pins down the difference the package documents: gax
// cannot show a Retryer the deadline, so it sleeps until the deadline and
// returns the context's error, where the interceptor would return the last
// error at once.
func TestInvokeDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := fast(5)
		p.Initial = time.Second
		p.Max = time.Minute
		ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
		defer cancel()
		f := &failing{errs: repeat(unavailable(), 9)}
		start := time.Now()
		err := gax.Invoke(ctx, f.call, gaxretry.MustCallOption(p))
		if !errors.Is(err, context.DeadlineExceeded) || len(f.times) != 2 || time.Since(start) != 1500*time.Millisecond {
			t.Errorf("Invoke with a 1.5 s deadline: err = %v after %d attempts and %v; want context.DeadlineExceeded after 2 attempts and 1.5s",
				err, len(f.times), time.Since(start))
		}
	})
}
