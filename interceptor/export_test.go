package interceptor

// Internals the external tests (package interceptor_test) look at.

import (
	"fmt"
	"testing"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/platformkit/grpcbackoff/internal/stream"
)

// MsgPrefix is the size of the prefix gRPC puts before every message; a
// message weighs its proto.Size plus MsgPrefix in the replay buffer.
const MsgPrefix = stream.MsgPrefix

// RetryStream is the stream the stream interceptor returns: it tells the
// state of its replay buffer (Buffer) and the trailer it keeps of its first
// attempt (FirstTrailer).
type RetryStream = stream.Stream

// RetryStreamOf digs the interceptor's stream out of a generated client
// stream of the TestService, for the tests that look at its buffer. It fails
// the test if cs does not wrap one.
func RetryStreamOf(tb testing.TB, cs any) *RetryStream {
	tb.Helper()
	var inner grpc.ClientStream
	switch s := cs.(type) {
	case *grpc.GenericClientStream[testgrpc.StreamingOutputCallRequest, testgrpc.StreamingOutputCallResponse]:
		inner = s.ClientStream
	case *grpc.GenericClientStream[testgrpc.StreamingInputCallRequest, testgrpc.StreamingInputCallResponse]:
		inner = s.ClientStream
	default:
		panic(fmt.Sprintf("RetryStreamOf(%T)", cs))
	}
	rs, ok := inner.(*stream.Stream)
	if !ok {
		tb.Fatalf("the stream is a %T, not the interceptor's", inner)
	}
	return rs
}

// SetMaxTargets sets the number of targets past which the idle ones are
// dropped, and returns a function that puts it back.
func SetMaxTargets(n int) (restore func()) {
	old := maxTargets
	maxTargets = n
	return func() { maxTargets = old }
}
