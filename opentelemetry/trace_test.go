package opentelemetry_test

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/platformkit/grpcbackoff/internal/bufconntest"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/opentelemetry"
)

// newTracing returns a tracer whose ended spans sr records.
func newTracing() (*tracetest.SpanRecorder, trace.Tracer) {
	sr := tracetest.NewSpanRecorder()
	return sr, sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr)).Tracer("test")
}

func newTracer() trace.Tracer {
	_, tr := newTracing()
	return tr
}

// events writes the events of span as "+<offset from start> name k=v ...".
func events(span sdktrace.ReadOnlySpan, start time.Time) []string {
	var got []string
	for _, e := range span.Events() {
		s := fmt.Sprintf("+%v %s", e.Time.Sub(start), e.Name)
		for _, kv := range e.Attributes {
			s += " " + string(kv.Key) + "=" + kv.Value.String()
		}
		got = append(got, s)
	}
	return got
}

func unavailableRetryIn(d time.Duration) error {
	st, err := status.New(codes.Unavailable, "busy").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

func TestSpanEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sr, tracer := newTracing()
		p := bufconntest.Exact()
		p.MaxAttempts = 3
		rec := newRecorder(t, opentelemetry.Options{})
		ic := interceptor.Unary(p, rec.Option(), interceptor.WithThrottle(grpcbackoff.Throttle{Burst: 3}))

		run := func(s *bufconntest.Invoker) []string {
			start := time.Now()
			ctx, span := tracer.Start(t.Context(), "call")
			call(ctx, ic, s)
			span.End()
			ended := sr.Ended()
			return events(ended[len(ended)-1], start)
		}
		// Exhausted: the server asks for 1.5 s after the first attempt,
		// more than the policy's 1 s; the policy's 2 s after the second.
		got := run(&bufconntest.Invoker{Errs: []error{unavailableRetryIn(1500 * time.Millisecond), status.Error(codes.Unavailable, ""), status.Error(codes.Unavailable, "")}})
		want := []string{
			"+0s grpcbackoff.retry grpcbackoff.attempt=1 grpc.status=UNAVAILABLE grpcbackoff.delay=1.5 grpcbackoff.server_delay=1.5",
			"+1.5s grpcbackoff.retry grpcbackoff.attempt=2 grpc.status=UNAVAILABLE grpcbackoff.delay=2 grpcbackoff.server_delay=0",
			"+3.5s grpcbackoff.gave_up grpcbackoff.attempts=3 grpc.status=UNAVAILABLE grpcbackoff.reason=exhausted grpcbackoff.retry_delay=3.5",
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("events of an exhausted call:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}

		// Success after a retry (its token given back: one left), and a
		// code that is not retryable: no give-up.
		got = run(&bufconntest.Invoker{Errs: bufconntest.Unavailable(1)})
		if len(got) != 1 || !strings.Contains(got[0], "grpcbackoff.retry ") {
			t.Errorf("events of a call that succeeded on its retry: %q, want one retry", got)
		}
		if got = run(&bufconntest.Invoker{Errs: []error{status.Error(codes.NotFound, "")}}); len(got) != 0 {
			t.Errorf("events of a call not retried: %q, want none", got)
		}

		// Throttled: the last token pays for the first retry; the second is
		// refused.
		got = run(&bufconntest.Invoker{Errs: bufconntest.Unavailable(5)})
		want = []string{
			"+0s grpcbackoff.retry grpcbackoff.attempt=1 grpc.status=UNAVAILABLE grpcbackoff.delay=1 grpcbackoff.server_delay=0",
			"+1s grpcbackoff.gave_up grpcbackoff.attempts=2 grpc.status=UNAVAILABLE grpcbackoff.reason=throttled grpcbackoff.retry_delay=1",
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("events of a throttled call:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}

	})
}

// eventCounter is a span that is not recording and counts the events added
// to it anyway.
type eventCounter struct {
	tracenoop.Span
	n *int
}

func (s eventCounter) AddEvent(string, ...trace.EventOption) { *s.n++ }

func TestNoEventsOnSpanNotRecording(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n int
		ctx := trace.ContextWithSpan(t.Context(), eventCounter{n: &n})
		p := bufconntest.Exact()
		p.MaxAttempts = 3
		ic := interceptor.Unary(p, newRecorder(t, opentelemetry.Options{}).Option())
		if err := call(ctx, ic, &bufconntest.Invoker{Errs: bufconntest.Unavailable(5)}); status.Code(err) != codes.Unavailable {
			t.Fatalf("err = %v, want UNAVAILABLE after retries", err)
		}
		if n != 0 {
			t.Errorf("%d events added to a span not recording, want 0", n)
		}
	})
}
