package loop

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/cloudclients"
	"github.com/platformkit/grpcbackoff/internal/targets"
)

// Open starts the call p plans, on cc, as unary calls and streams alike
// start: the ClientConn's state (and the Google API its calls serve), a bad
// call option's error, the admission of the target's gates (which count
// the call, and may refuse it: then the observers are told of its end),
// and, for a unary call of a Google Cloud client (req, opts), the retries
// the Retrier made in the client's earlier attempts of it (Recall). It
// returns the error that ends the call before any attempt, if one does:
// never the memory's.
func (e *Engine) Open(ctx context.Context, p *Plan, cc *grpc.ClientConn, req any, opts []grpc.CallOption) (*targets.Conn, error) {
	conn := e.Targets.Conn(cc)
	if p.Err != nil {
		return nil, status.Error(codes.InvalidArgument, p.Err.Error())
	}
	if why := conn.Gates().Admit(p.criticality()); why != 0 {
		c := Call{e: e, Plan: *p, CC: cc, Conn: conn}
		return nil, c.End(ctx, c.Fail(notSent(why), why))
	}
	if conn.API.Load() == nil {
		if a := cloudclients.APIOf(ctx, p.Method); a != nil {
			conn.API.CompareAndSwap(nil, a) // once per ClientConn
		}
	}
	if req != nil && e.Memory.Len() > 0 {
		e.recall(ctx, p, cc, req)
	}
	return conn, nil
}

// NewCall returns the call p plans on cc, whose state is conn, with the
// caller's options opts.
func (e *Engine) NewCall(p *Plan, cc *grpc.ClientConn, conn *targets.Conn, opts []grpc.CallOption) Call {
	return Call{e: e, Plan: *p, CC: cc, Conn: conn, opts: opts}
}

// errRejectedLocally is the status of a call that adaptive throttling did
// not send.
var errRejectedLocally = status.Error(codes.Unavailable, "grpcbackoff: call not sent: the backend has been refusing most requests")

// notSent returns the status of a call that a gate of its target refused
// for why before its first attempt.
func notSent(why grpcbackoff.Reason) error {
	if why == grpcbackoff.ReasonRejectedLocally {
		return errRejectedLocally
	}
	return status.Errorf(codes.Unavailable, "grpcbackoff: call not sent: %v", why)
}
