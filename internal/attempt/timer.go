package attempt

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Policy.AttemptTimeout bounds an attempt the server has not answered. Once
// the attempt's response headers arrive, the server has the call: the
// attempt is never cut, nor resent, and runs to the call's own bounds (the
// caller's deadline, a service config's timeout). This file holds a unary
// attempt's timer, hedged or not; a stream's attempt, whose caller may be
// slow, is timed by the stream machine (internal/stream).

// Timer is the AttemptTimeout of one unary attempt: it cancels the
// attempt when its time is up, unless the attempt's response headers
// arrived first. The timeout is not sent to the server as a deadline: a
// server with the call must not cut it either.
type Timer struct {
	cancel context.CancelFunc
	timer  *time.Timer
	state  atomic.Int32 // timerRunning, timerAnswered or timerFired
}

const (
	timerRunning  int32 = iota
	timerAnswered       // the response headers arrived: never cut
	timerFired          // the time was up first: the attempt was cut
)

// StartTimer starts the timer t of an attempt whose context will be the
// returned one, derived from actx.
func StartTimer(actx context.Context, t time.Duration) (context.Context, *Timer) {
	at := &Timer{}
	actx, at.cancel = context.WithCancel(actx)
	at.timer = time.AfterFunc(t, at.fire)
	return actx, at
}

func (at *Timer) fire() {
	if at.state.CompareAndSwap(timerRunning, timerFired) {
		at.cancel()
	}
}

// HeadersArrived stops the timer: the server has the attempt.
func (at *Timer) HeadersArrived() {
	if at.state.CompareAndSwap(timerRunning, timerAnswered) {
		at.timer.Stop()
	}
}

// Stop releases the timer and the attempt's context once the attempt ended.
func (at *Timer) Stop() {
	at.timer.Stop()
	at.cancel()
}

// Cut reports whether the attempt, which failed with err in a call whose
// context is ctx, was cut by its timer while ctx was live.
func (at *Timer) Cut(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && at.state.Load() == timerFired
}

// CutError is the error of a unary attempt cut by its AttemptTimeout t.
func CutError(t time.Duration) error {
	return status.Errorf(codes.DeadlineExceeded, "interceptor: attempt cut by its AttemptTimeout (%v): the server had not answered", t)
}

// Answered reports whether the stats handler saw the attempt's response
// headers arrive before its time was up. (With the unary interceptor
// alone, no stats handler, grpc.Header tells it once the attempt ended.)
func (at *Timer) Answered() bool {
	return at.state.Load() == timerAnswered
}
