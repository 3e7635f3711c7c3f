package stream

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/platformkit/grpcbackoff/internal/attempt"
	"github.com/platformkit/grpcbackoff/internal/loop"
)

// Only a receive (the caller's RecvMsg, or Header learning how an attempt
// without headers ended) finds out that an attempt failed before the
// commit; that goroutine replaces it (retryLocked), through the call's
// decisions (internal/loop), and a new attempt opens (openAttempt).

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
			f := attempt.Failure{Err: err, Trailer: trailer, Status: len(trailer) > 0, Sent: sent, Cut: cut, Opening: s.opening}
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
				err = s.openAttempt(ctx, next)
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
