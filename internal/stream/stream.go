// Package stream is the stream machine of the interceptors' engine: a
// stream of any kind that a Policy applies to is retried, transparently,
// until it commits (gRFC A6), its sent messages kept and replayed to each
// new attempt, without losing or duplicating a message (see
// interceptor.Stream for the contract).
//
// Its state is one type, Stream (state.go), whose every operation goes
// through one mutex. Its files, each on those before it: state.go (its
// phases, the current attempt, the kept messages, the commit), guard.go (a
// panic under the stream), finish.go (grpc.OnFinish), timeout.go
// (AttemptTimeout, which times the caller's waits), replay.go (the kept
// messages sent to a new attempt), retry.go (a failed attempt replaced,
// through the retry loop), resume.go (a committed server stream with a
// resume rule resumed, as a retry), operations.go (the caller's SendMsg,
// RecvMsg, Header, CloseSend, Trailer and Context), stream.go (Open, the
// one way in), plain.go (a stream no Policy applies to). It keeps what is a
// stream's own, the replay, the commit and the resume; the retry loop
// (internal/loop) decides, pays for and ends its retries and resumes as any
// call's, and it sits above it in the engine's layers.
package stream

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff/internal/loop"
	"github.com/platformkit/grpcbackoff/internal/targets"
)

// Open is the stream interceptor of engine e: the one way into a stream,
// its plan first. A stream no Retrier before this one took, and whose plan
// has a Policy, is a Stream; one without is opened as it is (plain.go).
func Open(e *loop.Engine, ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	var p loop.Plan
	conn := e.Plan(&p, cc, method, opts)
	if p.Through {
		return streamer(ctx, desc, cc, method, opts...)
	}
	streamer = e.Streamer(method, streamer)
	if p.OnFinish && p.Policy != nil {
		return openFinishing(e, &p, conn, ctx, desc, streamer, opts)
	}
	return open(e, &p, conn, ctx, desc, streamer, opts)
}

// open opens the stream p plans: a Stream if it has a Policy, else a plain
// one.
func open(e *loop.Engine, p *loop.Plan, conn *targets.Conn, ctx context.Context, desc *grpc.StreamDesc, streamer grpc.Streamer, opts []grpc.CallOption) (grpc.ClientStream, error) {
	cc := conn.ClientConn()
	o, err := e.Open(ctx, p, conn, nil)
	if err != nil {
		return nil, err
	}
	ctx = p.Outgoing(ctx) // its criticality, on every attempt
	if p.Policy == nil {
		return plainStream(ctx, p, desc, cc, p.Method, streamer, append(opts[:len(opts):len(opts)], loop.Mark))
	}
	p.Hedge = nil // streams are not hedged: their Policy applies
	s := &Stream{ctx: ctx, desc: desc, streamer: streamer, opts: opts, timeout: p.Policy.AttemptTimeout, c: e.NewCall(p, cc, o, opts)}
	s.c.Attempts = 1
	s.changed.L = &s.mu
	s.sent = s.sent0[:0]
	s.cur = &s.first
	if p.Resume != nil && desc.ServerStreams && !desc.ClientStreams {
		s.rs = p.Resume.Start() // a server stream with a resume rule (resume.go)
	}
	if ctx, cancel := p.WithTimeout(ctx); cancel != nil {
		s.ctx, s.stopTimeout = ctx, cancel
	}
	if err := s.openAttempt(s.ctx, s.cur); err != nil {
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

// openFinishing opens the stream p plans, whose options opts carry
// grpc.OnFinish and which may make more than one attempt: its attempts go
// without the OnFinish options, which run once when the stream ends (see
// Stream.ended), or when its context ends first, as grpc-go runs them.
func openFinishing(e *loop.Engine, p *loop.Plan, conn *targets.Conn, ctx context.Context, desc *grpc.StreamDesc, streamer grpc.Streamer, opts []grpc.CallOption) (grpc.ClientStream, error) {
	fs, rest := loop.SplitOnFinish(opts)
	cs, err := open(e, p, conn, ctx, desc, streamer, rest)
	s, ok := cs.(*Stream)
	if err != nil || !ok {
		loop.Finish(fs, err)
		return cs, err
	}
	s.mu.Lock()
	s.finishers = fs
	s.stopFinish = context.AfterFunc(s.ctx, func() { s.finished(status.FromContextError(s.ctx.Err()).Err()) })
	s.mu.Unlock()
	return s, nil
}
