package call

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
)

// One way out: every call, unary, hedged or stream, ends through Fail
// (its final error and Reason) and End (what the observers are told).

// Observer is told of every retry decision and of every call's end, as
// interceptor's Observers are: the interceptor package adapts its own.
type Observer interface {
	OnRetry(ctx context.Context, r Retry)
	OnEnd(ctx context.Context, e End)
}

// Retry is a retry decision, field for field interceptor.Retry.
type Retry struct {
	Method       string
	StaticMethod bool
	Target       string
	Conn         *grpc.ClientConn
	Attempt      int
	Code         codes.Code
	Err          error
	Hint         grpcbackoff.Hint
	Delay        time.Duration
	Throttled    bool
	Hedge        bool
}

// End is how a call ended, field for field interceptor.End.
type End struct {
	Method       string
	StaticMethod bool
	Target       string
	Conn         *grpc.ClientConn
	Code         codes.Code
	Err          error
	Attempts     int
	Delay        time.Duration
	Hedged       bool
	Hedges       int
	Reason       grpcbackoff.Reason
}

// errConnClosing is what a call on a closed ClientConn gets from grpc-go
// (grpc.ErrClientConnClosing), and what a call waiting to retry gets when
// its ClientConn is closed.
var errConnClosing = status.Error(codes.Canceled, "grpc: the client connection is closing")

// Fail returns the error the call ends with after its attempt c.Attempts
// failed with err, retrying having stopped for why, and records why: err
// itself when nothing was retried (the only attempt failed with a code not
// retried here, or left to the Google Cloud client, or the caller's context
// ended during it: ReasonNone), a *grpcbackoff.Error of the call's attempts
// otherwise. It is the one place a call's final error is made.
func (c *Call) Fail(err error, why grpcbackoff.Reason) error {
	c.reason = why
	if c.Attempts <= 1 && (why == grpcbackoff.ReasonNone || why == grpcbackoff.ReasonNotRetryable || why == grpcbackoff.ReasonClientRetries) {
		return err
	}
	var elapsed time.Duration
	if !c.Start.IsZero() {
		elapsed = time.Since(c.Start)
	}
	return &grpcbackoff.Error{Err: err, Attempts: c.Plan.Prior + c.Attempts, Elapsed: elapsed, Reason: why}
}

// Closing returns the error a call ends with when its ClientConn's closing
// ended it: grpc-go's CANCELED "the client connection is closing"
// (ReasonCanceled), whatever its last attempt's code.
func (c *Call) Closing() error {
	return c.Fail(errConnClosing, grpcbackoff.ReasonCanceled)
}

// Interrupted returns the error a call ends with when its context or its
// ClientConn's closing ended it between attempts: CANCELED for a
// cancellation (ReasonCanceled), grpc-go's CANCELED "the client connection
// is closing" for the closing (ReasonCanceled), and for a deadline, which
// Decide makes unlikely, the last real error lastErr (ReasonDeadline).
func (c *Call) Interrupted(ctx context.Context, lastErr error) error {
	switch ctx.Err() {
	case context.Canceled:
		return c.Fail(status.FromContextError(ctx.Err()).Err(), grpcbackoff.ReasonCanceled)
	case nil:
		return c.Closing()
	}
	return c.Fail(lastErr, grpcbackoff.ReasonDeadline)
}

// End tells the observers that the call ended with err (nil: success), for
// the Reason Fail recorded, and returns err.
func (c *Call) End(ctx context.Context, err error) error {
	if c.e.Observer == nil {
		return err
	}
	c.e.Observer.OnEnd(ctx, End{Method: c.Plan.Method, StaticMethod: c.Plan.Static, Target: targetOf(c.CC), Conn: c.CC,
		Code: status.Code(err), Err: err, Attempts: c.Attempts, Delay: c.Delay, Hedged: c.Plan.Hedge != nil, Hedges: c.Hedges,
		Reason: c.reason})
	return err
}

// EndFirst tells the observers of a call whose first attempt succeeded,
// without a Call of its own.
func (e *Engine) EndFirst(ctx context.Context, p *Plan, cc *grpc.ClientConn) {
	if e.Observer != nil {
		e.Observer.OnEnd(ctx, End{Method: p.Method, StaticMethod: p.Static, Target: targetOf(cc), Conn: cc, Attempts: 1, Hedged: p.Hedge != nil})
	}
}

// targetOf returns cc's target, or "" for a call made without a ClientConn.
func targetOf(cc *grpc.ClientConn) string {
	if cc == nil {
		return ""
	}
	return cc.Target()
}
