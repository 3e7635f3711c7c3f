// Package stream is the stream machine of the interceptors' engine: a
// stream of any kind that a Policy applies to is retried, transparently,
// until it commits (gRFC A6), its sent messages kept and replayed to each
// new attempt, without losing or duplicating a message (see
// interceptor.Stream for the contract). Its state is one type, Stream,
// whose every operation goes through one mutex; the files divide its
// methods: stream.go (the states and the caller's operations), replay.go
// (the messages kept and their replay), timeout.go (AttemptTimeout, which
// times the caller's waits), guard.go (a panic under the stream), finish.go
// (grpc.OnFinish), plain.go (a stream no Policy applies to). In the
// engine's layers it sits above internal/call, which decides and ends its
// retries as any call's.
package stream

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/attempt"
	"github.com/platformkit/grpcbackoff/internal/call"
	"github.com/platformkit/grpcbackoff/internal/cloudclients"
)

// Open is the stream interceptor of engine e: the one way into a stream,
// its plan first. A stream no Retrier before this one took, and whose plan
// has a Policy, is a Stream; one without is opened as it is (plain.go).
func Open(e *call.Engine, ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	var p call.Plan
	e.Plan(&p, method, opts)
	if p.Through {
		return streamer(ctx, desc, cc, method, opts...)
	}
	streamer = cloudclients.Watch(method, streamer)
	if p.OnFinish && p.Policy != nil {
		return openFinishing(e, &p, ctx, desc, cc, streamer, opts)
	}
	return open(e, &p, ctx, desc, cc, streamer, opts)
}

// open opens the stream p plans: a Stream if it has a Policy, else a plain
// one.
func open(e *call.Engine, p *call.Plan, ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, streamer grpc.Streamer, opts []grpc.CallOption) (grpc.ClientStream, error) {
	conn, err := e.Open(ctx, p, cc, nil, nil)
	if err != nil {
		return nil, err
	}
	if p.Policy == nil {
		return plainStream(ctx, p, desc, cc, p.Method, streamer, append(opts[:len(opts):len(opts)], call.Mark))
	}
	p.Hedge = nil // streams are not hedged: their Policy applies
	s := &Stream{ctx: ctx, desc: desc, streamer: streamer, opts: opts, timeout: p.Policy.AttemptTimeout, c: e.NewCall(p, cc, conn, opts)}
	s.c.Attempts = 1
	s.changed.L = &s.mu
	s.sent = s.sent0[:0]
	s.cur = &s.first
	if ctx, cancel := p.WithTimeout(ctx); cancel != nil {
		s.ctx, s.stopTimeout = ctx, cancel
	}
	if err := s.open(s.ctx, s.cur); err != nil {
		// No other goroutine has s yet; mu is taken for retryLocked's rules.
		s.mu.Lock()
		s.opening = true // a Google Cloud client's own retry may cover it
		final := s.retryLocked(s.cur, err)
		s.mu.Unlock()
		if final != nil {
			return nil, s.ended(final)
		}
		return s, nil
	}
	s.watch(s.cur)
	return s, nil
}

// streamState is where a stream is in its life. It goes
//
//	open → retrying     a receive (RecvMsg, or Header) saw the current attempt fail
//	retrying → open     a new attempt opened
//	retrying → ended    retrying gave up
//	open → committed    headers or a message arrived, Context, buffer limit,
//	                    end of the stream, error made by the client
//
// and never back from committed or ended.
type streamState int8

const (
	// streamOpen: the current attempt is live, as far as the stream knows,
	// and has got every message sent so far, or is getting them from its
	// replay.
	streamOpen streamState = iota
	// streamRetrying: the current attempt failed before the commit, and the
	// goroutine that saw it fail (in RecvMsg or Header) is replacing it: it
	// waits for the backoff, then opens attempts until one opens or
	// retrying ends.
	streamRetrying
	// streamCommitted: no retry any more; operations go to the current
	// attempt.
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
// Every operation goes the same way: under mu, it looks at the state and the
// current attempt, and decides what to do; it then does it without mu, which
// is never held while waiting for the network or a backoff. An operation that
// cannot go on in the current state (Header or Context while a retry is under
// way, a send that must follow a replay, a receive while Header receives)
// waits on changed, which is broadcast at every change of state, of cur, and
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
	state          streamState
	cur            *streamAttempt // the current attempt
	first          streamAttempt  // the first attempt, which most streams only have
	sent           []any          // messages sent before the commit, for replay
	sent0          [1]any         // sent's first backing array: a server stream sends one
	size           int            // weight of sent (see sizeOf)
	closed         bool           // the caller called CloseSend
	sends          int            // messages the caller sent
	err            error          // the error the stream ended with, in state streamEnded
	endSeen        bool           // the observers were told of the end
	opening        bool           // the failure being decided on is the first opening's
	finishers      []func(error)  // the caller's grpc.OnFinish functions, run once when the stream ends (finish.go)
	stopFinish     func() bool    // stops running them when the context ends
	commitNext     bool           // a message sent during a backoff took the kept ones past the buffer limit: commit to the next attempt
	sentAfterClose bool           // SendMsg after CloseSend during a retry: the retry ends the stream with errSendAfterClose
	panicV         any            // the panic that broke the stream, if one did (see guard)
	broken         bool           // a panic broke the stream: every operation raises panicV

	// c follows the attempts. The goroutine that retries, in state
	// streamRetrying, is the only one to change it.
	c call.Call
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
	done      bool        // the stream is done with the attempt (see release)

	// With AttemptTimeout, before the commit: since when the caller has
	// waited in each kind of operation on the attempt (zero: not waiting),
	// and the timer of the earliest.
	waiting [numOps]time.Time
	timer   *time.Timer
}

// open opens attempt a on ctx. a runs under a context of its own, which
// ending it cancels (a cut, a panic that broke the stream, its
// replacement), with the caller's options, the layer mark (call.Mark) and
// a grpc.OnFinish of its own, by which grpc-go tells that it had the
// opening. It is called without mu.
func (s *Stream) open(ctx context.Context, a *streamAttempt) error {
	ctx, a.cancel = context.WithCancel(ctx)
	if s.timeout > 0 {
		s.mu.Lock()
		s.waitLocked(a, opOpen)
		s.mu.Unlock()
	}
	opts := append(s.opts[:len(s.opts):len(s.opts)], call.Mark, grpc.OnFinish(a.finished))
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
	if s.state != streamOpen {
		return
	}
	s.state = streamCommitted
	if !s.cur.replaying {
		s.releaseSent()
	}
	s.changed.Broadcast()
}

// retryLocked replaces attempt a, the current one, which failed with err
// before the stream committed: it waits as the Policy says, then opens
// attempts until one opens or retrying ends. It returns nil when a new
// attempt is current (and gets the kept messages from a replay), and
// otherwise the error the stream ended with. mu is held on entry and on
// return, and released while it waits and opens; meanwhile the state is
// streamRetrying, and this goroutine alone uses s.c. During the wait the
// failed attempt's stream is let go: only its trailer is kept.
func (s *Stream) retryLocked(a *streamAttempt, err error) error {
	s.state = streamRetrying
	for {
		var cut bool
		err, cut = s.failureLocked(a, err)
		s.c.Conn.Record(s.ctx, err)
		cs := a.cs
		a.release()
		a.cs = nil
		s.mu.Unlock()

		var final error
		var next *streamAttempt // made once the wait is over
		s.guard(true, func() {
			opened := false
			defer func() {
				if !opened && next != nil { // a panic in the code under the stream: next is not kept
					s.mu.Lock()
					next.release()
					s.mu.Unlock()
				}
			}()
			// The attempt was sent if it opened: grpc-go returns a stream
			// only once it made a transport stream. An opening that failed
			// was not, if grpc-go had it; if not (an interceptor chained
			// after this one failed it), gRPC does not tell.
			var trailer metadata.MD
			sent := cs != nil || !a.reached.Load()
			if cs != nil {
				trailer = cs.Trailer()
			}
			s.mu.Lock()
			a.trailer = trailer
			s.mu.Unlock()
			f := attempt.Failure{Err: err, Trailer: trailer, Sent: sent, Cut: cut, Opening: s.opening}
			var d time.Duration
			d, final = s.c.Decide(s.ctx, f)
			s.opening = false
			if final == nil {
				if why := s.c.Book(s.ctx, f, d); why != 0 {
					final = s.c.Fail(err, why)
				}
			}
			if final == nil {
				final = s.c.Wait(s.ctx, d, err)
			}
			if final == nil {
				if why := s.c.PayDue(s.ctx, f, d); why != 0 {
					final = s.c.Fail(err, why)
				}
			}
			if final == nil {
				ctx := s.c.RetryContext(s.ctx)
				s.c.Attempts++
				next = new(streamAttempt)
				err = s.open(ctx, next)
			}
			opened = true
		})
		s.mu.Lock()
		if final == nil && err == nil && s.sentAfterClose {
			// The caller sent after CloseSend meanwhile, and was told
			// INTERNAL: the stream ends with it, as grpc-go's does.
			next.release()
			final = errSendAfterClose
		}
		if final != nil {
			s.state, s.err = streamEnded, final
			s.releaseSent()
			s.changed.Broadcast()
			return final
		}
		if err != nil {
			a = next
			continue
		}
		s.cur.trailer = nil // the failed attempt's: nothing of it outlives the next one's start
		s.cur, s.state = next, streamOpen
		s.watch(next)
		if len(s.sent) > 0 || s.closed {
			next.replaying = true
			go s.replay(next)
		}
		if s.commitNext {
			s.commitNext = false
			s.commitLocked() // a message sent during the backoff went past the buffer limit
		}
		s.changed.Broadcast()
		return nil
	}
}

func (s *Stream) SendMsg(m any) error {
	n, keepable := sizeOf(m)
	s.mu.Lock()
	// A message that cannot be kept waits out a retry under way: the stream
	// commits to the next attempt, which must get the kept ones first.
	s.awaitLocked(func() bool { return s.state != streamRetrying || keepable || s.sendsClosedLocked() })
	switch {
	case s.state == streamEnded:
		s.mu.Unlock()
		return io.EOF // the stream is over: RecvMsg says how
	case s.sendsClosedLocked():
		// As grpc-go: INTERNAL ("SendMsg called after CloseSend"), and the
		// stream ends with it; nothing reaches the server. During a retry,
		// at once: the retry ends the stream when it resumes.
		if s.state == streamRetrying {
			s.sentAfterClose = true
			s.mu.Unlock()
			return errSendAfterClose
		}
		s.commitLocked()
	case s.state == streamRetrying || s.state == streamOpen && keepable && s.size+n <= s.c.Engine().BufLimit:
		// Kept for a replay. During a retry's backoff m is kept whatever the
		// limit, and SendMsg returns at once; past the limit, the stream
		// commits to the next attempt once the kept messages reached it.
		s.commitNext = s.commitNext || s.size+n > s.c.Engine().BufLimit
		s.sent = append(s.sent, m)
		s.size += n
		s.sends++
		return s.sendKeptLocked(m)
	case s.state == streamOpen:
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

// sendsClosedLocked reports whether the caller may send no more: it called
// CloseSend, or a stream whose caller sends one message sent it. mu is held.
func (s *Stream) sendsClosedLocked() bool {
	return s.closed || !s.desc.ClientStreams && s.sends > 0
}

// awaitLocked is the one wait of the stream's operations: it waits on
// changed until ready, called with mu held, reports that the operation may
// go on, raising the panic that broke the stream, if one did (guard.go).
// mu is held on entry and on return.
func (s *Stream) awaitLocked(ready func() bool) {
	for s.raiseLocked(); !ready(); s.raiseLocked() {
		s.changed.Wait()
	}
}

// errSendAfterClose is grpc-go's error for a SendMsg after CloseSend.
var errSendAfterClose = status.Error(codes.Internal, "SendMsg called after CloseSend")

func (s *Stream) CloseSend() error {
	s.mu.Lock()
	s.raiseLocked()
	if s.state == streamEnded {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	a := s.cur
	// While a retry or a replay is under way, it closes the next attempt.
	cs := a.cs
	direct := s.state != streamRetrying && !a.broken && !a.replaying && cs != nil
	s.mu.Unlock()
	var err error
	if direct {
		s.guard(true, func() { err = cs.CloseSend() })
	}
	return err
}

func (s *Stream) RecvMsg(m any) error {
	s.mu.Lock()
	for {
		// One receiver at a time, on the current attempt.
		s.awaitLocked(func() bool { return s.state == streamEnded || s.state != streamRetrying && !s.cur.receiving })
		if s.state == streamEnded {
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
		committed := false
		s.guard(true, func() {
			if err = cs.RecvMsg(m); err != nil && err != io.EOF {
				// Whether response headers came before the failure: if so,
				// the server has the call, and it commits (gRFC A6).
				md, _ := cs.Header()
				committed = md != nil
			}
		})
		s.mu.Lock()
		s.raiseLocked() // a panic on another goroutine ended a under this one
		s.doneWaitingLocked(a, opRecv)
		if committed {
			s.answeredLocked(a)
		}
		if err != nil && err != io.EOF && s.state == streamOpen {
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
			s.answeredLocked(a)
			if s.desc.ServerStreams {
				s.mu.Unlock()
				s.count(count)
				return nil
			}
			// A client stream's only response ends it.
			a.release()
			s.mu.Unlock()
			s.count(count)
			s.ended(io.EOF)
			return nil
		}
		// Only a receiver retries, and a had one, this goroutine: a is still
		// the current attempt, and the state is open or committed.
		if s.state == streamOpen && err != io.EOF {
			if final := s.retryLocked(a, err); final != nil {
				s.mu.Unlock()
				return s.ended(final)
			}
			continue
		}
		count := err == io.EOF && s.state == streamOpen && s.countLocked(a) // the stream ended well
		s.commitLocked()
		err, _ = s.failureLocked(a, err)
		if err != io.EOF && s.c.Attempts > 1 {
			// After retries, as a unary call's: the committed attempt's
			// error, with the call's attempts and why retrying stopped.
			why := grpcbackoff.ReasonNotRetryable
			switch {
			case s.ctx.Err() == context.Canceled || s.c.Conn.Closed():
				why = grpcbackoff.ReasonCanceled
			case s.ctx.Err() == context.DeadlineExceeded:
				why = grpcbackoff.ReasonDeadline
			}
			err = s.c.Fail(err, why)
		}
		a.release()
		s.mu.Unlock()
		s.count(count)
		return s.ended(err)
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

// count, if count, counts a response or a good end: it feeds the budget's
// reserve (a SharedBudget's, whose panic breaks the stream as one of the
// code under it would) and counts as accepted for adaptive throttling. mu
// is not held.
func (s *Stream) count(count bool) {
	if count {
		s.guard(true, func() {
			s.c.Conn.Succeeded()
			s.c.Conn.Record(s.ctx, nil)
		})
	}
}

// ended tells the observers, once, that the stream ended with err (io.EOF:
// success), ends the plan's timeout, and returns err.
func (s *Stream) ended(err error) error {
	s.mu.Lock()
	seen := s.endSeen
	s.endSeen = true
	s.mu.Unlock()
	if seen {
		return err
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

func (s *Stream) Header() (metadata.MD, error) {
	s.mu.Lock()
	for {
		s.awaitLocked(func() bool { return s.state != streamRetrying })
		switch s.state {
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
		if a != s.cur || s.state == streamRetrying || s.state == streamEnded {
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
		s.awaitLocked(func() bool { return !a.receiving && !a.replaying || a != s.cur || s.state != streamOpen })
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
	if s.state != streamOpen || err == nil || err == io.EOF {
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
// attempt.
func (s *Stream) Context() context.Context {
	s.mu.Lock()
	s.awaitLocked(func() bool { return s.state != streamRetrying })
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
