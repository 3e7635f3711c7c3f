package loop

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/attempt"
	"github.com/platformkit/grpcbackoff/internal/decide"
	"github.com/platformkit/grpcbackoff/internal/gate"
	"github.com/platformkit/grpcbackoff/internal/targets"
)

// Call follows one call across its attempts. A unary call makes one only
// once its first attempt failed; streams and hedged calls make one at once.
// Its decisions follow the concurrency contract of the stream and the
// hedged call that hold it: one goroutine at a time decides and acts.
type Call struct {
	e    *Engine
	Plan Plan
	CC   *grpc.ClientConn
	Conn *targets.Conn     // the ClientConn's state: its target's budget, its closing
	opts []grpc.CallOption // the caller's call options
	Req  any               // a unary call's request; nil for a stream
	// Prior is the retries made of the call in its calling layer's earlier
	// attempts of it (Hook.Open): they count toward MaxAttempts.
	Prior int
	hook  any // the Hook's state of the call

	Attempts int                // attempts sent so far
	Hedges   int                // hedges sent so far
	Start    time.Time          // end of the first attempt, or start of a hedged call
	Delay    time.Duration      // time spent waiting between attempts
	reason   grpcbackoff.Reason // why retrying stopped, once it did (Fail)
	run      int                // attempts before the current run of them (Progress)
	bound    time.Time          // the connection's timeout for the method, from the first failure (ConnRead): no retry starts after it
	res      gate.Reservation   // the last retry reserved (Reserve): Attempt 0 before the first
	held     bool               // res is reserved and not sent yet (NextAttempt) nor given back (Cancel)
	unpaid   bool               // res is reserved, not paid yet (Pay)

	// Unanswered is how many of the attempts sent have no answer: a hedged
	// call's attempts in flight, and those it canceled before any answer
	// (hedges that lost the race, every attempt the caller's context
	// ended). It stays 0 where attempts go one at a time. Fail and the
	// Reason of a context's end (ended) do not count them.
	Unanswered int
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
// call ends with. At the call's first failure it reads the policy of the
// connection's service config if its plan says so (ConnRead). It pays for
// nothing: Reserve and Pay do.
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
	if c.Plan.Conn == ConnRead {
		c.Plan.Conn = ConnNone
		// A retryPolicy the Retrier cannot carry out leaves the plan's
		// Policy: Explain on the ClientConn says why.
		if t, _ := c.e.adopt(&c.Plan, c.Conn); t > 0 {
			c.bound = now.Add(t)
		}
	}
	st := status.Convert(f.Err)
	dl, _ := ctx.Deadline()
	if !c.bound.IsZero() && (dl.IsZero() || c.bound.Before(dl)) {
		dl = c.bound
	}
	// Unanswered: decide's step 1 is ended's rule, of the answered attempt f.
	a := decide.Attempt{Number: c.Prior + c.Attempts, Unanswered: c.Unanswered, Run: c.run, Hedges: c.Hedges, MaxAttempts: c.Plan.Max, Code: st.Code(), TimedOut: f.Cut,
		Client: c.LeftToClient(ctx, st, f.Opening), GRPC: c.leftToGRPC(f, st.Code()),
		Final: f.Committed || attempt.Futile(st) || !c.e.safeToRetry(&c.Plan, f, c.Req),
		Hint:  grpcbackoff.ServerHint(st, f.Trailer), Now: now, Deadline: dl, Done: ctx.Err()}
	d := decide.Decide(&c.Plan.Policy.Policy, a, nil, nil)
	if !d.Retry {
		return 0, c.Fail(f.Err, d.Reason)
	}
	return d.Delay, nil
}

// leftToGRPC reports whether the failure f, with code, was grpc-go's own
// retry's, where it is on (ConnGRPC): on an xDS channel, grpc-go made more
// than one attempt of it (a route's policy retried it); elsewhere, code is
// one the retryPolicy of the connection's service config for the method
// retries (grpc-go retried it, or its retryThrottling refused).
func (c *Call) leftToGRPC(f attempt.Failure, code codes.Code) bool {
	switch {
	case c.Plan.Conn != ConnGRPC:
		return false
	case c.Conn.XDS:
		return f.GRPCRetried
	}
	return c.Conn.Policies.GRPCRetries(c.Plan.Method, code)
}

// Over returns the error the call ends with, after an attempt that failed
// with err (answered says whether it was: see Unanswered), if it must end
// whatever its Policy says: its ClientConn shut down (Closing), or its
// context ended or its deadline passed (err, for the Reason ended gives);
// nil otherwise. Decide asks the same, in decide.Decide's order.
func (c *Call) Over(ctx context.Context, err error, answered bool) error {
	if c.Conn.Closed() {
		return c.Closing()
	}
	done := ctx.Err()
	if dl, ok := ctx.Deadline(); done != nil || ok && !time.Now().Before(dl) {
		return c.Fail(err, c.ended(done, answered))
	}
	return nil
}

// answered returns how many of the call's attempts were answered, its
// calling layer's earlier ones (Prior) included: those sent, less those
// with no answer (Unanswered). Where attempts go one at a time, every
// attempt that ended counts, the one that failed last included.
func (c *Call) answered() int { return c.Prior + c.Attempts - c.Unanswered }

// ended is the Reason the call stops for when its context ended (done, the
// context's error; nil: its deadline passed): decide.Ended, with the rule
// of a context's end for every driver and every path (Decide's through
// decide.Attempt.Unanswered): the call's error is its attempt's, unchanged
// (ReasonNone), when the context ended its first answered attempt, that
// is when no attempt was answered before it. Hedges that got no answer do
// not count, the calling layer's earlier attempts (Prior) do. answered
// says whether an attempt that ended with the context was answered itself
// (it is not one before it); false when none did (between attempts).
func (c *Call) ended(done error, answered bool) grpcbackoff.Reason {
	before := c.answered()
	if answered {
		before--
	}
	return decide.Ended(before == 0, done)
}

// Reserve reserves, with the gates of the call's target (gate.Set), the
// retry after delay d of the attempt that failed as f, and pays for it at
// once (Pay), unless a gate can pay only when the retry is due
// (gate.Reservation.WhenDue) or later says that an attempt in flight may
// yet end the call first (a hedged call's): Pay pays for it then. It
// returns the error the call ends with if a gate refuses the retry, nil
// otherwise. The reservation stays the call's until the next one: the
// attempt the retry sends is recorded with it (Record).
func (c *Call) Reserve(ctx context.Context, f attempt.Failure, d time.Duration, later bool) error {
	now := time.Now()
	c.res = gate.Reservation{Decided: now, Due: now.Add(d), Code: status.Code(f.Err), LongRun: f.Cut,
		Criticality: c.Plan.criticality(), Attempt: c.Attempts + 1}
	if why := c.Conn.Gates().Reserve(&c.res); why != 0 {
		c.tell(ctx, f, 0, false, why)
		return c.Fail(f.Err, why)
	}
	c.held, c.unpaid = true, true
	if later || c.res.WhenDue {
		return nil
	}
	return c.Pay(ctx, f, d)
}

// Pay pays, with the gates of the call's target, for the retry Reserve
// left unpaid, after delay d of the attempt that failed as f, now that it
// is due; it does nothing if Reserve paid. It tells the observers of the
// retry, or of its refusal by the budget, and returns the error the call
// ends with if a gate refuses it, nil otherwise.
func (c *Call) Pay(ctx context.Context, f attempt.Failure, d time.Duration) error {
	if !c.unpaid {
		return nil
	}
	c.unpaid = false
	why := c.Conn.Gates().Pay(&c.res, time.Now())
	if why != 0 {
		c.tell(ctx, f, d, false, why)
		c.held = false // given back by the gates that did not refuse it
		return c.Fail(f.Err, why)
	}
	// An observer that panics as it is told of the retry ends the call
	// there: the retry paid is given back, as when the call ends during
	// its wait.
	told := false
	defer func() {
		if !told {
			c.Cancel()
		}
	}()
	c.tell(ctx, f, d, false, 0)
	told = true
	if ctx.Err() != nil { // ended as it was paid (by an observer, say): not sent
		c.Cancel()
		return c.Interrupted(ctx, f.Err)
	}
	return nil
}

// PayHedge pays, with the gates of the call's target, for a hedge sent
// now, d after the attempt before it, after the failure last (the call's
// last, if any): a hedge is due as it is decided, and paid, as the retry of
// a cut attempt is, from a budget's long-run allowance alone, the server
// may be working on every attempt in flight. It tells the observers of the
// hedge, or of its refusal by the budget, and returns the hedge's
// reservation, with which its attempt is recorded, and whether it may be
// sent.
func (c *Call) PayHedge(ctx context.Context, last attempt.Failure, d time.Duration) (gate.Reservation, bool) {
	now := time.Now()
	r := gate.Reservation{Decided: now, Due: now, Code: status.Code(last.Err), LongRun: true, Hedge: true,
		Criticality: c.Plan.criticality(), Attempt: c.Attempts + 1}
	why := c.Conn.Gates().Pay(&r, now)
	c.tell(ctx, last, d, true, why)
	return r, why == 0
}

// Unpaid reports whether the retry Reserve reserved last is not paid yet.
func (c *Call) Unpaid() bool { return c.unpaid }

// WhenDue reports whether the retry Reserve reserved last is not paid yet
// and can only be paid when it is due (gate.Reservation.WhenDue).
func (c *Call) WhenDue() bool { return c.unpaid && c.res.WhenDue }

// Cancel gives the retry Reserve reserved back to the gates: it will not
// be sent (the call ended during its wait, or an attempt in flight ended
// it first).
func (c *Call) Cancel() {
	if c.held {
		c.held, c.unpaid = false, false
		c.Conn.Gates().Cancel(&c.res, time.Now())
	}
}

// Reservation returns the reservation of the retry that sent the call's
// current attempt (number Attempts), nil for its first: the attempt is
// recorded with it (Record).
func (c *Call) Reservation() *gate.Reservation {
	if c.res.Attempt == 0 || c.res.Attempt != c.Attempts {
		return nil
	}
	return &c.res
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

// Next is the retry protocol's one step after the attempt that failed as
// f, for a call whose attempts go one at a time (unary, stream): it decides
// (Decide), then carries the retry out (Proceed). It returns nil when the
// next attempt is to be sent now (its context: NextAttempt), the error the
// call ends with otherwise.
func (c *Call) Next(ctx context.Context, f *attempt.Failure) error {
	d, final := c.Decide(ctx, *f)
	if final != nil {
		return final
	}
	return c.Proceed(ctx, f, d)
}

// Proceed carries out the retry Decide decided on, with delay d, after the
// attempt that failed as f: it reserves it with the target's gates
// (Reserve), waits out its delay (Wait), and pays for it if it was not
// paid when reserved (Pay). A driver that must act between the decision
// and the reservation (a resumed stream asks its rule for the request to
// send: internal/stream) calls Decide and Proceed; the others Next. It
// returns nil when the next attempt is to be sent now, the error the call
// ends with otherwise. f's trailer is let go once read, unless the payment
// when due still tells its hint.
func (c *Call) Proceed(ctx context.Context, f *attempt.Failure, d time.Duration) error {
	if final := c.Reserve(ctx, *f, d, false); final != nil {
		return final
	}
	if !c.unpaid {
		f.Trailer = nil // read: not held through the wait
	}
	if final := c.Wait(ctx, d, f.Err); final != nil {
		c.Cancel()
		return final
	}
	return c.Pay(ctx, *f, d)
}

// Progress says that the call's current attempt made progress before it
// failed (a resumed stream's open delivered messages:
// interceptor.WithResume): the next decision counts MaxAttempts and the
// backoff from it, as from the first attempt of a new run of them
// (decide.Attempt.Run), while the call's attempts, its deadline, the gates
// and what the observers are told go on across the call.
func (c *Call) Progress() { c.run = c.Prior + c.Attempts - 1 }

// NextAttempt counts the call's next attempt and returns the context it is
// sent on: ctx (the caller's, as Plan.Outgoing made it), which tells the
// server how many attempts came before it (PreviousAttemptsKey) if any
// did, that count in place of any the caller's metadata carries.
func (c *Call) NextAttempt(ctx context.Context) context.Context {
	if c.Attempts > 0 {
		ctx = withPreviousAttempts(ctx, c.Attempts)
	}
	c.Attempts++
	c.held = false
	return ctx
}

// Record records how an attempt of a call with context ctx on conn ended,
// with err (nil: it succeeded) and o (its Conn is conn): every gate of its
// target is told. It is the one place an attempt's end is recorded, by
// every driver, for every attempt.
func Record(ctx context.Context, conn *targets.Conn, err error, o gate.Outcome) {
	o.Conn = conn
	conn.Gates().Ended(ctx, err, o)
}

// Served gives back what the retry that sent the call's current attempt
// paid, now that the attempt ended well: a stream's, whose first response
// was recorded without its reservation (Record) while it went on, and
// whose load lasted until now. A unary attempt's success is its end, and
// Record gives it back.
func (c *Call) Served() {
	if r := c.Reservation(); r != nil {
		c.Conn.Gates().GiveBack(r, time.Now())
	}
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

// One way out: every call, unary, hedged or stream, ends through Fail
// (its final error and Reason) and End (what the observers are told).

// errConnClosing is what a call on a closed ClientConn gets from grpc-go
// (grpc.ErrClientConnClosing), and what a call waiting to retry gets when
// its ClientConn is closed.
var errConnClosing = status.Error(codes.Canceled, "grpc: the client connection is closing")

// Fail returns the error the call ends with after its attempt failed with
// err, retrying having stopped for why, and records why: err itself when
// nothing was retried (the only attempt the server answered failed with a
// code not retried here, or left to the calling layer's own retry or to
// grpc-go's, or the caller's context ended its first answered attempt:
// ReasonNone; the attempts with no answer, Unanswered, do not count), a
// *grpcbackoff.Error of the call's attempts otherwise, also when the
// Retrier retried the call in its calling layer's earlier attempts of it
// (Prior): that Error is how a Google Cloud client's Retryer tells the
// Hook it will not send the call again. It is the one place a call's
// final error is made.
func (c *Call) Fail(err error, why grpcbackoff.Reason) error {
	c.reason = why
	if c.answered() <= 1 && (why == grpcbackoff.ReasonNone || why == grpcbackoff.ReasonNotRetryable || why == grpcbackoff.ReasonClientRetries || why == grpcbackoff.ReasonGRPCRetries) {
		return err
	}
	var elapsed time.Duration
	if !c.Start.IsZero() {
		elapsed = time.Since(c.Start)
	}
	return &grpcbackoff.Error{Err: err, Attempts: c.Prior + c.Attempts, Elapsed: elapsed, Reason: why}
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
	why := c.ended(done, false) // between attempts: after an answered one
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
		why = c.ended(ctx.Err(), true)
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

// EndFirst tells, of a unary call p plans on cc, opened as o with the
// request req, whose first attempt succeeded without a Call of its own, the
// Hook (if it keeps a state of the call; origin is the caller's context,
// before the plan's timeout) and the observers.
func (e *Engine) EndFirst(ctx, origin context.Context, p *Plan, cc *grpc.ClientConn, o Opened, req any) {
	if o.state != nil || e.Observer != nil {
		e.endFirst(ctx, origin, p, cc, o, req)
	}
}

func (e *Engine) endFirst(ctx, origin context.Context, p *Plan, cc *grpc.ClientConn, o Opened, req any) {
	if o.state != nil {
		e.Hook.End(origin, HookCall{Method: p.Method, Conn: o.Conn, Req: req, Prior: o.prior, State: o.state}, nil, 0)
	}
	if e.Observer != nil {
		e.Observer.OnEnd(ctx, End{Method: p.Method, StaticMethod: p.Static, Target: targetOf(cc), Conn: cc, Attempts: 1, Hedged: p.Hedge != nil})
	}
}
