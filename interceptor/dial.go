package interceptor

import (
	"google.golang.org/grpc"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/attempt"
)

// DialOptions returns dial options that install both interceptors of one
// Retrier, chained (grpc.WithChainUnaryInterceptor) so that they compose with
// other interceptors, and that turn off grpc-go's own retry policy
// (grpc.WithDisableRetry), so that a service config from the resolver or
// grpc.WithDefaultServiceConfig cannot multiply attempts under ours: three
// attempts of each of three attempts would be nine. gRPC's transparent retry
// of attempts that never left the client stays on. It panics if p or an
// option is invalid.
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
