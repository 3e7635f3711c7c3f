package interceptor

import (
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// What the end of a failed attempt tells: its error, its trailer, whether
// the server had the call (its headers had arrived), whether no retry can
// mend it, whether it may have been applied. gRPC gives much of this no
// structured form: some of it is read from grpc-go's messages.

// failure is what the end of a failed attempt told.
type failure struct {
	err       error
	trailer   metadata.MD // for pushback; nil if not read
	committed bool        // response headers had arrived: the server has the call
	cut       bool        // the attempt's own AttemptTimeout ended it
	opening   bool        // a stream's first opening failed: its client's to retry, if it retries the opening
	attempt   int         // its number, from 1; 0 for the call's last
}

// headersArrived reports whether a unary attempt that failed with err had
// received response headers, from its trailer (nil when no transport stream
// was made: nothing was sent). A trailers-only response carries the
// content-type, which gRPC sends with headers, in its trailer; a trailer
// after headers does not, and one with metadata shows it came from the
// server. An empty trailer is what both a server's bare status after headers
// and a failure of the transport leave: the status tells them apart.
func headersArrived(err error, trailer metadata.MD) bool {
	switch {
	case trailer == nil:
		return false
	case trailer["content-type"] != nil:
		return false
	case len(trailer) > 0:
		return true
	}
	return !clientMade(status.Convert(err))
}

// clientMadeMessages are the messages of the statuses grpc-go's client
// makes, instead of the server, when an attempt fails on the transport (a
// lost connection, a reset, GOAWAY) or on its context.
var clientMadeMessages = [...]string{
	"connection error: desc = ",
	"closing transport due to: ",
	"error reading from server: ",
	"error reading server preface: ",
	"transport is closing",
	"keepalive ping failed to receive ACK within timeout",
	"closing connection since the server is not reading",
	"stream terminated by RST_STREAM with error code: ",
	"server is draining the connection",
	"received goaway",
	"no active streams left to process while draining",
	"server closed the stream without sending trailers",
	"transport: ",
	"context deadline exceeded",
	"context canceled",
	"grpc: the client connection is closing",
}

// clientMade reports whether st is one grpc-go's client made for a failure
// of the transport or of the call's context, not one the server sent.
func clientMade(st *status.Status) bool {
	msg := st.Message()
	for _, m := range clientMadeMessages {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// hasRetryInfo reports whether st carries a RetryInfo detail: the server
// said when to retry.
func hasRetryInfo(st *status.Status) bool {
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.RetryInfo); ok {
			return true
		}
	}
	return false
}

// mayHaveApplied reports whether a failure with st may have been applied by
// the server.
func mayHaveApplied(st *status.Status) bool {
	switch st.Code() {
	case codes.Unavailable:
		return !neverSent(st.Message())
	case codes.DeadlineExceeded, codes.Unknown, codes.Internal, codes.DataLoss:
		return true
	}
	return false
}

// neverSent reports whether the message of an UNAVAILABLE status is grpc-go's
// for a call that found no connection to send on: the connection could not
// be made, or the name not resolved.
func neverSent(msg string) bool {
	return strings.Contains(msg, "Error while dialing") ||
		strings.Contains(msg, "name resolver error") ||
		strings.Contains(msg, "produced zero addresses")
}

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
