package stream

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff/internal/connpolicy"
	"github.com/platformkit/grpcbackoff/internal/loop"
	"github.com/platformkit/grpcbackoff/internal/resume"
)

// phase is where a stream is in its life. It goes
//
//	open → retrying       a receive (RecvMsg, or Header) saw the current attempt fail
//	retrying → open       a new attempt opened
//	retrying → ended      retrying gave up
//	open → committed      headers or a message arrived, Context, buffer limit,
//	                      end of the stream, error made by the client
//	committed → retrying  RecvMsg saw the current attempt of a stream with a
//	                      resume rule fail: it resumes (resume.go)
//
// and never back from ended; from committed only so.
type phase int8

const (
	// streamOpen: the current attempt is live, as far as the stream knows,
	// and has got every message sent so far, or is getting them from its
	// replay.
	streamOpen phase = iota
	// streamRetrying: the current attempt failed before the commit, and the
	// goroutine that saw it fail (in RecvMsg or Header) is replacing it: it
	// waits for the backoff, then opens attempts until one opens or
	// retrying ends.
	streamRetrying
	// streamCommitted: no retry any more, but a resume (resume.go);
	// operations go to the current attempt.
	streamCommitted
	// streamEnded: retrying ended the stream, with the error err.
	streamEnded
)

// Stream is the stream the caller holds: it stands for the current
// attempt, and replaces it when the attempt fails before the stream commits.
//
// Only a receive (the caller's RecvMsg, or Header learning how an attempt
// without headers ended) finds out that an attempt failed, and that
// goroutine retries: it waits for the backoff and opens the next attempt, and
// a goroutine of its own replays the kept messages to it (see replay).
//
// Every operation goes the same way: under mu, it looks at the phase and the
// current attempt, and decides what to do; it then does it without mu, which
// is never held while waiting for the network or a backoff. An operation that
// cannot go on in the current phase (Header or Context while a retry is under
// way, a send that must follow a replay, a receive while Header receives)
// waits on changed, which is broadcast at every change of phase, of cur, and
// of an attempt's receiving and replaying flags. These waits end by
// themselves: a retry ends with its backoff or the caller's context, and a
// receive or a replay with its attempt.
type Stream struct {
	ctx         context.Context // the caller's, bounded by the plan's timeout
	stopTimeout context.CancelFunc
	desc        *grpc.StreamDesc
	streamer    grpc.Streamer
	opts        []grpc.CallOption // the caller's; each attempt adds the layer mark and its grpc.OnFinish
	timeout     time.Duration     // Policy.AttemptTimeout; 0: none

	mu             sync.Mutex
	changed        sync.Cond // on mu
	phase          phase
	cur            *streamAttempt // the current attempt
	first          streamAttempt  // the first attempt, which most streams only have
	sent           []any          // messages sent before the commit, for replay
	sent0          [1]any         // sent's first backing array: a server stream sends one
	size           int            // weight of sent (see sizeOf)
	closed         bool           // the caller called CloseSend
	sends          int            // messages the caller sent
	err            error          // the error the stream ended with, in phase streamEnded
	endSeen        bool           // the observers were told of the end
	opening        bool           // the failure being decided on is the first opening's
	finishers      []func(error)  // the caller's grpc.OnFinish functions, run once when the stream ends (finish.go)
	stopFinish     func() bool    // stops running them when the context ends
	commitNext     bool           // a message sent during a backoff took the kept ones past the buffer limit: commit to the next attempt
	sentAfterClose bool           // SendMsg after CloseSend during a retry: the retry ends the stream with errSendAfterClose
	panicV         any            // the panic that broke the stream, if one did (see guard)
	broken         bool           // a panic broke the stream: every operation raises panicV

	// A server stream with a resume rule (resume.go): the rule's state of
	// it (its request, its token), whether the next decision is a resume's,
	// the headers and peer of the open it committed to, kept once that open
	// failed, and the stream's own context (Context).
	rs        resume.State
	resuming  bool
	header    metadata.MD
	peer      *peer.Peer
	ownCtx    context.Context
	ownCancel context.CancelFunc

	// c follows the attempts. The goroutine that retries, in phase
	// streamRetrying, is the only one to change it.
	c loop.Call
}

// streamAttempt is one attempt of a stream. cs and cancel are set before the
// attempt becomes current; the other fields are guarded by the stream's mu.
type streamAttempt struct {
	cs      grpc.ClientStream  // nil once a failed attempt is released
	trailer metadata.MD        // a released attempt's trailer
	cancel  context.CancelFunc // ends the attempt

	reached   atomic.Bool // grpc-go had its opening: its grpc.OnFinish ran (internal/attempt)
	answered  bool        // its response headers or a message arrived: it is never cut
	counted   bool        // its success was counted, for the budget and adaptive throttling
	receiving bool        // a goroutine is in cs.RecvMsg: the caller's RecvMsg, or Header learning how cs ended
	replaying bool        // the replay goroutine is sending the kept messages to cs
	broken    bool        // cs refused a message (it ended): a receive will tell how
	cut       bool        // the AttemptTimeout ended cs
	delivered bool        // a message of it reached the caller: a resume starts the run of attempts again (resume.go)
	done      bool        // the stream is done with the attempt (see release)

	grpcs connpolicy.Attempts // grpc-go's own attempts of it, where the plan counts them (loop.Plan.CountGRPC)

	// With AttemptTimeout, before the commit: since when the caller has
	// waited in each kind of operation on the attempt (zero: not waiting),
	// and the timer of the earliest.
	waiting [numOps]time.Time
	timer   *time.Timer
}

// finished is the function of a's grpc.OnFinish. grpc-go runs it once the
// attempt's stream ends, and, when it made none, before its opening
// returns.
func (a *streamAttempt) finished(error) { a.reached.Store(true) }

// release ends the stream's use of attempt a: it stops a's timer and cancels
// a's context, if a has them. mu is held.
func (a *streamAttempt) release() {
	a.done = true
	if a.timer != nil {
		a.timer.Stop()
	}
	if a.cancel != nil {
		a.cancel()
		a.cancel = nil
	}
}

// answeredLocked notes that the server answered the current attempt a:
// its response headers or a message arrived. The stream commits, and a is
// never cut.
func (s *Stream) answeredLocked(a *streamAttempt) {
	a.answered = true
	if a.timer != nil {
		a.timer.Stop()
	}
	s.commitLocked()
}

// commitLocked commits the stream if it is open: from now on no retry
// happens. The kept messages are released, or, if a replay is under way, by
// the replay when it ends.
func (s *Stream) commitLocked() {
	if s.phase != streamOpen {
		return
	}
	s.phase = streamCommitted
	if !s.cur.replaying {
		s.releaseSent()
	}
	s.changed.Broadcast()
}

// releaseSent drops the kept messages.
func (s *Stream) releaseSent() {
	clear(s.sent0[:])
	s.sent, s.size = nil, 0
}

// sendsClosedLocked reports whether the caller may send no more: it called
// CloseSend, or a stream whose caller sends one message sent it. mu is held.
func (s *Stream) sendsClosedLocked() bool {
	return s.closed || !s.desc.ClientStreams && s.sends > 0
}

// errSendAfterClose is grpc-go's error for a SendMsg after CloseSend.
var errSendAfterClose = status.Error(codes.Internal, "SendMsg called after CloseSend")

// awaitLocked is the one wait of the stream's operations: it waits on
// changed until ready, called with mu held, reports that the operation may
// go on, raising the panic that broke the stream, if one did (guard.go).
// mu is held on entry and on return.
func (s *Stream) awaitLocked(ready func() bool) {
	for s.raiseLocked(); !ready(); s.raiseLocked() {
		s.changed.Wait()
	}
}

// raiseLocked raises, with mu released, the panic that broke the stream, if
// one did. mu is held.
func (s *Stream) raiseLocked() {
	if s.broken {
		v := s.panicV
		s.mu.Unlock()
		panic(v)
	}
}

// countLocked reports whether attempt a's first response, or its good end,
// is to be counted (see count), which it is once. mu is held.
func (s *Stream) countLocked(a *streamAttempt) bool {
	if a.counted {
		return false
	}
	a.counted = true
	return true
}

// op is a kind of caller operation that AttemptTimeout watches.
type op int8

const (
	opOpen op = iota
	opSend
	opRecv
	opHeader
	numOps
)
