package interceptor

import (
	"context"

	"google.golang.org/grpc"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/attempt"
	"github.com/platformkit/grpcbackoff/internal/stream"
	"github.com/platformkit/grpcbackoff/internal/unary"
)

// DialOptions returns dial options that install both interceptors of one
// Retrier, chained (grpc.WithChainUnaryInterceptor) so that they compose with
// other interceptors, and that turn off grpc-go's own retry policy
// (grpc.WithDisableRetry), so that a service config from the resolver or
// grpc.WithDefaultServiceConfig cannot multiply attempts under ours: three
// attempts of each of three attempts would be nine. gRPC's transparent retry
// of attempts that never left the client stays on. The retryPolicy that
// the connection's service config gives a method (from its resolver: DNS
// TXT records, a manual resolver; or grpc.WithDefaultServiceConfig) is
// carried out by the interceptors instead, as WithServiceConfig would
// carry it out, in place of a default Policy (New's, or a retryPolicy of
// WithServiceConfig), never of a choice (the call's options, WithMethod,
// WithoutRetryFor, WithHedging; the order is in the package doc, and
// ExplainOn says it for one ClientConn). An xDS route's
// retry_policy cannot be: see XDSDialOptions. It panics if p
// or an option is invalid.
func DialOptions(p grpcbackoff.Policy, opts ...Option) []grpc.DialOption {
	return mustNew(p, opts).DialOptions()
}

// DialOptions returns dial options that install r's unary and stream
// interceptors, chained after any installed before them, and turn off
// grpc-go's own retry policy (see the function DialOptions).
func (r *Retrier) DialOptions() []grpc.DialOption {
	opts := []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(r.Unary()),
		grpc.WithChainStreamInterceptor(r.Stream()),
		grpc.WithDisableRetry(),
	}
	if r.hedged || r.timed {
		// Tells hedged calls, and attempts under AttemptTimeout, of their
		// response headers as they arrive (internal/attempt). Only a Retrier that
		// hedges or cuts attempts pays for it: a stats handler makes grpc-go
		// allocate its events on every call.
		opts = append(opts, grpc.WithStatsHandler(attempt.HeaderWatch{}))
	}
	return opts
}

// XDSDialOptions returns dial options for a ClientConn whose target resolves
// through xDS ("xds:", "google-c2p:"), where a route's retry_policy (gRFC
// A44) reaches grpc-go per call, out of the interceptors' sight: they
// install the interceptors of one Retrier and keep grpc-go's own retry on,
// one layer per method and code. Every call carries a call option by which
// grpc-go tells how many attempts it made (per-call credentials that send
// nothing and wrap the caller's own); a call it attempted more than once
// was under its route's policy, and is not retried again
// (grpcbackoff.ReasonGRPCRetries); a failure it did not retry is retried as
// p and the options say, with every rule of the Retrier. The route's
// retries are grpc-go's alone: its backoff and pushback, its commit rule
// (only a failure before response headers is resent), no retry budget, no
// safety rule, no stop before the deadline. A call grpc-go retried
// transparently (an attempt that never reached the server) counts as
// retried. A hedged method is not hedged there: grpc-go's retries would
// run inside each hedge. The call option costs every call of such a
// ClientConn (bench/README.md).
//
// On a ClientConn of any other target, grpc-go's retry takes the codes of
// the retryPolicy its service config gives a method, with its
// retryThrottling, which the interceptors cannot read; they take the
// others. Do not add grpc.WithDisableRetry. It panics if p or an option is
// invalid.
func XDSDialOptions(p grpcbackoff.Policy, opts ...Option) []grpc.DialOption {
	return mustNew(p, opts).XDSDialOptions()
}

// XDSDialOptions returns dial options that install r's interceptors,
// chained after any installed before them, and keep grpc-go's own retry on
// (see the function XDSDialOptions).
func (r *Retrier) XDSDialOptions() []grpc.DialOption {
	opts := []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			r.e.Targets.Conn(cc).KeepsGRPCRetry()
			return unary.Invoke(&r.e, ctx, method, req, reply, cc, invoker, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			r.e.Targets.Conn(cc).KeepsGRPCRetry()
			return stream.Open(&r.e, ctx, desc, cc, method, streamer, opts...)
		}),
	}
	if r.timed {
		opts = append(opts, grpc.WithStatsHandler(attempt.HeaderWatch{})) // see DialOptions; nothing is hedged here
	}
	return opts
}
