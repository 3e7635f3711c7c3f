package call

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
	"github.com/platformkit/grpcbackoff/internal/attempt"
	"github.com/platformkit/grpcbackoff/internal/decide"
	"github.com/platformkit/grpcbackoff/internal/targets"
)

// Call follows one call across its attempts. A unary call makes one only
// once its first attempt failed; streams and hedged calls make one at once.
// Its decisions follow the concurrency contract of the stream and the
// hedged call that hold it: one goroutine at a time decides and acts.
type Call struct {
	e        *Engine
	Plan     Plan
	CC       *grpc.ClientConn
	Conn     *targets.Conn     // the ClientConn's state: its target's budget, its closing
	opts     []grpc.CallOption // the caller's call options
	Req      any               // a unary call's request; nil for a stream
	adaptive *adaptive.State   // the target's adaptive throttling; nil: none or Critical

	Attempts int                // attempts sent so far
	Hedges   int                // hedges sent so far
	Start    time.Time          // end of the first attempt, or start of a hedged call
	Delay    time.Duration      // time spent waiting between attempts
	reason   grpcbackoff.Reason // why retrying stopped, once it did (Fail)
}

// Unary is what every attempt of one unary call sends.
type Unary struct {
	Method     string
	Req, Reply any
	CC         *grpc.ClientConn
	Invoker    grpc.UnaryInvoker
	Opts       []grpc.CallOption // the caller's
	Origin     context.Context   // the caller's context, before the plan's timeout
}

// Engine returns the engine c belongs to.
func (c *Call) Engine() *Engine { return c.e }

// Reason returns why retrying stopped, once Fail recorded it.
func (c *Call) Reason() grpcbackoff.Reason { return c.reason }

// number returns the number of the attempt that failed as f.
func (c *Call) number(f attempt.Failure) int {
	if f.Number > 0 {
		return f.Number
	}
	return c.Attempts
}

// Decide is the retry decision after the attempt that failed as f
// (decide.Decide): the delay before the next attempt, or the error the
// call ends with. It pays for nothing: Book, Pay or PayDue do.
func (c *Call) Decide(ctx context.Context, f attempt.Failure) (time.Duration, error) {
	now := time.Now()
	if c.Start.IsZero() {
		c.Start = now
	}
	if c.Conn.Closed() {
		// Whatever the attempt's code, the call ended because its
		// ClientConn is closing, not because a retry could not help.
		return 0, c.Closing()
	}
	st := status.Convert(f.Err)
	dl, _ := ctx.Deadline()
	a := decide.Attempt{Number: c.Plan.Prior + c.Attempts, Hedges: c.Hedges, MaxAttempts: c.Plan.Max, Code: st.Code(), TimedOut: f.Cut,
		Client: c.LeftToClient(ctx, st, f.Opening),
		Final:  f.Committed || attempt.Futile(st) || !c.e.safeToRetry(&c.Plan, f, c.Req),
		Hint:   grpcbackoff.ServerHint(st, f.Trailer), Now: now, Deadline: dl, Done: ctx.Err()}
	d := decide.Decide(&c.Plan.Policy.Policy, a, nil, nil)
	if !d.Retry {
		return 0, c.Fail(f.Err, d.Reason)
	}
	return d.Delay, nil
}

// Pay asks adaptive throttling and the budget (decide.Pay) for the attempt
// due now: the retry, after delay d, of the attempt that failed as f, or,
// with hedge, a hedge (paid, as the retry of a cut attempt is, from the
// long-run allowance alone: the server may be working on every attempt in
// flight; f is then the last failure, if any). It tells the observers of
// the attempt, or of the budget's refusal, and returns why it was refused,
// 0 if it may go. It is the one place retries and hedges are paid.
func (c *Call) Pay(ctx context.Context, f attempt.Failure, d time.Duration, hedge bool) grpcbackoff.Reason {
	a := decide.Attempt{TimedOut: f.Cut || hedge, Now: time.Now()}
	if c.adaptive != nil {
		a.U = rand.Float64()
	}
	why := decide.Pay(c.Conn.Budget(), c.adaptive, a)
	c.tell(ctx, f, d, hedge, why)
	return why
}

// tell tells the observers of the retry (or, with hedge, the hedge) after
// delay d of the attempt that failed as f, paid (why 0) or refused by the
// budget (ReasonThrottled).
func (c *Call) tell(ctx context.Context, f attempt.Failure, d time.Duration, hedge bool, why grpcbackoff.Reason) {
	if c.e.Observer == nil || why != 0 && why != grpcbackoff.ReasonThrottled {
		return
	}
	var hint grpcbackoff.Hint
	var code codes.Code
	if f.Err != nil {
		st := status.Convert(f.Err)
		code = st.Code()
		if !hedge {
			hint = grpcbackoff.ServerHint(st, f.Trailer)
		}
	}
	if why != 0 {
		d = 0
	}
	c.e.Observer.OnRetry(ctx, Retry{Method: c.Plan.Method, StaticMethod: c.Plan.Static, Target: targetOf(c.CC), Conn: c.CC,
		Attempt: c.number(f), Code: code, Err: f.Err, Hint: hint, Delay: d, Throttled: why != 0, Hedge: hedge})
}

// Book is the budget's part, when a retry is decided, of the retry after
// delay d of the attempt that failed as f: a Deferred budget is told of it
// (Want), and pays for it when it is due (PayDue); any other budget pays
// now (Pay). It returns why the retry was refused, 0 if it may go.
func (c *Call) Book(ctx context.Context, f attempt.Failure, d time.Duration) grpcbackoff.Reason {
	if c.Conn.Deferred() == nil {
		return c.Pay(ctx, f, d, false)
	}
	return c.Want(ctx, f, d)
}

// Want tells a Deferred budget, when a retry is decided, of the retry
// after delay d of the attempt that failed as f, which it pays for when it
// is due (PayDue); other budgets are told nothing. It returns
// ReasonThrottled, having told the observers, if the budget refuses the
// retry there and then, 0 otherwise.
func (c *Call) Want(ctx context.Context, f attempt.Failure, d time.Duration) grpcbackoff.Reason {
	b := c.Conn.Deferred()
	if b == nil {
		return 0
	}
	now := time.Now()
	if !b.Want(now, now.Add(d), f.Cut) {
		c.tell(ctx, f, 0, false, grpcbackoff.ReasonThrottled)
		return grpcbackoff.ReasonThrottled
	}
	return 0
}

// PayDue pays, now that it is due, for a retry that Book told a Deferred
// budget of (Pay); other budgets paid when it was decided. It returns why
// the retry was refused, 0 if it may go.
func (c *Call) PayDue(ctx context.Context, f attempt.Failure, d time.Duration) grpcbackoff.Reason {
	if c.Conn.Deferred() == nil {
		return 0
	}
	return c.Pay(ctx, f, d, false)
}

// LeftToClient reports whether a failure with st is the Google Cloud
// client's to retry (internal/cloudclients); opening says it was a stream's
// first opening.
func (c *Call) LeftToClient(ctx context.Context, st *status.Status, opening bool) bool {
	c.Plan.learnClient(ctx, c.Conn, c.opts, c.Req)
	return c.Plan.Client.Leaves(st, opening)
}

// Wait sleeps for d, or until ctx is done or the call's ClientConn is
// closed; then it returns the error the call ends with (see Interrupted).
func (c *Call) Wait(ctx context.Context, d time.Duration, lastErr error) error {
	t := time.NewTimer(d)
	defer t.Stop()
	start := time.Now()
	select {
	case <-t.C:
		c.Delay += d
		return nil
	case <-ctx.Done():
	case <-c.Conn.Done():
	}
	c.Delay += time.Since(start)
	return c.Interrupted(ctx, lastErr)
}

// PreviousAttemptsKey is the metadata key that tells the server, on a
// retried attempt, how many attempts came before it (as grpc-go's built-in
// retry does): interceptor.PreviousAttemptsKey.
const PreviousAttemptsKey = "grpc-previous-rpc-attempts"

// RetryContext returns the context for attempt c.Attempts+1, which tells
// the server how many attempts came before it. It always derives from the
// caller's ctx, so the key is added once.
func (c *Call) RetryContext(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, PreviousAttemptsKey, strconv.Itoa(c.Attempts))
}

// One way out: every call, unary, hedged or stream, ends through Fail
// (its final error and Reason) and End (what the observers are told).

// errConnClosing is what a call on a closed ClientConn gets from grpc-go
// (grpc.ErrClientConnClosing), and what a call waiting to retry gets when
// its ClientConn is closed.
var errConnClosing = status.Error(codes.Canceled, "grpc: the client connection is closing")

// Fail returns the error the call ends with after its attempt c.Attempts
// failed with err, retrying having stopped for why, and records why: err
// itself when nothing was retried (the only attempt failed with a code not
// retried here, or left to the Google Cloud client, or the caller's context
// ended during it: ReasonNone), a *grpcbackoff.Error of the call's attempts
// otherwise, also when the Retrier retried the call in its client's earlier
// attempts of it (Plan.Prior): that Error is how the client's Retryer
// tells the memory of the call it will not send it again
// (cloudclients.Decline). It is the one place a call's final error is made.
func (c *Call) Fail(err error, why grpcbackoff.Reason) error {
	c.reason = why
	if c.Plan.Prior+c.Attempts <= 1 && (why == grpcbackoff.ReasonNone || why == grpcbackoff.ReasonNotRetryable || why == grpcbackoff.ReasonClientRetries) {
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
	done := ctx.Err()
	if done == nil {
		return c.Closing()
	}
	why := decide.Ended(false, done)
	if why == grpcbackoff.ReasonCanceled {
		return c.Fail(status.FromContextError(done).Err(), why)
	}
	return c.Fail(lastErr, why)
}

// Committed returns the error a call that made more than one attempt ends
// with when its attempt failed with err after the call committed: err,
// with the call's attempts and why retrying stopped, its ClientConn's
// closing or its context's end if either came (see Interrupted), else
// ReasonNotRetryable.
func (c *Call) Committed(ctx context.Context, err error) error {
	why := grpcbackoff.ReasonNotRetryable
	switch {
	case c.Conn.Closed():
		why = grpcbackoff.ReasonCanceled
	case ctx.Err() != nil:
		why = decide.Ended(false, ctx.Err())
	}
	return c.Fail(err, why)
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
