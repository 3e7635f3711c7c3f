package interceptor

import (
	"context"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff/internal/call"
)

// grpc.OnFinish runs its function once per call, with the call's final
// status, as grpc-go runs it: a call that retries or hedges takes the
// caller's OnFinish options off its attempts and runs them itself, once,
// when the call ends (call.SplitOnFinish).

// unaryFinishing carries out a unary call whose options carry grpc.OnFinish
// and which may make more than one attempt: its attempts go without the
// OnFinish options, which run once with the call's final error.
func (r *Retrier) unaryFinishing(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
	fs, rest := call.SplitOnFinish(opts)
	err := r.unary(ctx, method, req, reply, cc, invoker, rest...)
	call.Finish(fs, err)
	return err
}

// streamFinishing opens a stream whose options carry grpc.OnFinish and
// which may make more than one attempt: its attempts go without the
// OnFinish options, which run once when the stream ends (see
// retryStream.ended), or when its context ends first, as grpc-go runs them.
func (r *Retrier) streamFinishing(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts []grpc.CallOption) (grpc.ClientStream, error) {
	fs, rest := call.SplitOnFinish(opts)
	cs, err := r.stream(ctx, desc, cc, method, streamer, rest...)
	s, ok := cs.(*retryStream)
	if err != nil || !ok {
		call.Finish(fs, err)
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
	call.Finish(fs, err)
}
