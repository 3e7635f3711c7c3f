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
	"github.com/platformkit/grpcbackoff/internal/attempt"
	"github.com/platformkit/grpcbackoff/internal/cloudclients"
	"github.com/platformkit/grpcbackoff/internal/decide"
	"github.com/platformkit/grpcbackoff/internal/target"
)

// call follows one call across its attempts. A unary call makes one only
// once its first attempt failed; streams and hedged calls make one at once.
// Its decisions follow the concurrency contract of the stream and the
// hedged call that hold it: one goroutine at a time decides and acts.
type call struct {
	r        *Retrier
	plan     plan
	cc       *grpc.ClientConn
	conn     *target.Conn      // the ClientConn's state: its target's budget, its closing
	opts     []grpc.CallOption // the caller's call options
	req      any               // a unary call's request; nil for a stream
	adaptive *adaptive.State   // the target's adaptive throttling; nil: none or Critical

	attempts int                // attempts sent so far
	hedges   int                // hedges sent so far
	start    time.Time          // end of the first attempt, or start of a hedged call
	delay    time.Duration      // time spent waiting between attempts
	reason   grpcbackoff.Reason // why retrying stopped, once it did (end.go)
}

func (r *Retrier) newCall(p *plan, cc *grpc.ClientConn, conn *target.Conn, opts []grpc.CallOption) call {
	return call{r: r, plan: *p, cc: cc, conn: conn, opts: opts, adaptive: r.adaptiveFor(conn, p)}
}

// open starts the call p plans, on cc, as unary calls and streams alike
// start: the ClientConn's state (and the Google API its calls serve), a bad
// call option's error, adaptive throttling's admission, and, for a unary
// call of a Google Cloud client (req, opts), the retries the Retrier made
// in the client's earlier attempts of it (cloudclients.Memory); the budget counts
// the call. It returns the error that ends the call before any attempt, if
// one does: never the memory's.
func (r *Retrier) open(ctx context.Context, p *plan, cc *grpc.ClientConn, req any, opts []grpc.CallOption) (*target.Conn, error) {
	conn := r.targets.Conn(cc)
	if p.err != nil {
		return nil, status.Error(codes.InvalidArgument, p.err.Error())
	}
	if conn.Adaptive() != nil {
		if err := r.admit(ctx, conn, p, cc); err != nil {
			return nil, err
		}
	}
	if conn.API.Load() == nil {
		if a := cloudclients.APIOf(ctx, p.method); a != nil {
			conn.API.CompareAndSwap(nil, a) // once per ClientConn
		}
	}
	if req != nil && r.logical.Len() > 0 {
		r.recall(ctx, p, conn, cc, req, opts)
	}
	conn.Started()
	return conn, nil
}

// number returns the number of the attempt that failed as f.
func (c *call) number(f attempt.Failure) int {
	if f.Number > 0 {
		return f.Number
	}
	return c.attempts
}

// decide is the retry decision after the attempt that failed as f
// (decide.Decide): the delay before the next attempt, or the error the
// call ends with. It pays for nothing: pay does, when the retry is due.
func (c *call) decide(ctx context.Context, f attempt.Failure) (time.Duration, error) {
	now := time.Now()
	if c.start.IsZero() {
		c.start = now
	}
	if c.conn.Closed() {
		// Whatever the attempt's code, the call ended because its
		// ClientConn is closing, not because a retry could not help.
		return 0, c.fail(errConnClosing, grpcbackoff.ReasonCanceled)
	}
	st := status.Convert(f.Err)
	dl, _ := ctx.Deadline()
	a := decide.Attempt{Number: c.plan.prior + c.attempts, Hedges: c.hedges, MaxAttempts: c.plan.max, Code: st.Code(), TimedOut: f.Cut,
		Client: c.leftToClient(ctx, st, f.Opening),
		Final:  f.Committed || attempt.Futile(st) || !c.r.safeToRetry(&c.plan, f),
		Hint:   grpcbackoff.ServerHint(st, f.Trailer), Now: now, Deadline: dl, Done: ctx.Err()}
	d := decide.Decide(&c.plan.policy.Policy, a, nil, nil)
	if !d.Retry {
		return 0, c.fail(f.Err, d.Reason)
	}
	return d.Delay, nil
}

// pay asks adaptive throttling and the budget (decide.Pay) for the attempt
// due now: the retry, after delay d, of the attempt that failed as f, or,
// with hedge, a hedge (paid, as the retry of a cut attempt is, from the
// long-run allowance alone: the server may be working on every attempt in
// flight; f is then the last failure, if any). It tells the observers of
// the attempt, or of the budget's refusal, and returns why it was refused,
// 0 if it may go. It is the one place retries and hedges are paid.
func (c *call) pay(ctx context.Context, f attempt.Failure, d time.Duration, hedge bool) grpcbackoff.Reason {
	a := decide.Attempt{TimedOut: f.Cut || hedge, Now: time.Now()}
	if c.adaptive != nil {
		a.U = rand.Float64()
	}
	why := decide.Pay(c.conn.Budget(), c.adaptive, a)
	c.tell(ctx, f, d, hedge, why)
	return why
}

// tell tells the observers of the retry (or, with hedge, the hedge) after
// delay d of the attempt that failed as f, paid (why 0) or refused by the
// budget (ReasonThrottled).
func (c *call) tell(ctx context.Context, f attempt.Failure, d time.Duration, hedge bool, why grpcbackoff.Reason) {
	if len(c.r.observers) == 0 || why != 0 && why != grpcbackoff.ReasonThrottled {
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
	c.observe(ctx, Retry{Attempt: c.number(f), Code: code, Err: f.Err, Hint: hint, Delay: d, Throttled: why != 0, Hedge: hedge})
}

// book is the budget's part, when a retry is decided, of the retry after
// delay d of the attempt that failed as f: a DeferredBudget is told of it,
// and pays for it when it is due (payDue); any other budget pays now (pay).
// It returns why the retry was refused, 0 if it may go.
func (c *call) book(ctx context.Context, f attempt.Failure, d time.Duration) grpcbackoff.Reason {
	b := c.conn.Deferred()
	if b == nil {
		return c.pay(ctx, f, d, false)
	}
	now := time.Now()
	if !b.Want(now, now.Add(d), f.Cut) {
		c.tell(ctx, f, 0, false, grpcbackoff.ReasonThrottled)
		return grpcbackoff.ReasonThrottled
	}
	return 0
}

// payDue pays, now that it is due, for a retry that book told a
// DeferredBudget of (pay); other budgets paid when it was decided. It
// returns why the retry was refused, 0 if it may go.
func (c *call) payDue(ctx context.Context, f attempt.Failure, d time.Duration) grpcbackoff.Reason {
	if c.conn.Deferred() == nil {
		return 0
	}
	return c.pay(ctx, f, d, false)
}

// leftToClient reports whether a failure with code is the Google Cloud
// client's to retry (internal/cloudclients); opening says it was a stream's first
// opening.
func (c *call) leftToClient(ctx context.Context, st *status.Status, opening bool) bool {
	c.plan.learnClient(ctx, c.conn, c.opts, c.req)
	return c.plan.client.Leaves(st, opening)
}

// observe tells every observer of the retry (or hedge) decision x, with the
// call's method and ClientConn filled in.
func (c *call) observe(ctx context.Context, x Retry) {
	x.Method, x.StaticMethod, x.Target, x.Conn = c.plan.method, c.plan.static, targetOf(c.cc), c.cc
	for _, o := range c.r.observers {
		o.OnRetry(ctx, x)
	}
}

// wait sleeps for d, or until ctx is done or the call's ClientConn is
// closed; then it returns the error the call ends with (see interrupted).
func (c *call) wait(ctx context.Context, d time.Duration, lastErr error) error {
	t := time.NewTimer(d)
	defer t.Stop()
	start := time.Now()
	select {
	case <-t.C:
		c.delay += d
		return nil
	case <-ctx.Done():
	case <-c.conn.Done():
	}
	c.delay += time.Since(start)
	return c.interrupted(ctx, lastErr)
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

// learnClient learns, once, whether the call p plans, with ctx, opts and
// req (nil for a stream) on the ClientConn of conn, is a Google Cloud
// client's, and which codes its client retries (internal/cloudclients).
func (p *plan) learnClient(ctx context.Context, conn *target.Conn, opts []grpc.CallOption, req any) {
	if p.client.Learnt {
		return
	}
	var api *cloudclients.API
	if conn != nil {
		api = conn.API.Load()
	}
	p.client = cloudclients.Learn(ctx, p.method, opts, api, req)
}
