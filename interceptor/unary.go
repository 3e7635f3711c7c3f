package interceptor

import (
	"context"

	"google.golang.org/grpc"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/unary"
)

// Unary returns a unary client interceptor that retries calls as p says. It
// panics, with Validate's message, if p or an option is invalid: a Policy
// written in code should fail at start-up, like regexp.MustCompile. Use New
// for configuration read at run time.
//
// Every attempt gets the caller's call options, so those with effects per
// attempt (grpc.Header, grpc.Trailer) act on each attempt, the last one's
// winning; grpc.OnFinish runs once per call, with its final status.
//
// A call commits, and is not retried, once the server sent response headers
// (gRFC A6): the server may have acted on it. The interceptor learns it from
// grpc-go, never from a status message: every attempt that may be retried
// carries grpc.Header, whose metadata grpc-go sets only for real headers
// (not a trailers-only response), grpc.Peer, which grpc-go writes only for
// an attempt that made a transport stream, grpc.OnFinish, which grpc-go runs
// for every call it was given, and grpc.Trailer, for pushback. An attempt
// grpc-go had and made no stream for was never sent: a write is sent again
// (see Safety). Call options, not a stats handler: they cost less, and work
// however the interceptor is installed. So a failure after headers ends the
// call, whatever its words, a reset or GOAWAY included; one before them is
// retried. An interceptor chained after this one that answers itself, or
// drops the call options, hides these facts: its failures count as sent and
// uncommitted. WithoutPushback leaves out grpc.Trailer alone.
//
// With Policy.AttemptTimeout, an attempt whose response headers have not
// arrived AttemptTimeout after it started is cut (canceled: the timeout is
// not sent to the server as a deadline) and retried whatever Policy.Codes
// says, as DEADLINE_EXCEEDED; once its headers arrived, it is never cut and
// runs to the call's own bounds. DialOptions sees headers as they arrive;
// Unary alone sees them only once the attempt ended, so a cut attempt
// whose headers had arrived is not resent, and ends the call.
//
// Each call to Unary has its own throttle; use DialOptions, or the methods of
// one Retrier, to share one between the unary and stream interceptors.
func Unary(p grpcbackoff.Policy, opts ...Option) grpc.UnaryClientInterceptor {
	return mustNew(p, opts).Unary()
}

// Unary returns r's unary client interceptor (internal/unary).
func (r *Retrier) Unary() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return unary.Invoke(&r.e, ctx, method, req, reply, cc, invoker, opts...)
	}
}

// WithoutPushback stops reading the grpc-retry-pushback-ms trailer of unary
// calls (streams read it at no cost). Reading it takes a grpc.Trailer call
// option on every call, for which grpc-go allocates a copy of the trailer
// even when the call succeeds. RetryInfo details are still honoured, and
// what decides a retry is known as without it: whether the call committed
// (grpc.Header) and whether it was sent (grpc.Peer). Use it where no server
// sends pushback and every allocation counts: unary calls then ignore a
// server's retry guard (package guard), whose refusal is pushback, and a
// NotIdempotent method's RESOURCE_EXHAUSTED or ABORTED is not resent, as
// without the trailer the server's own status cannot be told from a stream
// reset that grpc-go gave the same code.
func WithoutPushback() Option {
	return func(r *Retrier) error { r.e.NoPushback = true; return nil }
}
