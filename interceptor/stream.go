package interceptor

import (
	"context"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/platformkit/grpcbackoff"
)

// Stream returns a stream client interceptor that retries streams of every
// kind (server, client and bidirectional) as p says, without losing or
// duplicating a message. It panics, with Validate's message, if p or an
// option is invalid; use New for configuration read at run time.
//
// A stream is retried, transparently, only until it commits: every message
// the caller sent is kept, and a new attempt gets them all again, in order,
// followed by CloseSend if the caller had called it. The stream commits when
// the caller receives its first response message, when response headers are
// delivered to the caller (Header), when the caller asks for its Context, or
// when the kept messages would exceed the buffer limit (WithBufferLimit). From
// then on no retry happens and errors go to the caller: a retry then would
// hand the caller duplicates, or lose the messages no longer kept. The kept
// messages are released at commit, or when the replay to the current attempt
// ends if one is under way.
//
// While a retry waits for its backoff, SendMsg keeps the caller's messages
// for the next attempt and returns at once. Header and Context wait for the
// next attempt, and so does a SendMsg whose message would exceed the buffer
// limit: the stream then commits to that attempt, which gets the kept
// messages and that one.
//
// Messages are kept by reference, as gRPC allows (a message must not be
// changed after SendMsg), and each weighs what it takes on the wire: its
// proto.Size plus the 5-byte gRPC message prefix, so that even empty messages
// count against the limit. A message that is not a proto.Message cannot be
// measured and commits the stream.
//
// Policy.AttemptTimeout bounds the time from the start of an attempt (before
// it is opened) to the first response message the caller's RecvMsg returns
// from it. An attempt that reaches it is cut (its context is canceled) and
// fails with DEADLINE_EXCEEDED. If the stream has not committed, that
// failure is retried whatever Policy.Codes says (MaxAttempts, the throttle
// and the caller's deadline still apply); otherwise the stream ends with it.
// An attempt ended by the caller's deadline is not a cut, and is not
// retried. An attempt from which the caller has received a message is never
// cut; one that committed otherwise (Header, Context, buffer limit) still is.
//
// So a client stream, whose only response comes after the upload, is cut
// whenever its upload takes longer than AttemptTimeout. The caller learns of
// it when it asks for the response; the whole upload is then replayed to a
// new attempt if it fits in the buffer, and the stream fails with
// DEADLINE_EXCEEDED if it does not. Give such methods a Policy whose
// AttemptTimeout is 0, or longer than any upload, with WithMethod (or
// CallPolicy for one call).
//
// The per-method policies (WithMethod, WithoutRetryFor) and the call options
// (NoRetry, CallMaxAttempts, CallPolicy) apply to streams as to unary calls.
//
// As with any gRPC stream, one goroutine may call SendMsg while another calls
// RecvMsg; Header may be called from either of them, or from a third.
//
// Each call to Stream has its own throttle; use DialOptions, or the methods
// of one Retrier, to share one between the unary and stream interceptors.
func Stream(p grpcbackoff.Policy, opts ...Option) grpc.StreamClientInterceptor {
	return mustNew(p, opts).Stream()
}

// Stream returns r's stream client interceptor.
func (r *Retrier) Stream() grpc.StreamClientInterceptor { return r.stream }

func (r *Retrier) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	conn := r.conn(cc)
	if err := r.admit(ctx, conn, method, cc, opts); err != nil {
		return nil, err
	}
	if b := conn.t.budget; b != nil {
		b.Started()
	}
	p, max, err := r.policyFor(method, opts)
	if err == nil && r.outer != nil && r.outer(ctx, method, opts) {
		p = nil
	}
	if p == nil {
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
	s := &retryStream{
		ctx: ctx, desc: desc, cc: cc, method: method, streamer: streamer, opts: opts,
		timeout: p.AttemptTimeout,
		c: call{r: r, p: p, max: max, method: method, static: staticMethod(opts), cc: cc, target: target(cc), conn: conn, attempts: 1, opts: opts,
			adaptive: r.adaptiveFor(conn, opts)},
	}
	s.changed.L = &s.mu
	s.sent = s.sent0[:0]
	s.cur = &s.first
	if err := s.open(ctx, s.cur); err != nil {
		// No other goroutine has s yet; mu is taken for retryLocked's rules.
		s.mu.Lock()
		final := s.retryLocked(s.cur, err)
		s.mu.Unlock()
		if final != nil {
			return nil, s.ended(final)
		}
	}
	return s, nil
}

// streamState is where a stream is in its life. It goes
//
//	open → retrying     a receive (RecvMsg, or Header) saw the current attempt fail
//	retrying → open     a new attempt opened
//	retrying → ended    retrying gave up
//	open → committed    first message received, headers delivered, Context,
//	                    buffer limit, end of the stream, error made by the client
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

// retryStream is the stream the caller holds: it stands for the current
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
type retryStream struct {
	ctx      context.Context
	desc     *grpc.StreamDesc
	cc       *grpc.ClientConn
	method   string
	streamer grpc.Streamer
	opts     []grpc.CallOption
	timeout  time.Duration // Policy.AttemptTimeout; 0: none

	mu      sync.Mutex
	changed sync.Cond // on mu
	state   streamState
	cur     *attempt // the current attempt
	first   attempt  // the first attempt, which most streams only have
	sent    []any    // messages sent before the commit, for replay
	sent0   [1]any   // sent's first backing array: a server stream sends one
	size    int      // weight of sent (see sizeOf)
	closed  bool     // the caller called CloseSend
	err     error    // the error the stream ended with, in state streamEnded
	endSeen bool     // the observers were told of the end

	// c follows the attempts. The goroutine that retries, in state
	// streamRetrying, is the only one to change it.
	c call
}

// attempt is one attempt of a stream. cs, cancel and timer are set before
// the attempt becomes current; the flags are guarded by the stream's mu.
type attempt struct {
	cs     grpc.ClientStream
	cancel context.CancelFunc // cuts the attempt; set with timer
	timer  *time.Timer        // the AttemptTimeout; nil without one

	receiving bool // a goroutine is in cs.RecvMsg: the caller's RecvMsg, or Header learning how cs ended
	replaying bool // the replay goroutine is sending the kept messages to cs
	broken    bool // cs refused a message (it ended): a receive will tell how
	received  bool // the caller received a message from cs: it is never cut
	cut       bool // the AttemptTimeout ended cs
	done      bool // the stream is done with the attempt (see release)
}

// open opens attempt a on ctx. With an AttemptTimeout, a runs under a
// context of its own, which its timer cancels. It is called without mu.
func (s *retryStream) open(ctx context.Context, a *attempt) error {
	if s.timeout > 0 {
		ctx, a.cancel = context.WithCancel(ctx)
		a.timer = time.AfterFunc(s.timeout, func() { s.cutAttempt(a) })
	}
	cs, err := s.streamer(ctx, s.desc, s.cc, s.method, s.opts...)
	a.cs = cs
	return err
}

// cutAttempt is attempt a's AttemptTimeout: it ends a, unless the caller
// received a message from it or the stream is done with it.
func (s *retryStream) cutAttempt(a *attempt) {
	s.mu.Lock()
	cut := !a.received && !a.done
	if cut {
		a.cut = true
	}
	s.mu.Unlock()
	if cut {
		a.cancel()
	}
}

// release ends the stream's use of attempt a: it stops a's timer and cancels
// a's context, if a has them. mu is held.
func (a *attempt) release() {
	a.done = true
	if a.timer != nil {
		a.timer.Stop()
		a.cancel()
	}
}

// failureLocked returns how attempt a failed, given the error err it
// returned: an attempt cut by its AttemptTimeout, the caller's context being
// live, fails with DEADLINE_EXCEEDED, and cut says so.
func (s *retryStream) failureLocked(a *attempt, err error) (_ error, cut bool) {
	if !a.cut || err == io.EOF || s.ctx.Err() != nil {
		return err, false
	}
	return status.Errorf(codes.DeadlineExceeded,
		"interceptor: attempt cut by its AttemptTimeout (%v) before any response message", s.timeout), true
}

// commitLocked commits the stream if it is open: from now on no retry
// happens. The kept messages are released, or, if a replay is under way, by
// the replay when it ends.
func (s *retryStream) commitLocked() {
	if s.state != streamOpen {
		return
	}
	s.state = streamCommitted
	if !s.cur.replaying {
		s.releaseSent()
	}
	s.changed.Broadcast()
}

// releaseSent drops the kept messages.
func (s *retryStream) releaseSent() {
	clear(s.sent0[:])
	s.sent, s.size = nil, 0
}

// retryLocked replaces attempt a, the current one, which failed with err
// before the stream committed: it waits as the Policy says, then opens
// attempts until one opens or retrying ends. It returns nil when a new
// attempt is current (and gets the kept messages from a replay), and
// otherwise the error the stream ended with. mu is held on entry and on
// return, and released while it waits and opens; meanwhile the state is
// streamRetrying, and this goroutine alone uses s.c.
func (s *retryStream) retryLocked(a *attempt, err error) error {
	s.state = streamRetrying
	for {
		var cut bool
		err, cut = s.failureLocked(a, err)
		s.c.conn.record(err)
		var trailer metadata.MD
		if a.cs != nil {
			trailer = a.cs.Trailer()
		}
		a.release()
		s.mu.Unlock()

		s.c.cut = cut
		d, final := s.c.next(s.ctx, err, trailer)
		if final == nil {
			final = s.c.wait(s.ctx, d, err)
		}
		if final != nil {
			s.mu.Lock()
			s.state, s.err = streamEnded, final
			s.releaseSent()
			s.changed.Broadcast()
			return final
		}
		next := new(attempt)
		ctx := s.c.retryContext(s.ctx)
		s.c.attempts++
		err = s.open(ctx, next)
		s.mu.Lock()
		if err != nil {
			a = next
			continue
		}
		s.cur, s.state = next, streamOpen
		if len(s.sent) > 0 || s.closed {
			next.replaying = true
			go s.replay(next)
		}
		s.changed.Broadcast()
		return nil
	}
}

// replay sends the kept messages to attempt a, which has just opened, then
// CloseSend if the caller called it. The caller's SendMsg calls made
// meanwhile keep their messages, which the replay sends too, in order; after
// the commit they wait for it to end.
//
// It runs on a goroutine of its own, not on the goroutine that retried,
// which is usually the caller's receiving one: that goroutine goes back to
// receiving from a while the replay runs. Were it to replay instead, a server
// that answers as it reads (an echo) would fill the flow-control window
// towards the caller, stop reading, and so stall the replay and the receiver
// with it, for good. The goroutine lives no longer than a: it ends when every
// kept message is sent or when a refuses one, which a does once it ended.
func (s *retryStream) replay(a *attempt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 0; ; i++ {
		if i == len(s.sent) {
			if s.closed {
				s.mu.Unlock()
				a.cs.CloseSend()
				s.mu.Lock()
			}
			break
		}
		m := s.sent[i]
		s.mu.Unlock()
		err := a.cs.SendMsg(m)
		s.mu.Lock()
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
	if s.state == streamCommitted {
		s.releaseSent()
	}
	s.changed.Broadcast()
}

func (s *retryStream) SendMsg(m any) error {
	s.mu.Lock()
	for {
		if s.state == streamEnded {
			s.mu.Unlock()
			return io.EOF // the stream is over: RecvMsg says how
		}
		if s.state == streamCommitted {
			a := s.cur
			if a.replaying {
				s.changed.Wait() // m goes after the replayed messages
				continue
			}
			s.mu.Unlock()
			return a.cs.SendMsg(m)
		}
		if n, ok := sizeOf(m); ok && s.size+n <= s.c.r.bufLimit {
			s.sent = append(s.sent, m)
			s.size += n
			break
		}
		// m cannot be kept: the stream commits, to the next attempt if a
		// retry is under way (the messages kept until now must reach it).
		if s.state == streamRetrying {
			s.changed.Wait()
			continue
		}
		s.commitLocked()
	}
	a := s.cur
	if s.state == streamRetrying || a.broken || a.replaying {
		s.mu.Unlock()
		return nil // the next attempt, or the replay, sends m
	}
	s.mu.Unlock()
	err := a.cs.SendMsg(m)
	if err == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err != io.EOF:
		// Made by the client for m: another attempt would fail the same way.
		s.commitLocked()
		return err
	case a != s.cur || s.state == streamRetrying:
		return nil // a failed and is replaced: the next attempt gets m
	case s.state == streamOpen:
		a.broken = true // a ended: m is kept for the next attempt, if any
		return nil
	}
	// The stream committed meanwhile: m is lost with a, as it would be with
	// a plain stream that ended under it.
	return io.EOF
}

// msgPrefix is the size of the prefix gRPC puts before every message on the
// wire (a compressed flag and a 4-byte length).
const msgPrefix = 5

// sizeOf returns the weight of m in the replay buffer, if m is a
// proto.Message: its encoded size plus msgPrefix. The prefix makes every
// message weigh something: with a weight of 0, a stream of empty messages
// would be kept without bound and WithBufferLimit(0) would keep them too.
func sizeOf(m any) (int, bool) {
	pm, ok := m.(proto.Message)
	if !ok {
		return 0, false
	}
	return proto.Size(pm) + msgPrefix, true
}

func (s *retryStream) CloseSend() error {
	s.mu.Lock()
	if s.state == streamEnded {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	a := s.cur
	// While a retry or a replay is under way, it closes the next attempt.
	direct := s.state != streamRetrying && !a.broken && !a.replaying
	s.mu.Unlock()
	if direct {
		return a.cs.CloseSend()
	}
	return nil
}

func (s *retryStream) RecvMsg(m any) error {
	s.mu.Lock()
	for {
		if s.state == streamEnded {
			err := s.err
			s.mu.Unlock()
			return s.ended(err)
		}
		if s.state == streamRetrying || s.cur.receiving {
			s.changed.Wait()
			continue
		}
		a := s.cur
		a.receiving = true
		s.mu.Unlock()
		err := a.cs.RecvMsg(m)
		s.mu.Lock()
		if err != nil && err != io.EOF && s.state == streamOpen {
			// Learn how the replay to a ended before deciding: it may have
			// committed the stream. a ended, so the replay ends soon.
			// Meanwhile a stays in this goroutine's hands (receiving), so
			// that Header leaves it alone.
			for a.replaying {
				s.changed.Wait()
			}
		}
		a.receiving = false
		s.changed.Broadcast()
		if err == nil {
			if !a.received {
				a.received = true
				if a.timer != nil {
					a.timer.Stop()
				}
				s.c.conn.succeeded() // a response: it feeds the budget's reserve
				s.c.conn.record(nil)
			}
			s.commitLocked()
			if s.desc.ServerStreams {
				s.mu.Unlock()
				return nil
			}
			// A client stream's only response ends it.
			a.release()
			s.mu.Unlock()
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
		s.commitLocked() // io.EOF: the stream ended well
		err, _ = s.failureLocked(a, err)
		a.release()
		s.mu.Unlock()
		return s.ended(err)
	}
}

// ended tells the observers, once, that the stream ended with err (io.EOF:
// success), and returns err.
func (s *retryStream) ended(err error) error {
	if len(s.c.r.observers) == 0 {
		return err
	}
	s.mu.Lock()
	seen := s.endSeen
	s.endSeen = true
	s.mu.Unlock()
	if !seen {
		end := err
		if end == io.EOF {
			end = nil
		}
		s.c.end(s.ctx, end)
	}
	return err
}

func (s *retryStream) Header() (metadata.MD, error) {
	s.mu.Lock()
	for {
		switch s.state {
		case streamEnded:
			s.mu.Unlock()
			return nil, nil // as grpc: RecvMsg returns the error
		case streamRetrying:
			s.changed.Wait()
			continue
		case streamCommitted:
			a := s.cur
			s.mu.Unlock()
			return a.cs.Header()
		}
		a := s.cur
		s.mu.Unlock()
		md, err := a.cs.Header()
		s.mu.Lock()
		if a != s.cur || s.state == streamRetrying || s.state == streamEnded {
			continue // a failed meanwhile: its headers are not the stream's
		}
		if md != nil || err != nil {
			s.commitLocked() // the headers are delivered
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
func (s *retryStream) headerlessLocked(a *attempt) (done bool) {
	if a.receiving || a.replaying {
		s.changed.Wait()
		return false
	}
	a.receiving = true
	s.mu.Unlock()
	err := a.cs.RecvMsg(new(emptypb.Empty))
	s.mu.Lock()
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
func (s *retryStream) Trailer() metadata.MD {
	s.mu.Lock()
	a := s.cur
	s.mu.Unlock()
	return a.cs.Trailer()
}

// Context commits the stream, as grpc's own retry does: the context is the
// current attempt's. While a retry is under way, it waits for the next
// attempt.
func (s *retryStream) Context() context.Context {
	s.mu.Lock()
	for s.state == streamRetrying {
		s.changed.Wait()
	}
	s.commitLocked()
	a := s.cur
	s.mu.Unlock()
	return a.cs.Context()
}
