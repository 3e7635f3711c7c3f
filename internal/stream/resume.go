package stream

import (
	"context"
	"io"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/resume"
)

// A server stream with a resume rule (interceptor.WithResume) that fails
// after it committed is resumed, as a retry is made: the failure is decided
// on as a retry's (the run of attempts starting again at an open that
// delivered a message), the rule makes the request of the next attempt
// between the decision and its reservation (rewrite), the next attempt gets
// it as the kept messages are replayed, and the stream is open again,
// uncommitted until that attempt answers. Only a receive finds out that a
// committed attempt failed: RecvMsg resumes. The rule's state records each
// message as RecvMsg receives it, on the caller's goroutine, without mu.

// resumableLocked reports whether the stream, committed, resumes when its
// current attempt fails. mu is held.
func (s *Stream) resumableLocked() bool {
	return s.rs != nil && s.phase == streamCommitted
}

// resumeLocked resumes the stream, committed, whose current attempt a failed
// with err (not io.EOF): if a delivered a message, the run of attempts
// starts again at a (loop.Call.Progress); the retry then replaces a
// (retryLocked), asking the rule for the request once the failure is
// decided on. It returns nil when the next attempt is current, and
// otherwise the error the stream ended with: io.EOF when the rule said the
// stream is complete. mu is held on entry and on return.
func (s *Stream) resumeLocked(a *streamAttempt, err error) error {
	if a.delivered {
		s.c.Progress()
	}
	s.resuming = true
	return s.retryLocked(a, err)
}

// rewrite asks the rule for the request of the resumed stream's next
// attempt, which failed with err, once the retry is decided on, and keeps
// it to be sent (replay). It returns nil if the stream reopens, and
// otherwise the error it ends with: io.EOF when the rule says it is
// complete, err itself, unwrapped whatever resumes came before, when the
// rule cannot resume it (ReasonNotRetryable), the rule's INTERNAL error when it broke
// its contract. It runs without mu; a panic in the rule goes on up.
func (s *Stream) rewrite(err error) error {
	req, o, why := s.rs.Reopen()
	switch o {
	case resume.Done:
		return io.EOF
	case resume.Cannot:
		// The server's failure itself, after resumes too (issue 43): the
		// caller, who may resume by hand, gets what the server said; the
		// observers are told why the stream ended.
		s.c.Fail(err, grpcbackoff.ReasonNotRetryable)
		return err
	case resume.Invalid:
		return s.c.Fail(why, grpcbackoff.ReasonNotRetryable)
	}
	n, _ := sizeOf(req)
	s.mu.Lock()
	s.sent, s.size = append(s.sent0[:0], req), n
	s.mu.Unlock()
	return nil
}

// keepFaceLocked keeps, for a stream with a resume rule, the headers md and
// the peer p of the open it committed to, once that open failed: Header
// returns those headers from then on, at once, and Context carries the
// peer. mu is held.
func (s *Stream) keepFaceLocked(md metadata.MD, p *peer.Peer) {
	if s.rs != nil && s.header == nil {
		s.header, s.peer = md, p
	}
}

// resumableContext is Context for a stream with a resume rule: the
// stream's own context, made once, with the caller's values and the peer
// of the open the stream committed to (before it committed, the current
// one's), done when the stream ends or the caller's context is. It does
// not commit the stream.
func (s *Stream) resumableContext() context.Context {
	s.mu.Lock()
	s.raiseLocked()
	if s.ownCtx != nil {
		ctx := s.ownCtx
		s.mu.Unlock()
		return ctx
	}
	p, cs := s.peer, s.cur.cs
	s.mu.Unlock()
	if p == nil && cs != nil {
		s.guard(true, func() { p, _ = peer.FromContext(cs.Context()) })
	}
	ctx, cancel := context.WithCancel(s.ctx)
	if p != nil {
		ctx = peer.NewContext(ctx, p)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ownCtx != nil { // another goroutine made it meanwhile
		cancel()
		return s.ownCtx
	}
	s.ownCtx, s.ownCancel = ctx, cancel
	if s.endSeen || s.broken {
		cancel()
	}
	return ctx
}
