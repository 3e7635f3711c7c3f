package interceptor

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
)

// errConnClosing is what a call on a closed ClientConn gets from grpc-go
// (grpc.ErrClientConnClosing), and what a call waiting to retry gets when
// its ClientConn is closed.
var errConnClosing = status.Error(codes.Canceled, "grpc: the client connection is closing")

// One way out: every call, unary, hedged or stream, ends through fail
// (its final error and Reason) and end (what the observers are told).

// fail returns the error the call ends with after its attempt c.attempts
// failed with err, retrying having stopped for why, and records why: err
// itself when nothing was retried (the only attempt failed with a code not
// retried here, or left to the Google Cloud client, or the caller's context
// ended during it: ReasonNone), a *grpcbackoff.Error of the call's attempts
// otherwise. It is the one place a call's final error is made.
func (c *call) fail(err error, why grpcbackoff.Reason) error {
	c.reason = why
	if c.attempts <= 1 && (why == grpcbackoff.ReasonNone || why == grpcbackoff.ReasonNotRetryable || why == grpcbackoff.ReasonClientRetries) {
		return err
	}
	var elapsed time.Duration
	if !c.start.IsZero() {
		elapsed = time.Since(c.start)
	}
	return &grpcbackoff.Error{Err: err, Attempts: c.plan.prior + c.attempts, Elapsed: elapsed, Reason: why}
}

// interrupted returns the error a call ends with when its context or its
// ClientConn's closing ended it between attempts: CANCELED for a
// cancellation (ReasonCanceled), grpc-go's CANCELED "the client connection
// is closing" for the closing (ReasonCanceled), and for a deadline, which
// decide makes unlikely, the last real error lastErr (ReasonDeadline).
func (c *call) interrupted(ctx context.Context, lastErr error) error {
	switch ctx.Err() {
	case context.Canceled:
		return c.fail(status.FromContextError(ctx.Err()).Err(), grpcbackoff.ReasonCanceled)
	case nil:
		return c.fail(errConnClosing, grpcbackoff.ReasonCanceled)
	}
	return c.fail(lastErr, grpcbackoff.ReasonDeadline)
}

// end tells every observer that the call ended with err (nil: success), for
// the Reason fail recorded, and returns err.
func (c *call) end(ctx context.Context, err error) error {
	if len(c.r.observers) == 0 {
		return err
	}
	e := End{Method: c.plan.method, StaticMethod: c.plan.static, Target: targetOf(c.cc), Conn: c.cc, Err: err,
		Attempts: c.attempts, Hedged: c.plan.hedge != nil, Hedges: c.hedges, Delay: c.delay, Reason: c.reason}
	e.Code = status.Code(err)
	c.r.tellEnd(ctx, e)
	return err
}

// endFirst tells the observers of a call whose first attempt succeeded,
// without a call of its own.
func (r *Retrier) endFirst(ctx context.Context, p *plan, cc *grpc.ClientConn) {
	r.tellEnd(ctx, End{Method: p.method, StaticMethod: p.static, Target: targetOf(cc), Conn: cc, Attempts: 1, Hedged: p.hedge != nil})
}

// tellEnd tells every observer of the end e of a call.
func (r *Retrier) tellEnd(ctx context.Context, e End) {
	for _, o := range r.observers {
		o.OnEnd(ctx, e)
	}
}

// targetOf returns cc's target, or "" for a call made without a ClientConn.
func targetOf(cc *grpc.ClientConn) string {
	if cc == nil {
		return ""
	}
	return cc.Target()
}
