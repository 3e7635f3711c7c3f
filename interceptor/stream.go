package interceptor

import (
	"context"
	"io"
	"sync"
	"sync/atomic"

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
// messages are released at commit.
//
// Messages are kept by reference, as gRPC allows (a message must not be
// changed after SendMsg), and each weighs what it takes on the wire: its
// proto.Size plus the 5-byte gRPC message prefix, so that even empty messages
// count against the limit. A message that is not a proto.Message cannot be
// measured and commits the stream.
//
// The per-method policies (WithMethod, WithoutRetryFor) and the call options
// (NoRetry, CallMaxAttempts, CallPolicy) apply to streams as to unary calls.
//
// As with any gRPC stream, one goroutine may call SendMsg while another calls
// RecvMsg. Header must not be called concurrently with RecvMsg: until the
// stream commits, it may receive on the current attempt to learn how it
// ended.
//
// Each call to Stream has its own throttle; use DialOptions, or the methods
// of one Retrier, to share one between the unary and stream interceptors.
func Stream(p grpcbackoff.Policy, opts ...Option) grpc.StreamClientInterceptor {
	return mustNew(p, opts).Stream()
}

// Stream returns r's stream client interceptor.
func (r *Retrier) Stream() grpc.StreamClientInterceptor { return r.stream }

func (r *Retrier) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if err := r.admit(ctx, method, cc, opts); err != nil {
		return nil, err
	}
	if r.budget != nil {
		r.budget.Started()
	}
	p, max, err := r.policyFor(method, opts)
	if p == nil {
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
	cs, err := streamer(ctx, desc, cc, method, opts...)
	s := &retryStream{
		ctx: ctx, desc: desc, cc: cc, method: method, streamer: streamer, opts: opts,
		cur: cs, c: call{r: r, p: p, max: max, method: method, target: target(cc), attempts: 1, adaptive: r.adaptiveFor(opts)},
	}
	s.sent = s.first[:0]
	s.retried.L = &s.mu
	if err != nil {
		// No other goroutine has s yet: no need to claim the retry.
		if final := s.retryLocked(nil, err); final != nil {
			return nil, final
		}
	}
	return s, nil
}

// retryStream is the stream the caller holds: it stands for the current
// attempt, and replaces it when an attempt fails before the stream commits.
//
// Locking: mu guards the attempt, the kept messages and the flags; it is never
// held while waiting for the network except while replaying messages to a
// new attempt. One goroutine at a time retries (RecvMsg and Header may both
// want to): it claims the retry by setting retrying, and the others wait on
// retried until it is done. No mutex is held during a backoff wait.
type retryStream struct {
	ctx      context.Context
	desc     *grpc.StreamDesc
	cc       *grpc.ClientConn
	method   string
	streamer grpc.Streamer
	opts     []grpc.CallOption

	committed atomic.Bool // set once, under mu; cur never changes after
	endSeen   atomic.Bool // the observers were told of the end

	mu     sync.Mutex
	cur    grpc.ClientStream // the current attempt
	broken bool              // cur cannot take messages: it ended, or a retry is under way
	sent   []any             // messages sent before commit, for replay
	first  [1]any            // sent's first backing array: a server stream sends one
	size   int               // weight of sent (see sizeOf)
	closed bool              // the caller called CloseSend

	final atomic.Pointer[error] // the error the stream ended with, if retrying ended it

	retrying bool      // guarded by mu: a goroutine is retrying
	retried  sync.Cond // on mu; broadcast when retrying ends
	c        call      // used only by the goroutine that claimed the retry

	// recvMu serializes receiving on an attempt before the commit, which
	// Header does to learn how an attempt without headers ended. Lock order:
	// recvMu, then mu.
	recvMu sync.Mutex
}

// claimRetry waits until no other goroutine is retrying, then checks attempt
// a, which failed. If a is still the current attempt and the stream neither
// committed nor ended, it claims the retry, which the caller must end with
// releaseRetry; otherwise it reports what happened meanwhile: the stream's
// final error, or nil if another goroutine retried a already.
func (s *retryStream) claimRetry(a grpc.ClientStream) (claimed bool, final error, committed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.retrying {
		s.retried.Wait()
	}
	switch {
	case s.finalErr() != nil:
		return false, s.finalErr(), true
	case a != s.cur:
		return false, nil, false
	case s.committed.Load():
		return false, nil, true
	}
	s.retrying = true
	return true, nil, false
}

// releaseRetry ends the retry claimed by claimRetry.
func (s *retryStream) releaseRetry() {
	s.mu.Lock()
	s.retrying = false
	s.mu.Unlock()
	s.retried.Broadcast()
}

// finalErr returns the error the stream ended with, if retrying ended it.
func (s *retryStream) finalErr() error {
	if e := s.final.Load(); e != nil {
		return *e
	}
	return nil
}

// commitLocked ends retrying: from now on the caller talks to cur directly.
func (s *retryStream) commitLocked() {
	if s.committed.Load() {
		return
	}
	clear(s.first[:])
	s.sent, s.size = nil, 0
	s.committed.Store(true)
}

func (s *retryStream) SendMsg(m any) error {
	if s.committed.Load() {
		return s.cur.SendMsg(m)
	}
	s.mu.Lock()
	if !s.committed.Load() {
		if n, ok := sizeOf(m); ok && s.size+n <= s.c.r.bufLimit {
			s.sent = append(s.sent, m)
			s.size += n
		} else {
			s.commitLocked()
		}
	}
	a, broken, kept := s.cur, s.broken, !s.committed.Load()
	s.mu.Unlock()
	if broken {
		if kept {
			return nil // the next attempt gets it
		}
		return io.EOF // the attempt ended; RecvMsg tells how
	}
	err := a.SendMsg(m)
	if err == nil || !kept {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != io.EOF { // made by the client, not the server: the stream is over
		s.commitLocked()
		return err
	}
	if a == s.cur {
		// The attempt ended; m is kept for the next one, if RecvMsg retries.
		// If instead the stream commits, m is lost exactly as it would be
		// with a plain stream that ended while m was in flight.
		s.broken = true
	}
	return nil
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
	if s.committed.Load() {
		return s.cur.CloseSend()
	}
	s.mu.Lock()
	s.closed = true
	a, broken := s.cur, s.broken
	s.mu.Unlock()
	if !broken {
		a.CloseSend()
	}
	return nil
}

func (s *retryStream) RecvMsg(m any) error {
	if s.committed.Load() {
		if err := s.finalErr(); err != nil {
			return err // the retry decision that made it counted the attempt
		}
		err := s.cur.RecvMsg(m)
		if err != nil {
			s.ended(err)
		}
		return err
	}
	for {
		s.recvMu.Lock()
		a := s.attempt()
		err := a.RecvMsg(m)
		s.recvMu.Unlock()
		if err == nil || err == io.EOF {
			if !s.committed.Load() {
				s.c.r.record(nil) // the first response: accepted
			}
			s.commit()
			if err == io.EOF {
				s.ended(err)
			}
			return err
		}
		if final := s.retry(a, err); final != nil {
			return final
		}
	}
}

// ended tells the observers, once, that the stream ended with err (io.EOF:
// success).
func (s *retryStream) ended(err error) {
	if len(s.c.r.observers) == 0 || s.endSeen.Swap(true) {
		return
	}
	if err == io.EOF {
		err = nil
	}
	s.c.end(s.ctx, err)
}

func (s *retryStream) Header() (metadata.MD, error) {
	if s.committed.Load() {
		if s.finalErr() != nil {
			return nil, nil // as grpc: the error comes from RecvMsg
		}
		return s.cur.Header()
	}
	for {
		a := s.attempt()
		md, err := a.Header()
		if md != nil || err != nil {
			s.mu.Lock()
			replaced := a != s.cur
			if !replaced {
				s.commitLocked() // the headers are delivered
			}
			s.mu.Unlock()
			if replaced {
				continue // a failed and was retried meanwhile: its headers are not the stream's
			}
			return md, err
		}
		// No headers: the attempt ended without any (trailers only), so it
		// carried no message either, and receiving returns how it ended.
		if done := s.headerless(a); done {
			return nil, nil
		}
	}
}

// headerless handles attempt a, which ended without headers, for Header: it
// learns how a ended and retries it if it should. It reports whether Header
// is done (the stream committed or ended); otherwise a new attempt is in
// place.
func (s *retryStream) headerless(a grpc.ClientStream) (done bool) {
	claimed, _, committed := s.claimRetry(a)
	if !claimed {
		return committed // if not, another goroutine retried a already
	}
	defer s.releaseRetry()
	// While the retry is claimed, cur stays a, so a concurrent RecvMsg can
	// only be receiving on a, which has ended: recvMu comes free at once.
	s.recvMu.Lock()
	err := a.RecvMsg(new(emptypb.Empty))
	s.recvMu.Unlock()
	if err == nil || err == io.EOF {
		s.commit()
		return true
	}
	s.mu.Lock()
	s.broken = true
	s.mu.Unlock()
	return s.retryLocked(a.Trailer(), err) != nil
}

func (s *retryStream) Trailer() metadata.MD {
	return s.attempt().Trailer()
}

// Context commits the stream, as grpc's own retry does: the context is the
// current attempt's.
func (s *retryStream) Context() context.Context {
	s.commit()
	return s.cur.Context()
}

func (s *retryStream) attempt() grpc.ClientStream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

func (s *retryStream) commit() {
	s.mu.Lock()
	s.commitLocked()
	s.mu.Unlock()
}

// retry handles the failure err of attempt a before the stream committed. It
// returns nil when a new attempt is in place (or was already put in place by
// another goroutine), and otherwise the error the stream ends with.
func (s *retryStream) retry(a grpc.ClientStream, err error) error {
	claimed, final, committed := s.claimRetry(a)
	if !claimed {
		if final == nil && committed {
			s.ended(err)
			return err // a SendMsg committed the stream meanwhile
		}
		return final // nil: another goroutine retried a already
	}
	defer s.releaseRetry()
	s.mu.Lock()
	s.broken = true
	s.mu.Unlock()
	return s.retryLocked(a.Trailer(), err)
}

// retryLocked waits and opens new attempts until one opens, replaying the
// kept messages into it, or until retrying ends. trailer is the failed
// attempt's trailer; err its error. The caller has claimed the retry.
func (s *retryStream) retryLocked(trailer metadata.MD, err error) error {
	for {
		s.c.r.record(err)
		d, final := s.c.next(s.ctx, err, trailer)
		if final == nil {
			final = s.c.wait(s.ctx, d, err)
		}
		s.mu.Lock()
		if final == nil && s.committed.Load() {
			// A SendMsg ran out of buffer during the wait: the kept
			// messages are gone, so no new attempt could get them all.
			final = err
		}
		if final != nil {
			s.final.Store(&final)
			s.commitLocked()
			s.mu.Unlock()
			return final
		}
		oerr := s.openLocked()
		s.mu.Unlock()
		if oerr == nil {
			return nil
		}
		trailer, err = nil, oerr
	}
}

// openLocked opens the next attempt and replays the kept messages into it.
// It runs under mu, so that no SendMsg commits the stream while the new
// attempt has not yet got them all. (It is apart from retryLocked so that
// the frame a stream waits in stays small: a goroutine's stack is halved by
// the garbage collector only while it uses less than a quarter of it.)
func (s *retryStream) openLocked() error {
	ctx := s.c.retryContext(s.ctx)
	s.c.attempts++
	cs, err := s.streamer(ctx, s.desc, s.cc, s.method, s.opts...)
	if err != nil {
		return err
	}
	s.cur, s.broken = cs, false
	s.replayLocked()
	return nil
}

// replayLocked sends the kept messages to the new attempt s.cur, and
// CloseSend if the caller called it. An attempt that ends during the replay
// is marked broken; the caller's next RecvMsg finds out how it ended.
func (s *retryStream) replayLocked() {
	for _, m := range s.sent {
		if err := s.cur.SendMsg(m); err != nil {
			// io.EOF: the attempt ended. Any other error was made by the
			// client for this message, and happened the first time too.
			s.broken = true
			return
		}
	}
	if s.closed {
		s.cur.CloseSend()
	}
}
