package loop

import (
	"context"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/adaptive"
	"github.com/platformkit/grpcbackoff/internal/cloudclients"
	"github.com/platformkit/grpcbackoff/internal/targets"
)

// Open starts the call p plans, on cc, as unary calls and streams alike
// start: the ClientConn's state (and the Google API its calls serve), a bad
// call option's error, adaptive throttling's admission, and, for a unary
// call of a Google Cloud client (req, opts), the retries the Retrier made
// in the client's earlier attempts of it (Recall); the budget counts the
// call. It returns the error that ends the call before any attempt, if one
// does: never the memory's.
func (e *Engine) Open(ctx context.Context, p *Plan, cc *grpc.ClientConn, req any, opts []grpc.CallOption) (*targets.Conn, error) {
	conn := e.Targets.Conn(cc)
	if p.Err != nil {
		return nil, status.Error(codes.InvalidArgument, p.Err.Error())
	}
	if conn.Adaptive() != nil {
		if err := e.admit(ctx, conn, p, cc); err != nil {
			return nil, err
		}
	}
	if conn.API.Load() == nil {
		if a := cloudclients.APIOf(ctx, p.Method); a != nil {
			conn.API.CompareAndSwap(nil, a) // once per ClientConn
		}
	}
	if req != nil && e.Memory.Len() > 0 {
		e.recall(ctx, p, cc, req)
	}
	conn.Started()
	return conn, nil
}

// NewCall returns the call p plans on cc, whose state is conn, with the
// caller's options opts.
func (e *Engine) NewCall(p *Plan, cc *grpc.ClientConn, conn *targets.Conn, opts []grpc.CallOption) Call {
	return Call{e: e, Plan: *p, CC: cc, Conn: conn, opts: opts, adaptive: adaptiveFor(conn, p)}
}

// adaptiveFor returns the adaptive state that a call on conn with plan p
// is subject to, nil if none (or if the call is Critical).
func adaptiveFor(conn *targets.Conn, p *Plan) *adaptive.Limiter {
	if a := conn.Adaptive(); a != nil && !p.Critical {
		return a
	}
	return nil
}

// errRejectedLocally is the status of a call that adaptive throttling did
// not send.
var errRejectedLocally = status.Error(codes.Unavailable, "grpcbackoff: call not sent: the backend has been refusing most requests")

// admit decides, before the first attempt, whether adaptive throttling lets
// the call p plans through; it returns the error for the caller if not, and
// tells the observers of the call's end. Only calls to a target with
// adaptive throttling need it.
func (e *Engine) admit(ctx context.Context, conn *targets.Conn, p *Plan, cc *grpc.ClientConn) error {
	a := adaptiveFor(conn, p)
	if a == nil || a.Allow(time.Now(), rand.Float64()) {
		return nil
	}
	c := Call{e: e, Plan: *p, CC: cc, Conn: conn}
	return c.End(ctx, c.Fail(errRejectedLocally, grpcbackoff.ReasonRejectedLocally))
}
