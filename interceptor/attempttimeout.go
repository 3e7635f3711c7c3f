package interceptor

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Policy.AttemptTimeout bounds an attempt the server has not answered. Once
// the attempt's response headers arrive, the server has the call: the
// attempt is never cut, nor resent, and runs to the call's own bounds (the
// caller's deadline, a service config's timeout), as a stream's does. This
// file holds a unary attempt's timer, hedged or not; a stream's timers are
// in stream.go.

// attemptTimer is the AttemptTimeout of one unary attempt: it cancels the
// attempt when its time is up, unless the attempt's response headers
// arrived first. The timeout is not sent to the server as a deadline: a
// server with the call must not cut it either.
type attemptTimer struct {
	cancel context.CancelFunc
	timer  *time.Timer
	state  atomic.Int32 // timerRunning, timerAnswered or timerFired
	header metadata.MD  // the attempt's response headers, with Unary alone (no stats handler)
}

const (
	timerRunning  int32 = iota
	timerAnswered       // the response headers arrived: never cut
	timerFired          // the time was up first: the attempt was cut
)

// headerListener is told when the response headers of the attempt whose
// context carries it (headerKey) arrive: an attemptTimer, or a hedged
// attempt.
type headerListener interface{ headersArrived() }

// startAttemptTimer starts the timer t of an attempt whose context will be
// the returned one, derived from actx.
func startAttemptTimer(actx context.Context, t time.Duration) (context.Context, *attemptTimer) {
	at := &attemptTimer{}
	actx, at.cancel = context.WithCancel(actx)
	at.timer = time.AfterFunc(t, at.fire)
	return actx, at
}

func (at *attemptTimer) fire() {
	if at.state.CompareAndSwap(timerRunning, timerFired) {
		at.cancel()
	}
}

// headersArrived stops the timer: the server has the attempt.
func (at *attemptTimer) headersArrived() {
	if at.state.CompareAndSwap(timerRunning, timerAnswered) {
		at.timer.Stop()
	}
}

// stop releases the timer and the attempt's context once the attempt ended.
func (at *attemptTimer) stop() {
	at.timer.Stop()
	at.cancel()
}

// cut reports whether the attempt, which failed with err in a call whose
// context is ctx, was cut by its timer while ctx was live.
func (at *attemptTimer) cut(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && at.state.Load() == timerFired
}

// cutError is the error of a unary attempt cut by its AttemptTimeout t.
func cutError(t time.Duration) error {
	return status.Errorf(codes.DeadlineExceeded, "interceptor: attempt cut by its AttemptTimeout (%v): the server had not answered", t)
}

// answered reports whether the attempt's response headers arrived: seen by
// the stats handler as they came, or, with Unary alone, found in the
// attempt's outputs once it ended.
func (at *attemptTimer) answered() bool {
	return at.state.Load() == timerAnswered || at.header != nil
}
