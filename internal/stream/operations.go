package stream

import (
	"context"
	"io"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/platformkit/grpcbackoff/internal/gate"
	"github.com/platformkit/grpcbackoff/internal/loop"
)

// The caller's operations, each under mu: it looks at the phase and the
// current attempt, decides, then acts without mu (see Stream).

// SendMsg keeps m for a replay until the stream commits, and sends it to
// the current attempt unless a retry or a replay is under way.
func (s *Stream) SendMsg(m any) error {
	n, keepable := sizeOf(m)
	s.mu.Lock()
	if s.rs != nil && s.sends == 0 && s.phase != streamEnded {
		if err := s.rs.Sent(m); err != nil {
			s.mu.Unlock()
			return err // not the resume rule's request: nothing is sent
		}
	}
	// A message that cannot be kept waits out a retry under way: the stream
	// commits to the next attempt, which must get the kept ones first.
	s.awaitLocked(func() bool { return s.phase != streamRetrying || keepable || s.sendsClosedLocked() })
	switch {
	case s.phase == streamEnded:
		s.mu.Unlock()
		return io.EOF // the stream is over: RecvMsg says how
	case s.sendsClosedLocked():
		// As grpc-go: INTERNAL ("SendMsg called after CloseSend"), and the
		// stream ends with it; nothing reaches the server. During a retry,
		// at once: the retry ends the stream when it resumes.
		if s.phase == streamRetrying {
			s.sentAfterClose = true
			s.mu.Unlock()
			return errSendAfterClose
		}
		s.commitLocked()
	case s.phase == streamRetrying || s.phase == streamOpen && keepable && s.size+n <= s.c.Engine().BufLimit:
		// Kept for a replay. During a retry's backoff m is kept whatever the
		// limit, and SendMsg returns at once; past the limit, the stream
		// commits to the next attempt once the kept messages reached it.
		s.commitNext = s.commitNext || s.size+n > s.c.Engine().BufLimit
		s.sent = append(s.sent, m)
		s.size += n
		s.sends++
		return s.sendKeptLocked(m)
	case s.phase == streamOpen:
		s.commitLocked() // m cannot be kept
	}
	// Committed: m goes to the current attempt, after the replayed messages.
	s.awaitLocked(func() bool { return !s.cur.replaying })
	s.sends++
	cs := s.cur.cs
	s.mu.Unlock()
	var err error
	s.guard(true, func() { err = cs.SendMsg(m) })
	return err
}

// CloseSend half-closes the current attempt; while a retry or a replay is
// under way, the next attempt is closed once it has the kept messages.
func (s *Stream) CloseSend() error {
	s.mu.Lock()
	s.raiseLocked()
	if s.phase == streamEnded {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	a := s.cur
	// While a retry or a replay is under way, it closes the next attempt.
	cs := a.cs
	direct := s.phase != streamRetrying && !a.broken && !a.replaying && cs != nil
	s.mu.Unlock()
	var err error
	if direct {
		s.guard(true, func() { err = cs.CloseSend() })
	}
	return err
}

// RecvMsg receives from the current attempt; a failure before the commit
// is retried (retryLocked), one after it ends the stream, or resumes it if
// it has a resume rule (resumeLocked).
func (s *Stream) RecvMsg(m any) error {
	s.mu.Lock()
	for {
		// One receiver at a time, on the current attempt.
		s.awaitLocked(func() bool { return s.phase == streamEnded || s.phase != streamRetrying && !s.cur.receiving })
		if s.phase == streamEnded {
			err := s.err
			s.mu.Unlock()
			return s.ended(err)
		}
		a := s.cur
		a.receiving = true
		s.waitLocked(a, opRecv)
		cs := a.cs
		s.mu.Unlock()
		var err error
		var md metadata.MD
		var p *peer.Peer
		s.guard(true, func() {
			switch err = cs.RecvMsg(m); {
			case err == nil && s.rs != nil:
				s.rs.Received(m) // the resume rule's record, before the caller has m
			case err != nil && err != io.EOF:
				// Whether response headers came before the failure: if so,
				// the server has the call, and it commits (gRFC A6).
				if md, _ = cs.Header(); md != nil && s.rs != nil {
					p, _ = peer.FromContext(cs.Context()) // kept if the stream resumes
				}
			}
		})
		s.mu.Lock()
		s.raiseLocked() // a panic on another goroutine ended a under this one
		s.doneWaitingLocked(a, opRecv)
		if md != nil {
			s.answeredLocked(a)
			s.keepFaceLocked(md, p)
		}
		if err != nil && err != io.EOF && (s.phase == streamOpen || s.rs != nil) {
			// Learn how the replay to a ended before deciding: it may have
			// committed the stream. a ended, so the replay ends soon.
			// Meanwhile a stays in this goroutine's hands (receiving), so
			// that Header leaves it alone.
			s.awaitLocked(func() bool { return !a.replaying })
		}
		a.receiving = false
		s.changed.Broadcast()
		if err == nil {
			count := s.countLocked(a)
			a.delivered = true
			s.answeredLocked(a)
			if s.desc.ServerStreams {
				s.mu.Unlock()
				s.count(count, false)
				return nil
			}
			// A client stream's only response ends it.
			a.release()
			s.mu.Unlock()
			s.count(count, true)
			s.ended(io.EOF)
			return nil
		}
		// Only a receiver retries, and a had one, this goroutine: a is still
		// the current attempt, and the phase is open or committed.
		if err != io.EOF && s.resumableLocked() {
			if final := s.resumeLocked(a, err); final != nil {
				s.mu.Unlock()
				return s.ended(final)
			}
			continue
		}
		if s.phase == streamOpen && err != io.EOF {
			if final := s.retryLocked(a, err); final != nil {
				s.mu.Unlock()
				return s.ended(final)
			}
			continue
		}
		count := err == io.EOF && s.phase == streamOpen && s.countLocked(a) // the stream ended well
		served := err == io.EOF && !count                                   // after its first response (count recorded it then)
		s.commitLocked()
		err, _ = s.failureLocked(a, err)
		if err != io.EOF && s.c.Attempts > 1 {
			// After retries, as a unary call's: the committed attempt's
			// error, with the call's attempts and why retrying stopped.
			err = s.c.Committed(s.ctx, err)
		}
		a.release()
		s.mu.Unlock()
		s.count(count, true)
		if served {
			s.served()
		}
		return s.ended(err)
	}
}

// Header returns the current attempt's response headers, which commit the
// stream; an attempt that ended without any is retried, as by RecvMsg. A
// stream with a resume rule whose committed open failed returns that
// open's, at once.
func (s *Stream) Header() (metadata.MD, error) {
	s.mu.Lock()
	for {
		s.raiseLocked()
		if s.header != nil {
			md := s.header
			s.mu.Unlock()
			return md, nil
		}
		s.awaitLocked(func() bool { return s.phase != streamRetrying })
		switch s.phase {
		case streamEnded:
			s.mu.Unlock()
			return nil, nil // as grpc: RecvMsg returns the error
		case streamCommitted:
			cs := s.cur.cs
			s.mu.Unlock()
			var md metadata.MD
			var err error
			s.guard(true, func() { md, err = cs.Header() })
			return md, err
		}
		a := s.cur
		s.waitLocked(a, opHeader)
		cs := a.cs
		s.mu.Unlock()
		var md metadata.MD
		var err error
		s.guard(true, func() { md, err = cs.Header() })
		s.mu.Lock()
		s.raiseLocked()
		s.doneWaitingLocked(a, opHeader)
		if a != s.cur || s.phase == streamRetrying || s.phase == streamEnded {
			continue // a failed meanwhile: its headers are not the stream's
		}
		if md != nil || err != nil {
			s.answeredLocked(a) // the headers arrived
			s.mu.Unlock()
			return md, err
		}
		// No headers: a ended without any (trailers only), so without a
		// message either, and receiving from it returns how it ended.
		if s.headerlessLocked(a) {
			s.mu.Unlock()
			return nil, nil
		}
	}
}

// headerlessLocked handles, for Header, the current attempt a, which ended
// without headers. If the caller's RecvMsg is receiving from a (or a replay
// to a has not ended), it waits for a change and leaves a to RecvMsg;
// otherwise it receives from a to learn how a ended, and retries it if it
// should. It reports whether Header is done: the stream committed or ended.
func (s *Stream) headerlessLocked(a *streamAttempt) (done bool) {
	if a.receiving || a.replaying {
		s.awaitLocked(func() bool { return !a.receiving && !a.replaying || a != s.cur || s.phase != streamOpen })
		return false
	}
	a.receiving = true
	cs := a.cs
	s.mu.Unlock()
	var err error
	s.guard(true, func() { err = cs.RecvMsg(new(emptypb.Empty)) })
	s.mu.Lock()
	s.raiseLocked()
	a.receiving = false
	s.changed.Broadcast()
	if s.phase != streamOpen || err == nil || err == io.EOF {
		// io.EOF: a ended well; the caller's RecvMsg gets io.EOF from it.
		// (nil cannot happen: a message would have come with headers.)
		s.commitLocked()
		return true
	}
	return s.retryLocked(a, err) != nil
}

// Trailer returns the current attempt's trailer: once the stream ended, the
// trailer of the attempt that ended it.
func (s *Stream) Trailer() metadata.MD {
	s.mu.Lock()
	s.raiseLocked()
	a := s.cur
	cs, trailer := a.cs, a.trailer
	s.mu.Unlock()
	if cs != nil {
		s.guard(true, func() { trailer = cs.Trailer() })
	}
	return trailer
}

// Context commits the stream, as grpc's own retry does: the context is the
// current attempt's. While a retry is under way, it waits for the next
// attempt. A stream with a resume rule has its own (resumableContext).
func (s *Stream) Context() context.Context {
	if s.rs != nil {
		return s.resumableContext()
	}
	s.mu.Lock()
	s.awaitLocked(func() bool { return s.phase != streamRetrying })
	s.commitLocked()
	cs := s.cur.cs
	s.mu.Unlock()
	if cs == nil {
		// The stream ended while it retried: no attempt is left. As a
		// grpc-go stream's that ended, its context is done.
		ctx, cancel := context.WithCancel(s.ctx)
		cancel()
		return ctx
	}
	var ctx context.Context
	s.guard(true, func() { ctx = cs.Context() })
	return ctx
}

// count, if count, records a response or a good end (loop.Record): it
// feeds the budget's reserve (a SharedBudget's, whose panic breaks the
// stream as one of the code under it would) and counts as accepted for
// adaptive throttling. With end, the stream is over, and the retry that
// sent its attempt is given back with it; a server stream's first response
// is recorded without it, the attempt going on (the budgets' bound holds
// of the retries in flight): its good end gives it back (served). mu is
// not held.
func (s *Stream) count(count, end bool) {
	if count {
		// The stream committed: no retry changes s.c any more.
		var r *gate.Reservation
		if end {
			r = s.c.Reservation()
		}
		s.guard(true, func() { loop.Record(s.ctx, s.c.Conn, nil, gate.Outcome{Won: true, Reservation: r}) })
	}
}

// served gives back what the retry that sent the stream's attempt paid,
// now that the stream, whose first response count recorded, ended well
// (loop.Call.Served). mu is not held.
func (s *Stream) served() {
	s.guard(true, s.c.Served)
}

// ended tells the observers, once, that the stream ended with err (io.EOF:
// success), ends the plan's timeout, and returns err.
func (s *Stream) ended(err error) error {
	s.mu.Lock()
	seen := s.endSeen
	s.endSeen = true
	cancel := s.ownCancel
	s.mu.Unlock()
	if seen {
		return err
	}
	if cancel != nil {
		defer cancel() // a resumable stream's own context (Context)
	}
	if s.stopTimeout != nil {
		defer s.stopTimeout()
	}
	if s.stopFinish != nil {
		s.stopFinish()
		s.finished(err)
	}
	if s.c.Engine().Observer != nil {
		end := err
		if end == io.EOF {
			end = nil
		}
		s.c.End(s.ctx, end)
	}
	return err
}
