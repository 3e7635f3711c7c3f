// Package attempt is the bottom layer of the interceptors' engine: what one
// attempt of a call tells once it ended (Failure, from the Facts grpc-go
// writes into the attempt's call options), the attempt's own timeout
// (Timer), and the watch that hears its response headers arrive
// (HeaderWatch). It knows nothing of retries, budgets or calls: the layers
// above (internal/targets, internal/loop, then the unary path, hedging and
// the stream machine) decide from what it reports.
package attempt

import (
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// What the end of a failed attempt tells, each fact from what gRPC reports,
// never from the words of a status message, which a server (or a proxy
// forwarding its own downstream's words) writes as it likes:
//
//   - committed: the attempt's response headers arrived, so the server has
//     the call (gRFC A6). grpc-go's transport stream knows it (its Header
//     is nil for a trailers-only response and for a stream that ended
//     before headers) and tells it through grpc.Header for a unary call,
//     through ClientStream.Header for a stream. The trailer does not tell
//     it: a reset, a cut or a status without trailer metadata leaves the
//     same trailer after headers as before them, and a hop may put a
//     content-type in its trailers.
//   - the server's own status: the failure's status came in the server's
//     trailers: grpc-go reports an empty trailer unless trailers arrived
//     with metadata, and a trailers-only response always carries its
//     content-type; a stream reset (RST_STREAM) leaves it empty, and grpc-go
//     makes its status from the reset's HTTP/2 code (ENHANCE_YOUR_CALM and
//     FLOW_CONTROL_ERROR become RESOURCE_EXHAUSTED), which any hop may send
//     after the server acted. Only the server's own status can say a call
//     was not applied (MayHaveApplied).
//   - sent: the attempt made a transport stream, so its request may have
//     reached the server. grpc-go runs the call options' after() only then
//     (grpc.Peer, grpc.Header, grpc.Trailer), and a stream's opening
//     returns a stream only then. A pick that found no connection, a name
//     that did not resolve, a ClientConn closed before the call: not sent.
//     A stream the server refused or never processed (REFUSED_STREAM,
//     GOAWAY) is retried by grpc-go itself, once; when that retry fails too,
//     gRPC does not say whether the server had it, and the attempt counts
//     as sent.
//   - the call's context ended: ctx.Err() once the attempt returned; the
//     attempt's own AttemptTimeout: its Timer; the ClientConn closed: its
//     state (internal/targets' Conn.Closed).
//
// An attempt is taken as not sent only when gRPC says so: grpc-go ran the
// attempt's grpc.OnFinish (it does for every call it was given, before a
// unary invoker or a failed opening returns) and made no transport stream
// (wrote no peer; returned no stream). An attempt whose options did not
// reach grpc-go (an interceptor chained after the Retrier's answered
// itself, or called gRPC without them) tells nothing, and counts as sent,
// uncommitted: a read is retried, a write is not resent.
//
// Two things are read from a failure's status beside its code: the details
// (RetryInfo: the server's hint) and, only to stop retrying, the message of
// a size limit (Futile). Neither can make a call be sent again.

// Failure is what the end of a failed attempt told.
type Failure struct {
	Err       error
	Trailer   metadata.MD // for pushback; nil if not read
	Committed bool        // response headers had arrived: the server has the call
	Status    bool        // not committed: the status came in the server's trailers-only answer, not from a reset
	Sent      bool        // a transport stream was made: the request may have reached the server
	Cut       bool        // the attempt's own AttemptTimeout ended it
	Opening   bool        // a stream's first opening failed: its client's to retry, if it retries the opening
	Number    int         // the attempt's number, from 1; 0 for the call's last

	GRPCRetried bool // grpc-go's own retry, where it is on, made more than one attempt of it (an xDS route's policy: connpolicy.Attempts)
}

// HasRetryInfo reports whether st carries a RetryInfo detail: the server
// said when to retry.
func HasRetryInfo(st *status.Status) bool {
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.RetryInfo); ok {
			return true
		}
	}
	return false
}

// MayHaveApplied reports whether the attempt that failed as f may have been
// applied: it was sent, and either its code says the server, or one behind
// it, may have acted before the failure (CodeMayHaveApplied), or the code
// that says it did not (RESOURCE_EXHAUSTED, ABORTED, ...) is not the
// server's own status: grpc-go made it from a stream reset, or the
// attempt's trailer was not read.
func (f Failure) MayHaveApplied() bool {
	return f.Sent && (CodeMayHaveApplied(status.Code(f.Err)) || !f.Status)
}

// CodeMayHaveApplied reports whether a server's status with code leaves
// open that the call was applied. RESOURCE_EXHAUSTED and ABORTED, among
// others, say it was not, when the server says them.
func CodeMayHaveApplied(code codes.Code) bool {
	switch code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Unknown, codes.Internal, codes.DataLoss:
		return true
	}
	return false
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

// Futile reports whether st is a failure no retry can mend, however
// retryable its code: a message larger than a size limit of the client or
// the server. The same message is as large on every attempt, so such a call
// returns at once, and costs the retry budget nothing.
//
// gRPC gives these errors no structured form: they are RESOURCE_EXHAUSTED,
// with neither details nor trailers, told apart from a server's quota or
// rate limit (also RESOURCE_EXHAUSTED) only by their message. The message
// is matched only for a status without details: a quota error (with a
// QuotaFailure, ErrorInfo or RetryInfo detail) is never taken for one. It
// only ever stops retries: a server whose message looks like one gets its
// call's error at once, never a call sent again.
func Futile(st *status.Status) bool {
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
