package stream

import (
	"io"

	"google.golang.org/protobuf/proto"
)

// Until it commits, a stream keeps the messages the caller sends, to replay
// them to a new attempt (see interceptor.Stream): what it keeps, and the replay.

// MsgPrefix is the size of the prefix gRPC puts before every message on the
// wire (a compressed flag and a 4-byte length).
const MsgPrefix = 5

// sizeOf returns the weight of m in the replay buffer, if m is a
// proto.Message: its encoded size plus MsgPrefix. The prefix makes every
// message weigh something: with a weight of 0, a stream of empty messages
// would be kept without bound, and interceptor.WithBufferLimit(0) would
// keep them too.
func sizeOf(m any) (int, bool) {
	pm, ok := m.(proto.Message)
	if !ok {
		return 0, false
	}
	return proto.Size(pm) + MsgPrefix, true
}

// sendKeptLocked sends m, just kept for a replay, to the current attempt,
// unless a retry or a replay is under way, or the attempt ended: the next
// attempt, or the replay, sends it then. mu is held on entry and released
// on return.
func (s *Stream) sendKeptLocked(m any) error {
	a := s.cur
	if s.phase == streamRetrying || a.broken || a.replaying {
		s.mu.Unlock()
		return nil // the next attempt, or the replay, sends m
	}
	s.waitLocked(a, opSend)
	cs := a.cs // a.cs is nil once a fails and is released: read it under mu
	s.mu.Unlock()
	var err error
	var answered bool
	s.guard(true, func() {
		if err = cs.SendMsg(m); err == io.EOF {
			// a ended. Whether its headers had come tells whether the
			// stream is over (a plain stream's Send says io.EOF) or m waits
			// for the next attempt; a stream that ended answers at once.
			md, _ := cs.Header()
			answered = md != nil
		}
	})
	s.mu.Lock()
	s.raiseLocked()
	defer s.mu.Unlock()
	s.doneWaitingLocked(a, opSend)
	if answered && a == s.cur {
		s.answeredLocked(a)
	}
	switch {
	case err == nil:
		return nil
	case err != io.EOF:
		// Made by the client for m: another attempt would fail the same way.
		s.commitLocked()
		return err
	case a != s.cur || s.phase == streamRetrying:
		return nil // a failed and is replaced: the next attempt gets m
	case s.phase == streamOpen:
		a.broken = true // a ended: m is kept for the next attempt, if any
		return nil
	}
	// The stream committed, or ended: m is lost with a, as it would be with
	// a plain stream that ended under it, and io.EOF says so.
	return io.EOF
}

// replay sends the kept messages to attempt a, which has just opened, then
// CloseSend if the caller called it. The caller's SendMsg calls made
// meanwhile keep their messages, which the replay sends too, in order; after
// the commit they wait for it to end. For AttemptTimeout, its sends are
// the caller's: each restarts a receive's wait, and one the server does not
// read is waited on as a caller's SendMsg is.
//
// It runs on a goroutine of its own, not on the goroutine that retried,
// which is usually the caller's receiving one: that goroutine goes back to
// receiving from a while the replay runs. Were it to replay instead, a server
// that answers as it reads (an echo) would fill the flow-control window
// towards the caller, stop reading, and so stall the replay and the receiver
// with it, for good. The goroutine lives no longer than a: it ends when every
// kept message is sent or when a refuses one, which a does once it ended.
func (s *Stream) replay(a *streamAttempt) {
	s.mu.Lock()
	cs := a.cs
	for i := 0; !s.broken; i++ {
		if i == len(s.sent) {
			if s.closed {
				s.mu.Unlock()
				s.guard(false, func() { cs.CloseSend() })
				s.mu.Lock()
			}
			break
		}
		m := s.sent[i]
		s.waitLocked(a, opSend) // as a caller's send: the server reading it is not silent
		s.mu.Unlock()
		var err error
		s.guard(false, func() { err = cs.SendMsg(m) })
		s.mu.Lock()
		s.doneWaitingLocked(a, opSend)
		if err != nil {
			a.broken = true
			if err != io.EOF {
				// Made by the client for m (its size, its encoding): any
				// attempt would fail the same way, so the stream commits
				// and the receiver gets the error.
				s.commitLocked()
			}
			break
		}
	}
	a.replaying = false
	if s.phase == streamCommitted {
		s.releaseSent()
	}
	s.changed.Broadcast()
	s.mu.Unlock()
}
