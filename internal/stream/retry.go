package stream

import (
	"context"
	"time"

	"google.golang.org/grpc"

	"github.com/platformkit/grpcbackoff/internal/attempt"
	"github.com/platformkit/grpcbackoff/internal/gate"
	"github.com/platformkit/grpcbackoff/internal/loop"
)

// Only a receive (the caller's RecvMsg, or Header learning how an attempt
// without headers ended) finds out that an attempt failed before the
// commit; that goroutine replaces it (retryLocked), through the retry loop
// (internal/loop), and a new attempt opens (openAttempt).

// openAttempt opens attempt a on ctx. a runs under a context of its own,
// which ending it cancels (a cut, a panic that broke the stream, its
// replacement), with the caller's options, the layer mark (loop.Mark) and
// a grpc.OnFinish of its own, by which grpc-go tells that it had the
// opening. It is called without mu.
func (s *Stream) openAttempt(ctx context.Context, a *streamAttempt) error {
	ctx, a.cancel = context.WithCancel(ctx)
	if s.timeout > 0 {
		s.mu.Lock()
		s.waitLocked(a, opOpen)
		s.mu.Unlock()
	}
	opts := append(s.opts[:len(s.opts):len(s.opts)], loop.Mark, grpc.OnFinish(a.finished))
	if s.c.Plan.CountGRPC {
		opts = append(opts, a.grpcs.CallOption(s.opts))
	}
	var cs grpc.ClientStream
	var err error
	s.guard(true, func() { cs, err = s.streamer(ctx, s.desc, s.c.CC, s.c.Plan.Method, opts...) })
	a.cs = cs
	if s.timeout > 0 {
		s.mu.Lock()
		s.doneWaitingLocked(a, opOpen)
		s.mu.Unlock()
	}
	return err
}

// retryLocked replaces attempt a, the current one, which failed with err
// before the stream committed (or after, to resume it: resumeLocked): it
// takes the retry loop's step (decide, reserve, wait, pay), then opens
// attempts until one opens or retrying ends. It returns nil when a new attempt is current
// (and gets the kept messages from a replay), and otherwise the error the
// stream ended with. mu is held on entry and on return, and released while
// it waits and opens; meanwhile the phase is streamRetrying, and this
// goroutine alone uses s.c. During the wait the failed attempt's stream is
// let go: only its trailer is kept.
func (s *Stream) retryLocked(a *streamAttempt, err error) error {
	s.phase = streamRetrying
	for {
		cs, f := s.letGoLocked(a, err)
		s.mu.Unlock()
		next, err, final := s.reopen(a, cs, f)
		s.mu.Lock()
		if final == nil && err == nil && s.sentAfterClose {
			// The caller sent after CloseSend meanwhile, and was told
			// INTERNAL: the stream ends with it, as grpc-go's does.
			next.release()
			final = errSendAfterClose
		}
		switch {
		case final != nil:
			s.phase, s.err = streamEnded, final
			s.releaseSent()
			s.changed.Broadcast()
			return final
		case err == nil:
			s.installLocked(next)
			return nil
		}
		a = next // its opening failed: retried in turn
	}
}

// letGoLocked records how attempt a, the current one, failed with err, and
// lets it go; it returns a's stream, if a opened one, whose trailer is read
// without mu, and a's failure but its trailer. The attempt was sent if it
// opened: grpc-go returns a stream only once it made a transport stream. An
// opening that failed was not, if grpc-go had it; if not (an interceptor
// chained after this one failed it), gRPC does not tell. mu is held.
func (s *Stream) letGoLocked(a *streamAttempt, err error) (grpc.ClientStream, attempt.Failure) {
	err, cut := s.failureLocked(a, err)
	loop.Record(s.ctx, s.c.Conn, err, gate.Outcome{Reservation: s.c.Reservation()})
	cs := a.cs
	a.release()
	a.cs = nil
	f := attempt.Failure{Err: err, Sent: cs != nil || !a.reached.Load(), Cut: cut, Opening: s.opening, GRPCRetried: a.grpcs.GRPCRetried()}
	s.opening = false
	return cs, f
}

// reopen replaces a, which failed as f (its stream cs, nil if it opened
// none): it reads a's trailer, takes the retry loop's step, and opens the
// next attempt. It returns that attempt and its opening's error, or the
// error the stream ends with (final). The step is Decide then Proceed
// (loop.Call.Next), and, for a resume, the rule's request made between them
// (rewrite): a rule that cannot resume costs no reservation nor wait. It
// runs without mu; a panic in the code under the stream, or in the rule,
// goes on up (guard), the next attempt let go.
func (s *Stream) reopen(a *streamAttempt, cs grpc.ClientStream, f attempt.Failure) (next *streamAttempt, err, final error) {
	s.guard(true, func() {
		opened := false
		defer func() {
			if !opened && next != nil { // a panic in the code under the stream: next is not kept
				s.mu.Lock()
				next.release()
				s.mu.Unlock()
			}
		}()
		if cs != nil {
			f.Trailer = cs.Trailer()
			f.Status = len(f.Trailer) > 0
		}
		s.mu.Lock()
		a.trailer = f.Trailer
		f.Status = f.Status && !a.answered // a server that answered acted on the call, whatever its status
		resuming := s.resuming
		s.resuming = false
		s.mu.Unlock()
		var d time.Duration
		if d, final = s.c.Decide(s.ctx, f); final == nil && resuming {
			final = s.rewrite(f.Err)
		}
		if final == nil {
			final = s.c.Proceed(s.ctx, &f, d)
		}
		if final == nil {
			ctx := s.c.NextAttempt(s.ctx)
			next = new(streamAttempt)
			err = s.openAttempt(ctx, next)
		}
		opened = true
	})
	return next, err, final
}

// installLocked makes next, which has just opened, the current attempt: it
// gets the kept messages from a replay, and the stream commits to it if a
// message sent during the backoff went past the buffer limit. mu is held.
func (s *Stream) installLocked(next *streamAttempt) {
	s.cur.trailer = nil // the failed attempt's: nothing of it outlives the next one's start
	s.cur, s.phase = next, streamOpen
	s.watch(next)
	if len(s.sent) > 0 || s.closed {
		next.replaying = true
		go s.replay(next)
	}
	if s.commitNext {
		s.commitNext = false
		s.commitLocked()
	}
	s.changed.Broadcast()
}
