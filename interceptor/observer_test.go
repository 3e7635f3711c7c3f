package interceptor_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// logCapture is a slog.Handler that keeps each record as one line,
// "LEVEL msg k=v ...", and the value of ctxKey in the record's context.
type logCapture struct {
	mu    sync.Mutex
	lines []string
}

type ctxKey struct{}

func (h *logCapture) Enabled(context.Context, slog.Level) bool { return true }
func (h *logCapture) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logCapture) WithGroup(string) slog.Handler            { return h }
func (h *logCapture) Handle(ctx context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	fmt.Fprintf(&b, " ctx=%v", ctx.Value(ctxKey{}))
	h.mu.Lock()
	h.lines = append(h.lines, b.String())
	h.mu.Unlock()
	return nil
}

func TestLoggerRecordsRetriesAndGiveUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &logCapture{}
		p := bufconntest.Exact()
		p.MaxAttempts = 3
		ic := interceptor.Unary(p, interceptor.WithLogger(slog.New(h)),
			interceptor.WithThrottle(grpcbackoff.Throttle{Burst: 3}))
		ctx := context.WithValue(t.Context(), ctxKey{}, "caller")

		call(ctx, t, ic, &script{})                                                // success: nothing
		call(ctx, t, ic, &script{errs: []error{status.Error(codes.NotFound, "")}}) // not retryable: nothing
		call(ctx, t, ic, &script{errs: bufconntest.Unavailable(5)})                // 2 retries, exhausted
		call(ctx, t, ic, &script{errs: bufconntest.Unavailable(5)})                // 1 retry, then throttled

		const m = "method=/pkg.Svc/Get"
		want := []string{
			"INFO grpcbackoff: retrying " + m + " attempt=1 code=Unavailable delay=1s ctx=caller",
			"INFO grpcbackoff: retrying " + m + " attempt=2 code=Unavailable delay=2s ctx=caller",
			"WARN grpcbackoff: gave up " + m + " attempts=3 code=Unavailable reason=attempts exhausted delay=3s ctx=caller",
			"INFO grpcbackoff: retrying " + m + " attempt=1 code=Unavailable delay=1s ctx=caller",
			"WARN grpcbackoff: retry throttled " + m + " attempt=2 code=Unavailable delay=0s ctx=caller",
			"WARN grpcbackoff: gave up " + m + " attempts=2 code=Unavailable reason=retry throttled delay=1s ctx=caller",
		}
		if got := strings.Join(h.lines, "\n"); got != strings.Join(want, "\n") {
			t.Errorf("log:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
		}
	})
}

func TestWithLoggerNilLogsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		ic := interceptor.Unary(bufconntest.Exact(), interceptor.WithLogger(nil), interceptor.WithObserver(rec))
		if err := call(t.Context(), t, ic, &script{errs: bufconntest.Unavailable(1)}); err != nil {
			t.Fatal(err)
		}
		if len(rec.ends) != 1 {
			t.Errorf("%d ends observed, want 1", len(rec.ends))
		}
	})
}

func TestEndReportsStaticMethodAndNoHedges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		ic := interceptor.Unary(bufconntest.Exact(), interceptor.WithObserver(rec))
		call(t.Context(), t, ic, &script{errs: bufconntest.Unavailable(1)}, grpc.WaitForReady(true), grpc.StaticMethod())
		call(t.Context(), t, ic, &script{}, grpc.WaitForReady(true))
		if len(rec.ends) != 2 {
			t.Fatalf("%d ends observed, want 2", len(rec.ends))
		}
		if e := rec.ends[0]; !e.StaticMethod || e.Attempts != 2 || e.Hedges != 0 || e.Delay != time.Second || e.Code != codes.OK {
			t.Errorf("end of a retried call with grpc.StaticMethod = %+v, want StaticMethod, 2 attempts, no hedge, 1s delay, OK", e)
		}
		if e := rec.ends[1]; e.StaticMethod || e.Attempts != 1 || e.Hedges != 0 {
			t.Errorf("end of a call without grpc.StaticMethod = %+v, want not StaticMethod, 1 attempt", e)
		}
	})
}

func TestEndGaveUp(t *testing.T) {
	for _, tc := range []struct {
		e    interceptor.End
		want bool
	}{
		{interceptor.End{Attempts: 1}, false},
		{interceptor.End{Attempts: 3}, false}, // succeeded after retries
		{interceptor.End{Attempts: 1, Reason: grpcbackoff.ReasonNotRetryable}, false},
		{interceptor.End{Attempts: 2, Reason: grpcbackoff.ReasonNotRetryable}, true},
		{interceptor.End{Attempts: 1, Reason: grpcbackoff.ReasonDeadline}, true}, // retryable, no time left
		{interceptor.End{Attempts: 1, Reason: grpcbackoff.ReasonThrottled}, true},
		{interceptor.End{Attempts: 4, Reason: grpcbackoff.ReasonExhausted}, true},
	} {
		if got := tc.e.GaveUp(); got != tc.want {
			t.Errorf("End{Attempts: %d, Reason: %v}.GaveUp() = %v, want %v", tc.e.Attempts, tc.e.Reason, got, tc.want)
		}
	}
}

// TestStreamGiveUpIsObserved checks that a stream that gives up reports its
// end, and is logged: one whose attempts fail when received from, and one
// whose attempts cannot open (no server).
func TestStreamGiveUpIsObserved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		h := &logCapture{}
		p := bufconntest.Exact()
		p.MaxAttempts = 3
		opts := interceptor.DialOptions(p, testService, interceptor.WithoutThrottle(),
			interceptor.WithObserver(rec), interceptor.WithLogger(slog.New(h)))

		cc := bufconntest.NewServer(t, bufconntest.Steps(failWith(codes.Unavailable))).Conn(t, opts...)
		s, err := testgrpc.NewTestServiceClient(cc).StreamingOutputCall(t.Context(), &testgrpc.StreamingOutputCallRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); status.Code(err) != codes.Unavailable {
			t.Fatalf("Recv: %v, want UNAVAILABLE", err)
		}

		closed := bufconntest.Listen()
		closed.Close()
		down := bufconntest.Dial(t, closed.DialContext, opts...)
		if _, err := testgrpc.NewTestServiceClient(down).StreamingOutputCall(t.Context(), &testgrpc.StreamingOutputCallRequest{}); status.Code(err) != codes.Unavailable {
			t.Fatalf("StreamingOutputCall with no server: %v, want UNAVAILABLE", err)
		}

		if len(rec.ends) != 2 {
			t.Fatalf("%d ends observed, want 2", len(rec.ends))
		}
		for i, e := range rec.ends {
			if e.Code != codes.Unavailable || e.Attempts != 3 || e.Reason != grpcbackoff.ReasonExhausted || e.Delay != 3*time.Second || !e.StaticMethod {
				t.Errorf("end %d = %+v, want UNAVAILABLE after 3 attempts, exhausted, 3s of delay, StaticMethod", i, e)
			}
		}
		var gaveUp int
		for _, l := range h.lines {
			if strings.HasPrefix(l, "WARN grpcbackoff: gave up method=/grpc.testing.TestService/StreamingOutputCall attempts=3 code=Unavailable reason=attempts exhausted") {
				gaveUp++
			}
		}
		if gaveUp != 2 {
			t.Errorf("%d give-ups logged, want 2; log:\n%s", gaveUp, strings.Join(h.lines, "\n"))
		}
	})
}

// TestLoggerRateLimitsRefusedHedges: once the budget is spent, every hedged
// call has its hedge refused; WithLogger logs that at most once a second
// per target, while observers are still told of each. Before issue 20 each
// hedged call logged a Warn line.
func TestLoggerRateLimitsRefusedHedges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &logCapture{}
		rec := &recorder{}
		r, err := interceptor.New(bufconntest.Exact(), interceptor.WithLogger(slog.New(h)), interceptor.WithObserver(rec),
			interceptor.WithHedging("/pkg.Svc/Get", grpcbackoff.Hedging{MaxAttempts: 2, Delay: 10 * time.Millisecond}),
			interceptor.WithThrottle(grpcbackoff.Throttle{Burst: 1}))
		if err != nil {
			t.Fatal(err)
		}
		slow := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
			<-time.After(20 * time.Millisecond)
			return nil
		}
		// 100 hedged calls over 2.5 s: the first spends the one saved retry,
		// the 99 others have their hedge refused.
		for range 100 {
			if err := r.Unary()(t.Context(), "/pkg.Svc/Get", "req", new(string), nil, slow); err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		refused := 0
		for _, x := range rec.retries {
			if x.Hedge && x.Throttled {
				refused++
			}
		}
		logged := 0
		for _, l := range h.lines {
			if strings.Contains(l, "hedge throttled") {
				logged++
			}
		}
		if refused != 99 || logged != 3 {
			t.Errorf("%d refused hedges told to observers, %d logged; want 99 and 3 (at 0, 1 and 2 s)", refused, logged)
		}
	})
}

// TestStreamCommittedAfterRetry: a stream whose first attempt fails, and
// whose second sends headers and then fails, ends as a unary call does: the
// committed attempt's code, in a *grpcbackoff.Error of 2 attempts whose
// Reason is ReasonNotRetryable, and observers see the call give up. Before,
// the stream returned the bare error and its End had no Reason.
func TestStreamCommittedAfterRetry(t *testing.T) {
	for _, k := range allKinds {
		t.Run(k.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				unavailable := status.Error(codes.Unavailable, "down")
				srv := bufconntest.NewServer(t, bufconntest.Steps(bufconntest.Fail(unavailable), bufconntest.Step{Header: true, Err: unavailable}))
				rec := &recorder{}
				c := srv.Client(t, interceptor.DialOptions(bufconntest.Exact(), testService, interceptor.WithoutThrottle(), interceptor.WithObserver(rec))...)
				r := runCall(t.Context(), c, k, hostileMessages, howToRun{})
				var e *grpcbackoff.Error
				if !errors.As(r.Err, &e) || e.Attempts != 2 || e.Reason != grpcbackoff.ReasonNotRetryable || status.Code(r.Err) != codes.Unavailable {
					t.Errorf("err = %v, want UNAVAILABLE in a *grpcbackoff.Error of 2 attempts, not retryable", r.Err)
				}
				if len(rec.ends) != 1 || rec.ends[0].Attempts != 2 || !rec.ends[0].GaveUp() || rec.ends[0].Reason != grpcbackoff.ReasonNotRetryable {
					t.Errorf("ends = %+v, want one: 2 attempts, gave up, not retryable", rec.ends)
				}
				if n := srv.Count(); n != 2 {
					t.Errorf("the server saw %d attempts, want 2", n)
				}
			})
		})
	}
}
