package stream

import (
	"context"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A stream's attempt is cut once the caller has waited AttemptTimeout in
// one operation while the server has not answered (see interceptor.Stream).

// watch starts, with an AttemptTimeout, the goroutine that waits for the
// response headers of a, which has just become the current attempt.
func (s *Stream) watch(a *streamAttempt) {
	if s.timeout > 0 {
		go s.watchHeaders(a, a.cs)
	}
}

// watchHeaders waits for the response headers of attempt a, whose stream is
// cs, and commits the stream when they arrive: from then on a is never cut.
func (s *Stream) watchHeaders(a *streamAttempt, cs grpc.ClientStream) {
	var md metadata.MD
	var err error
	if !s.guard(false, func() { md, err = cs.Header() }) || md == nil || err != nil {
		return // a ended without headers: a receive tells how
	}
	s.mu.Lock()
	if a == s.cur && !a.done {
		s.answeredLocked(a)
	}
	s.mu.Unlock()
}

// waitLocked notes that the caller started waiting in an operation of kind
// o on attempt a, and arms a's timer if the server has not answered.
func (s *Stream) waitLocked(a *streamAttempt, o op) {
	if s.timeout <= 0 || a.answered || a.done {
		return
	}
	a.waiting[o] = time.Now()
	s.armLocked(a)
}

// doneWaitingLocked notes that the caller's operation of kind o on a
// ended. A message sent means the caller is still making its request,
// which the server may rightly wait for in full before it answers: a
// receive or Header under way waits from then on.
func (s *Stream) doneWaitingLocked(a *streamAttempt, o op) {
	if s.timeout <= 0 {
		return
	}
	a.waiting[o] = time.Time{}
	if o == opSend {
		now := time.Now()
		for _, w := range [...]op{opRecv, opHeader} {
			if !a.waiting[w].IsZero() {
				a.waiting[w] = now
			}
		}
	}
	s.armLocked(a)
}

// armLocked sets a's timer to fire AttemptTimeout after the earliest wait
// under way, or stops it if none is.
func (s *Stream) armLocked(a *streamAttempt) {
	var earliest time.Time
	for _, t := range a.waiting {
		if !t.IsZero() && (earliest.IsZero() || t.Before(earliest)) {
			earliest = t
		}
	}
	if earliest.IsZero() || a.answered || a.done {
		if a.timer != nil {
			a.timer.Stop()
		}
		return
	}
	d := time.Until(earliest.Add(s.timeout))
	if a.timer == nil {
		a.timer = time.AfterFunc(d, func() { s.cutAttempt(a) })
	} else {
		a.timer.Reset(d)
	}
}

// cutAttempt is attempt a's AttemptTimeout: it ends a if the caller has
// waited that long in one operation and the server has not answered.
func (s *Stream) cutAttempt(a *streamAttempt) {
	s.mu.Lock()
	cut := false
	if !a.done && !a.answered {
		now := time.Now()
		for _, t := range a.waiting {
			if !t.IsZero() && !now.Before(t.Add(s.timeout)) {
				cut = true
			}
		}
		if !cut {
			s.armLocked(a) // a wait ended and another began: not yet
		}
	}
	var cancel context.CancelFunc
	if cut {
		a.cut, cancel = true, a.cancel
	}
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// failureLocked returns how attempt a failed, given the error err it
// returned: an attempt cut by its AttemptTimeout, the caller's context being
// live, fails with DEADLINE_EXCEEDED, and cut says so.
func (s *Stream) failureLocked(a *streamAttempt, err error) (_ error, cut bool) {
	if !a.cut || err == io.EOF || s.ctx.Err() != nil {
		return err, false
	}
	return status.Errorf(codes.DeadlineExceeded,
		"interceptor: attempt cut by its AttemptTimeout (%v): the caller waited that long for the server", s.timeout), true
}
