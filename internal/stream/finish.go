package stream

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

// openFinishing opens the stream p plans, whose options opts carry
// grpc.OnFinish and which may make more than one attempt: its attempts go
// without the OnFinish options, which run once when the stream ends (see
// Stream.ended), or when its context ends first, as grpc-go runs them.
func openFinishing(e *call.Engine, p *call.Plan, ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, streamer grpc.Streamer, opts []grpc.CallOption) (grpc.ClientStream, error) {
	fs, rest := call.SplitOnFinish(opts)
	cs, err := open(e, p, ctx, desc, cc, streamer, rest)
	s, ok := cs.(*Stream)
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
func (s *Stream) finished(err error) {
	s.mu.Lock()
	fs := s.finishers
	s.finishers = nil
	s.mu.Unlock()
	if err == io.EOF {
		err = nil
	}
	call.Finish(fs, err)
}
