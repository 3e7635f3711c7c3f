package attempt

import (
	"context"

	"google.golang.org/grpc/stats"
)

// A hedged call, and a unary attempt under AttemptTimeout, must know when an
// attempt's response headers arrive, not only when the attempt ends: from
// then on the call is committed to that attempt (gRFC A6), no further hedge
// may go out, and the attempt is not cut. A unary invoker tells nothing
// until it returns, so the interceptors' DialOptions install HeaderWatch, a
// stats handler, on the ClientConns of a Retrier that hedges or has an
// AttemptTimeout: it finds the attempt's listener in the context the
// interceptor gave the attempt (WithListener) and tells it.

// HeaderListener is told when the response headers of the attempt whose
// context carries it (WithListener) arrive: a Timer, or a hedged attempt.
type HeaderListener interface{ HeadersArrived() }

// headerKey is the context key of the HeaderListener of the attempt an RPC
// carries out.
type headerKey struct{}

// WithListener returns the context of an attempt whose response headers l
// is to hear of.
func WithListener(actx context.Context, l HeaderListener) context.Context {
	return context.WithValue(actx, headerKey{}, l)
}

// HeaderWatch is the stats.Handler that tells an attempt's HeaderListener
// of its response headers.
type HeaderWatch struct{}

func (HeaderWatch) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (HeaderWatch) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if in, ok := s.(*stats.InHeader); ok && in.Client {
		if l, ok := ctx.Value(headerKey{}).(HeaderListener); ok {
			l.HeadersArrived()
		}
	}
}

func (HeaderWatch) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (HeaderWatch) HandleConn(context.Context, stats.ConnStats) {}
