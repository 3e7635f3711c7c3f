package interceptor

import (
	"context"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// grpc.OnFinish runs its function once per call, with the call's final
// status, as grpc-go runs it. gRPC runs the call options of every attempt,
// so a call that retries or hedges takes the caller's OnFinish options off
// its attempts and runs them itself, once, when the call ends.

// onFinishes returns the functions of the grpc.OnFinish options in opts,
// and a copy of opts without them.
func onFinishes(opts []grpc.CallOption) (fs []func(error), rest []grpc.CallOption) {
	rest = make([]grpc.CallOption, 0, len(opts))
	for _, o := range opts {
		if f, ok := o.(grpc.OnFinishCallOption); ok {
			fs = append(fs, f.OnFinish)
		} else {
			rest = append(rest, o)
		}
	}
	return fs, rest
}

// finish runs fs with err, a call's final error (nil for success).
func finish(fs []func(error), err error) {
	for _, f := range fs {
		f(err)
	}
}

// unaryFinishing carries out a unary call whose options carry grpc.OnFinish
// and which may make more than one attempt: its attempts go without the
// OnFinish options, which run once with the call's final error.
func (r *Retrier) unaryFinishing(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
	fs, rest := onFinishes(opts)
	err := r.unary(ctx, method, req, reply, cc, invoker, rest...)
	finish(fs, err)
	return err
}

// streamFinishing opens a stream whose options carry grpc.OnFinish and
// which may make more than one attempt: its attempts go without the
// OnFinish options, which run once when the stream ends (see
// retryStream.ended), or when its context ends first, as grpc-go runs them.
func (r *Retrier) streamFinishing(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts []grpc.CallOption) (grpc.ClientStream, error) {
	fs, rest := onFinishes(opts)
	cs, err := r.stream(ctx, desc, cc, method, streamer, rest...)
	s, ok := cs.(*retryStream)
	if err != nil || !ok {
		finish(fs, err)
		return cs, err
	}
	s.mu.Lock()
	s.finishers = fs
	s.stopFinish = context.AfterFunc(s.ctx, func() { s.finished(status.FromContextError(s.ctx.Err()).Err()) })
	s.mu.Unlock()
	return s, nil
}

// finished runs the stream's OnFinish functions, once, with err (io.EOF:
// success).
func (s *retryStream) finished(err error) {
	s.mu.Lock()
	fs := s.finishers
	s.finishers = nil
	s.mu.Unlock()
	if err == io.EOF {
		err = nil
	}
	finish(fs, err)
}
