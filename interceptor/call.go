package interceptor

import (
	"context"
	"math/rand/v2"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/adaptive"
	"github.com/platformkit/grpcbackoff/internal/decide"
)

// call follows one call across its attempts. A unary call makes one only
// once its first attempt failed; streams and hedged calls make one at once.
type call struct {
	r        *Retrier
	plan     plan
	cc       *grpc.ClientConn
	conn     *connState      // the ClientConn's state: its target's budget, its closing
	adaptive *adaptive.State // the target's adaptive throttling; nil: none or Critical

	attempts int                // attempts sent so far
	hedges   int                // hedges sent so far
	start    time.Time          // end of the first attempt, or start of a hedged call
	delay    time.Duration      // time spent waiting between attempts
	reason   grpcbackoff.Reason // why retrying stopped, once it did
}

func (r *Retrier) newCall(p *plan, cc *grpc.ClientConn, conn *connState) call {
	return call{r: r, plan: *p, cc: cc, conn: conn, adaptive: r.adaptiveFor(conn, p)}
}

// failure is what the end of a failed attempt told.
type failure struct {
	err       error
	trailer   metadata.MD // for pushback; nil if not read
	committed bool        // response headers had arrived: the server has the call
	cut       bool        // the attempt's own AttemptTimeout ended it
}

// decide is the retry decision after attempt c.attempts failed as f: the
// delay before the next attempt, or the error to return to the caller (with
// c.reason set). It asks the budget to pay for the retry.
func (c *call) decide(ctx context.Context, f failure) (time.Duration, error) {
	now := time.Now()
	if c.start.IsZero() {
		c.start = now
	}
	if c.conn.isClosed() {
		// Whatever the attempt's code, the call ended because its
		// ClientConn is closing, not because a retry could not help.
		return 0, c.fail(errConnClosing, now, grpcbackoff.ReasonCanceled)
	}
	st := status.Convert(f.err)
	dl, _ := ctx.Deadline()
	a := decide.Attempt{Number: c.attempts, Hedges: c.hedges, MaxAttempts: c.plan.max, Code: st.Code(), TimedOut: f.cut,
		Final: f.committed || futile(st) || !c.r.safeToRetry(&c.plan, st),
		Hint:  grpcbackoff.ServerHint(st, f.trailer), Now: now, Deadline: dl, Done: ctx.Err()}
	if c.adaptive != nil {
		a.U = rand.Float64()
	}
	var b decide.Budget
	if tb := c.conn.t.budget; tb != nil {
		b = tb
	}
	switch d := decide.Decide(&c.plan.policy.Policy, a, b, c.adaptive); {
	case d.Retry:
		c.observe(ctx, a.Code, f.err, a.Hint, d.Delay, false, false)
		return d.Delay, nil
	case d.Reason == 0: // the caller's context ended during the first attempt
		return 0, f.err
	case d.Reason == grpcbackoff.ReasonThrottled:
		c.observe(ctx, a.Code, f.err, a.Hint, 0, true, false)
		return 0, c.fail(f.err, now, d.Reason)
	default:
		return 0, c.fail(f.err, now, d.Reason)
	}
}

// fail returns the error for a call that ends after its attempt c.attempts
// failed with err: err itself if it was the only attempt and simply not
// retryable, a *grpcbackoff.Error otherwise.
func (c *call) fail(err error, now time.Time, why grpcbackoff.Reason) error {
	c.reason = why
	if c.attempts == 1 && why == grpcbackoff.ReasonNotRetryable {
		return err
	}
	return &grpcbackoff.Error{Err: err, Attempts: c.attempts, Elapsed: now.Sub(c.start), Reason: why}
}

func (c *call) observe(ctx context.Context, code codes.Code, err error, h grpcbackoff.Hint, d time.Duration, throttled, hedge bool) {
	for _, o := range c.r.observers {
		o.OnRetry(ctx, Retry{Method: c.plan.method, Target: target(c.cc), Attempt: c.attempts, Code: code, Err: err,
			Hint: h, Delay: d, Throttled: throttled, Hedge: hedge})
	}
}

// wait sleeps for d, or until ctx is done or the call's ClientConn is
// closed. When ctx ends first, it returns the error for the caller: CANCELED
// for a cancellation, and for a deadline (which decide makes unlikely) the
// last real error lastErr. When the ClientConn is closed first, it returns at
// once with what a call on a closed ClientConn gets from grpc-go: CANCELED,
// "grpc: the client connection is closing" (Reason ReasonCanceled).
func (c *call) wait(ctx context.Context, d time.Duration, lastErr error) error {
	t := time.NewTimer(d)
	defer t.Stop()
	start := time.Now()
	select {
	case <-t.C:
		c.delay += d
		return nil
	case <-ctx.Done():
	case <-c.conn.closed:
	}
	now := time.Now()
	c.delay += now.Sub(start)
	c.reason = grpcbackoff.ReasonDeadline
	switch {
	case ctx.Err() == context.Canceled:
		c.reason, lastErr = grpcbackoff.ReasonCanceled, status.FromContextError(ctx.Err()).Err()
	case ctx.Err() == nil: // the ClientConn is closing
		c.reason, lastErr = grpcbackoff.ReasonCanceled, errConnClosing
	}
	return &grpcbackoff.Error{Err: lastErr, Attempts: c.attempts, Elapsed: now.Sub(c.start), Reason: c.reason}
}

// retryContext returns the context for attempt c.attempts+1, which tells the
// server how many attempts came before it. It always derives from the
// caller's ctx, so the key is added once.
func (c *call) retryContext(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, PreviousAttemptsKey, strconv.Itoa(c.attempts))
}

// withTimeout bounds ctx by the plan's timeout (a service config entry's),
// if it has one that ends before ctx's deadline.
func (p *plan) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if p.timeout <= 0 {
		return ctx, nil
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= p.timeout {
		return ctx, nil
	}
	return context.WithTimeout(ctx, p.timeout)
}
