package loop

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/targets"
)

// Open starts the call p plans, on the ClientConn whose state is conn (as
// Plan returned it), as unary calls and streams alike start: a bad call
// option's error, the admission of the target's gates (which count the
// call, and may refuse it: then the observers are told of its end), and
// the Hook's opening of it, with its request req (nil for a stream). It
// returns the error that ends the call before any attempt, if one does:
// never the Hook's.
func (e *Engine) Open(ctx context.Context, p *Plan, conn *targets.Conn, req any) (Opened, error) {
	if p.Err != nil {
		return Opened{}, badOption(p.Err)
	}
	if why := conn.Gates().Admit(p.criticality()); why != 0 {
		return Opened{}, e.refused(ctx, p, conn, why)
	}
	o := Opened{Conn: conn}
	if e.Hook != nil {
		o.prior, o.state = e.Hook.Open(ctx, conn, p.Method, req, p.Policy != nil && p.Hedge == nil)
	}
	return o, nil
}

// NewCall returns the call p plans on cc, opened as o, with the caller's
// options opts.
func (e *Engine) NewCall(p *Plan, cc *grpc.ClientConn, o Opened, opts []grpc.CallOption) Call {
	return Call{e: e, Plan: *p, CC: cc, Conn: o.Conn, opts: opts, Prior: o.prior, hook: o.state}
}

// badOption returns the error of a call whose call option was built from
// bad input: INVALID_ARGUMENT, naming it.
func badOption(err error) error { return status.Error(codes.InvalidArgument, err.Error()) }

// refused returns the error of the call p plans on conn, which a gate of
// its target refused for why before its first attempt, and tells the
// observers of its end.
func (e *Engine) refused(ctx context.Context, p *Plan, conn *targets.Conn, why grpcbackoff.Reason) error {
	c := Call{e: e, Plan: *p, CC: conn.ClientConn(), Conn: conn}
	return c.End(ctx, c.Fail(notSent(why), why))
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
