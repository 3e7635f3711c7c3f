package interceptor

import (
	"context"

	"google.golang.org/grpc/stats"
)

// A hedged call, and a unary attempt under AttemptTimeout, must know when an
// attempt's response headers arrive, not only when the attempt ends: from
// then on the call is committed to that attempt (gRFC A6), no further hedge
// may go out, and the attempt is not cut. A unary invoker tells nothing
// until it returns, so DialOptions installs headerWatch, a stats handler, on
// the ClientConns of a Retrier that hedges or has an AttemptTimeout: it finds
// the attempt's listener in the context the interceptor gave it and tells
// it.

// headerKey is the context key of the headerListener of the attempt an RPC
// carries out.
type headerKey struct{}

// headerWatch is the stats.Handler of DialOptions for a Retrier that hedges
// or cuts attempts (AttemptTimeout).
type headerWatch struct{}

func (headerWatch) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (headerWatch) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if in, ok := s.(*stats.InHeader); ok && in.Client {
		if l, ok := ctx.Value(headerKey{}).(headerListener); ok {
			l.headersArrived()
		}
	}
}

func (headerWatch) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (headerWatch) HandleConn(context.Context, stats.ConnStats) {}
