package stream

import (
	"context"

	"google.golang.org/grpc"

	"github.com/platformkit/grpcbackoff/internal/loop"
)

// A stream that is not retried (no Policy applies to its method) goes to
// gRPC as it is, bounded by its plan's timeout if it has one.

// plainStream opens a stream that is not retried, bounded by the plan's
// timeout if it has one.
func plainStream(ctx context.Context, p *loop.Plan, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts []grpc.CallOption) (grpc.ClientStream, error) {
	ctx, cancel := p.WithTimeout(ctx)
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if cancel == nil {
		return cs, err
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return &timedStream{ClientStream: cs, serverStreams: desc.ServerStreams, cancel: cancel}, nil
}

// timedStream is a stream bounded by a timeout, whose context it releases
// when the stream ends.
type timedStream struct {
	grpc.ClientStream
	serverStreams bool
	cancel        context.CancelFunc
}

func (s *timedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil || !s.serverStreams { // the end, or a client stream's only response
		s.cancel()
	}
	return err
}
