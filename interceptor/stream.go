package interceptor

import (
	"context"
	"fmt"

	"google.golang.org/grpc"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/stream"
)

// Stream returns a stream client interceptor that retries streams of every
// kind as p says, without losing or duplicating a message. It panics, with
// Validate's message, if p or an option is invalid; use New for
// configuration read at run time, and DialOptions or one Retrier to share a
// budget between unary calls and streams.
//
// A stream is retried, transparently, until it commits (gRFC A6): when
// response headers or a message arrive, when the caller asks for Context,
// or when the messages it sent would exceed the buffer limit
// (WithBufferLimit). Until then every message sent is kept (by reference,
// weighing its proto.Size plus 5 bytes; one that is not a proto.Message
// commits the stream), and a new attempt gets them all again, in order,
// then CloseSend if the caller called it. While a retry waits for its
// backoff, SendMsg keeps its message and returns at once, past the buffer
// limit too (the stream then commits to the next attempt); Header and
// Context wait for the next attempt. After the commit, errors go to the
// caller, as on a grpc-go stream: a SendMsg once the stream failed returns
// io.EOF, one after CloseSend INTERNAL (and the stream ends with it). A
// server stream of a method with a resume rule (WithResume) is resumed
// after the commit too, and its Context commits nothing.
//
// Policy.AttemptTimeout bounds a silent server, not a slow caller: until the
// server answers an attempt (its headers), the attempt is cut, and retried,
// once the caller has waited that long in one operation (SendMsg, RecvMsg,
// Header, the opening; a replay's sends count as the caller's); a RecvMsg
// or Header waits from the later of its start and the last message sent. A
// goroutine per attempt then waits for its headers. SendMsg and RecvMsg may
// run on two goroutines, Header on any. A panic in the code under the
// stream (an interceptor chained after this one), on one of the stream's
// own goroutines too, is raised on the caller's goroutine by its current or
// next operation, and by every later one.
func Stream(p grpcbackoff.Policy, opts ...Option) grpc.StreamClientInterceptor {
	return mustNew(p, opts).Stream()
}

// Stream returns r's stream client interceptor (internal/stream).
func (r *Retrier) Stream() grpc.StreamClientInterceptor { return r.stream }

func (r *Retrier) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return stream.Open(&r.e, ctx, desc, cc, method, streamer, opts...)
}

// WithBufferLimit sets how many bytes of sent messages a stream keeps for
// replay before it commits; it must not be negative. 0 commits every stream
// on its first message sent. Default DefaultBufferLimit.
func WithBufferLimit(n int) Option {
	return func(r *Retrier) error {
		if n < 0 {
			return fmt.Errorf("interceptor: WithBufferLimit(%d): the limit must not be negative", n)
		}
		r.e.BufLimit = n
		return nil
	}
}
