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
	attempt   int         // its number, from 1; 0 for c.attempts
}

// number returns the number of the attempt that failed as f.
func (c *call) number(f failure) int {
	if f.attempt > 0 {
		return f.attempt
	}
	return c.attempts
}

// decide is the retry decision after attempt c.attempts failed as f: the
// delay before the next attempt, or the error to return to the caller (with
// c.reason set). It asks adaptive throttling and the budget to pay for the
// retry.
func (c *call) decide(ctx context.Context, f failure) (time.Duration, error) {
	return c.decideRetry(ctx, f, true)
}

// decideUnpaid is decide without asking adaptive throttling and the budget,
// for a retry that may not be sent: payRetry asks them when it is due.
func (c *call) decideUnpaid(ctx context.Context, f failure) (time.Duration, error) {
	return c.decideRetry(ctx, f, false)
}

// payRetry asks adaptive throttling and the budget for the retry, due now,
// after the attempt that failed as f, decided on by decideUnpaid with delay
// d. It returns the error that ends the call if they refuse.
func (c *call) payRetry(ctx context.Context, f failure, d time.Duration) error {
	a := decide.Attempt{TimedOut: f.cut, Now: time.Now()}
	if c.adaptive != nil {
		a.U = rand.Float64()
	}
	st := status.Convert(f.err)
	hint := grpcbackoff.ServerHint(st, f.trailer)
	switch why := decide.Pay(c.budget(), c.adaptive, a); why {
	case 0:
		c.observe(ctx, c.number(f), st.Code(), f.err, hint, d, false, false)
		return nil
	case grpcbackoff.ReasonThrottled:
		c.observe(ctx, c.number(f), st.Code(), f.err, hint, 0, true, false)
		fallthrough
	default:
		return c.fail(f.err, a.Now, why)
	}
}

// budget returns the budget of c's target, nil (an interface) if it has
// none.
func (c *call) budget() decide.Budget {
	if b := c.conn.t.budget; b != nil {
		return b
	}
	if s := c.conn.t.shared; s != nil {
		return s
	}
	return nil
}

func (c *call) decideRetry(ctx context.Context, f failure, pay bool) (time.Duration, error) {
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
	var b decide.Budget
	ad := c.adaptive
	if pay {
		b = c.budget()
	} else {
		ad = nil
	}
	if ad != nil {
		a.U = rand.Float64()
	}
	switch d := decide.Decide(&c.plan.policy.Policy, a, b, ad); {
	case d.Retry:
		if pay {
			c.observe(ctx, c.number(f), a.Code, f.err, a.Hint, d.Delay, false, false)
		}
		return d.Delay, nil
	case d.Reason == 0: // the caller's context ended during the first attempt
		return 0, f.err
	case d.Reason == grpcbackoff.ReasonThrottled:
		c.observe(ctx, c.number(f), a.Code, f.err, a.Hint, 0, true, false)
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

func (c *call) observe(ctx context.Context, attempt int, code codes.Code, err error, h grpcbackoff.Hint, d time.Duration, throttled, hedge bool) {
	for _, o := range c.r.observers {
		o.OnRetry(ctx, Retry{Method: c.plan.method, StaticMethod: c.plan.static, Target: target(c.cc), Conn: c.cc, Attempt: attempt, Code: code, Err: err,
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
