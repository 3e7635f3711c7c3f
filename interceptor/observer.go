package interceptor

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/loop"
)

// An Observer is told how each call went: of every retry decision, and once
// of the call's end. It is the seam for metrics, traces and logs; the module
// github.com/platformkit/grpcbackoff/opentelemetry implements one, so that
// this module does not depend on OpenTelemetry.
//
// Its methods run on the caller's goroutine, for calls on many goroutines at
// once: they must be safe for concurrent use and must not block. ctx is the
// call's context (the caller's span, if any, is in it).
type Observer interface {
	// OnRetry is called when an attempt failed and the call decided to
	// retry, before the wait, and when a retry was refused by the retry
	// budget (r.Throttled).
	OnRetry(ctx context.Context, r Retry)
	// OnEnd is called once per call that a retry policy applies to, when it
	// ends: for a unary call, when the interceptor returns; for a stream,
	// when the caller's RecvMsg returns its final error or io.EOF. A stream
	// that the caller abandons before that has no end to report.
	OnEnd(ctx context.Context, e End)
}

// Retry describes one retry decision, as passed to the hook set with
// WithOnRetry: attempt number Attempt of Method failed with Err, the server
// hinted Hint, and the next attempt starts after Delay (the longer of the
// Policy's backoff and Hint.Delay), unless Throttled, in which case there is
// none.
type Retry struct {
	Method string
	// StaticMethod is true when the call carried grpc.StaticMethod(), as in
	// End.
	StaticMethod bool
	// Target is the target of the call's ClientConn (cc.Target()), "" when
	// the interceptor was called without one.
	Target string
	// Conn is the call's ClientConn, as in End.
	Conn      *grpc.ClientConn
	Attempt   int
	Code      codes.Code
	Err       error
	Hint      grpcbackoff.Hint
	Delay     time.Duration
	Throttled bool
	// Hedge says the next attempt is a hedge (WithHedging), sent Delay after
	// the attempt before it; Code and Err are those of the last attempt that
	// failed with a non-fatal code, if one did (OK and nil otherwise).
	Hedge bool
}

// End describes how a call ended, as passed to Observer.OnEnd.
type End struct {
	// Method is the full method name, "/pkg.Service/Method".
	Method string
	// StaticMethod is true when the call carried grpc.StaticMethod(), as
	// the calls of generated stubs do: Method is then one of a fixed set of
	// names, safe to record as a metric label (gRFC A66).
	StaticMethod bool
	// Target is the target of the call's ClientConn (cc.Target()), "" when
	// the interceptor was called without one.
	Target string
	// Conn is the call's ClientConn, nil when the interceptor was called
	// without one. Observers may read it (Conn.CanonicalTarget(), for a
	// metric label) but should not hold on to it.
	Conn *grpc.ClientConn
	// Code is the call's final status code (OK for success).
	Code codes.Code
	// Err is the error the caller got; nil for success.
	Err error
	// Attempts is the number of attempts sent, the first one and hedges
	// included: the call's retries are Attempts-1-Hedges.
	Attempts int
	// Delay is the total time the call spent with no attempt in flight:
	// the sum of its waits between attempts.
	Delay time.Duration
	// Hedged says a hedging policy applied to the call (WithHedging).
	Hedged bool
	// Hedges is the number of attempts sent as hedges (see WithHedging);
	// the call's retries are Attempts − 1 − Hedges.
	Hedges int
	// Reason says why retrying stopped, for a call that ended with an error
	// after a retry was asked for; 0 otherwise.
	Reason grpcbackoff.Reason
}

// GaveUp reports whether the call gave up: it ended failing after a retry
// was asked for (after retries, or with its only attempt's code retryable but
// no retry allowed). A first attempt that failed with a code that is not
// retryable did not give up: nothing asked for a retry; nor did a call that
// handed its error to its Google Cloud client's own retry
// (ReasonClientRetries).
func (e End) GaveUp() bool {
	return e.Reason != grpcbackoff.ReasonNone && e.Reason != grpcbackoff.ReasonClientRetries &&
		!(e.Reason == grpcbackoff.ReasonNotRetryable && e.Attempts == 1)
}

// WithObserver adds o to the observers of the Retrier; each is told of
// every retry decision and call end, in the order they were added.
func WithObserver(o Observer) Option {
	return func(r *Retrier) error {
		if o == nil {
			return errors.New("interceptor: WithObserver(nil): the observer is nil")
		}
		r.observe(o)
		return nil
	}
}

// WithOnRetry sets a function called before each retry wait, and when the
// throttle refuses a retry. It runs on the caller's goroutine and must not
// block. It is WithObserver with an Observer whose OnRetry is f, which new
// code should prefer: an Observer is told of each call's end too.
func WithOnRetry(f func(Retry)) Option {
	return func(r *Retrier) error {
		if f == nil {
			return errors.New("interceptor: WithOnRetry(nil): the function is nil")
		}
		r.observe(hookObserver(f))
		return nil
	}
}

// WithLogger logs, with l, each retry decision at level Info (Warn when
// throttled), and each call that gives up (End.GaveUp) at level Warn with
// its reason. The records carry the call's context. It adds an observer:
// each WithLogger adds its logger; a nil l adds nothing.
func WithLogger(l *slog.Logger) Option {
	return func(r *Retrier) error {
		if l != nil {
			r.observe(&logObserver{l: l})
		}
		return nil
	}
}

// observers are a Retrier's Observers, as the engine's loop.Observer: each
// event is turned into its public form, only for a Retrier that has
// observers, and told to each of them, in the order they were added.
type observers struct{ list []Observer }

// observe adds o to the observers the engine tells; a Retrier without
// observers has no loop.Observer at all.
func (r *Retrier) observe(o Observer) {
	os, _ := r.e.Observer.(*observers)
	if os == nil {
		os = &observers{}
		r.e.Observer = os
	}
	os.list = append(os.list, o)
}

func (os *observers) OnRetry(ctx context.Context, x loop.Retry) {
	r := Retry(x)
	for _, o := range os.list {
		o.OnRetry(ctx, r)
	}
}

func (os *observers) OnEnd(ctx context.Context, x loop.End) {
	for _, o := range os.list {
		o.OnEnd(ctx, End(x))
	}
}

// hookObserver is the Observer of WithOnRetry: it forwards retry decisions.
type hookObserver func(Retry)

func (f hookObserver) OnRetry(_ context.Context, r Retry) { f(r) }

func (hookObserver) OnEnd(context.Context, End) {}

// logObserver is the Observer of WithLogger.
type logObserver struct {
	l *slog.Logger

	// hedgeRefused holds, by target, when the last refused hedge was
	// logged (Unix nanoseconds, *atomic.Int64).
	hedgeRefused sync.Map
}

// OnRetry logs a retry or a hedge at level Info, a refused one at level
// Warn: a refused hedge at most once a second per target, as once the
// budget is spent every hedged call has one.
func (o *logObserver) OnRetry(ctx context.Context, r Retry) {
	level, msg := slog.LevelInfo, "grpcbackoff: retrying"
	switch {
	case r.Hedge && r.Throttled:
		if !o.hedgeRefusedDue(r.Target) {
			return
		}
		level, msg = slog.LevelWarn, "grpcbackoff: hedge throttled"
	case r.Hedge:
		msg = "grpcbackoff: hedging"
	case r.Throttled:
		level, msg = slog.LevelWarn, "grpcbackoff: retry throttled"
	}
	o.l.Log(ctx, level, msg,
		slog.String("method", r.Method), slog.Int("attempt", r.Attempt),
		slog.String("code", r.Code.String()), slog.Duration("delay", r.Delay))
}

// hedgeRefusedDue reports whether a refused hedge to target is to be
// logged now: none was in the last second.
func (o *logObserver) hedgeRefusedDue(target string) bool {
	v, ok := o.hedgeRefused.Load(target)
	if !ok {
		v, _ = o.hedgeRefused.LoadOrStore(target, new(atomic.Int64))
	}
	last := v.(*atomic.Int64)
	now := time.Now().UnixNano()
	prev := last.Load()
	return now-prev >= int64(time.Second) && last.CompareAndSwap(prev, now)
}

// OnEnd logs a call that gave up at level Warn, with the reason.
func (o *logObserver) OnEnd(ctx context.Context, e End) {
	if !e.GaveUp() {
		return
	}
	o.l.Log(ctx, slog.LevelWarn, "grpcbackoff: gave up",
		slog.String("method", e.Method), slog.Int("attempts", e.Attempts),
		slog.String("code", e.Code.String()), slog.String("reason", e.Reason.String()),
		slog.Duration("delay", e.Delay))
}
