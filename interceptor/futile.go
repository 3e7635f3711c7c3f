package interceptor

import (
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// tooLargeMessages are the messages gRPC implementations give a
// RESOURCE_EXHAUSTED status when a message exceeds a size limit:
//
//   - grpc-go, on the client (send and receive limits) and on a server that
//     refuses a request, which the client then receives:
//     "trying to send message larger than max (N vs. M)",
//     "grpc: received message larger than max (N vs. M)",
//     "grpc: received message larger than max length allowed on current
//     machine", "grpc: [received ]message after decompression larger than
//     max", and "grpc: message too large (N bytes)";
//   - grpc-core (C++, Python, Ruby, ...): "Received message larger than max
//     (N vs. M)" and "Sent message larger than max (N vs. M)";
//   - grpc-java: "gRPC message exceeds maximum size M: N" and
//     "Decompressed gRPC message exceeds maximum size M".
var tooLargeMessages = [...]string{
	"message larger than max",
	"message after decompression larger than max",
	"grpc: message too large (",
	"gRPC message exceeds maximum size",
}

// futile reports whether st is a failure no retry can mend, however
// retryable its code: a message larger than a size limit of the client or
// the server. The same message is as large on every attempt, so such a call
// returns at once, and costs the retry budget nothing.
//
// gRPC gives these errors no structured form: they are RESOURCE_EXHAUSTED,
// with neither details nor trailers, told apart from a server's quota or
// rate limit (also RESOURCE_EXHAUSTED) only by their message. The message
// is matched only for a status without details: a quota error (with a
// QuotaFailure, ErrorInfo or RetryInfo detail) is never taken for one.
func futile(st *status.Status) bool {
	if st.Code() != codes.ResourceExhausted || len(st.Details()) > 0 {
		return false
	}
	msg := st.Message()
	for _, m := range tooLargeMessages {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}
