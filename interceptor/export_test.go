package interceptor

// Internals the external tests (package interceptor_test) look at.

import (
	"fmt"
	"testing"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
)

// MsgPrefix is the size of the prefix gRPC puts before every message; a
// message weighs its proto.Size plus MsgPrefix in the replay buffer.
const MsgPrefix = msgPrefix

// RetryStream is the stream the stream interceptor returns.
type RetryStream = retryStream

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
	rs, ok := inner.(*retryStream)
	if !ok {
		tb.Fatalf("the stream is a %T, not the interceptor's", inner)
	}
	return rs
}

// Buffer returns the state of s's replay buffer: its size in bytes, the
// number of kept messages, whether the first slot still holds a message and
// whether the stream committed.
func (s *retryStream) Buffer() (size, kept int, firstHeld, committed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.size, len(s.sent), s.sent0[0] != nil, s.state == streamCommitted
}

// SetMaxTargets sets the number of targets past which the idle ones are
// dropped, and returns a function that puts it back.
func SetMaxTargets(n int) (restore func()) {
	old := maxTargets
	maxTargets = n
	return func() { maxTargets = old }
}

// FirstTrailer returns the trailer s keeps of its first attempt.
func (s *retryStream) FirstTrailer() metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first.trailer
}
