// Package hedge is a hedged unary call (interceptor.WithHedging): its
// attempts, sent every delay while none has answered, each with outputs of
// its own; the first that answers wins and the caller gets its reply,
// header, trailer and peer. It keeps the race alone: its failures are
// decided on, reserved, paid for and ended by the retry loop
// (internal/loop), as any other call's, and its hedges paid there. In the
// engine's layers it sits above internal/loop and below the unary path
// (internal/unary), which hands it the calls of a hedged method.
package hedge

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/attempt"
	"github.com/platformkit/grpcbackoff/internal/gate"
	"github.com/platformkit/grpcbackoff/internal/loop"
	"github.com/platformkit/grpcbackoff/internal/settings"
)

// hedgeAttempt is one attempt of a hedged call, with its own outputs.
type hedgeAttempt struct {
	n     int // from 1
	hedge bool
	outputs
	cancel   context.CancelFunc
	timer    *attempt.Timer // its AttemptTimeout; nil: none
	err      error
	cut      bool             // its own AttemptTimeout ended it
	panicV   any              // what the invoker panicked with, if panicked
	panicked bool             // the invoker panicked: the call raises panicV on the caller's goroutine
	dropped  bool             // the call canceled it: another attempt ended the call
	answered bool             // it returned with an answer (take): neither the call nor the caller's context canceled it first
	headers  atomic.Bool      // its response headers arrived
	res      gate.Reservation // the retry or hedge it is, as its gates were asked; zero for the call's first attempt
	h        *Race
}

// HeadersArrived is called, once or more, when a's response headers arrive:
// a is never cut from then on, and the call commits to it.
func (a *hedgeAttempt) HeadersArrived() {
	if a.timer != nil {
		a.timer.HeadersArrived()
	}
	if a.headers.CompareAndSwap(false, true) {
		select {
		case a.h.headersIn <- a:
		default: // an earlier arrival is queued: it commits the call first
		}
	}
}

// unpaidRetry is a retry reserved without paying for it yet (loop.Call's
// Reserve, Pay), after the attempt that failed as f, due after delay.
type unpaidRetry struct {
	f     attempt.Failure
	delay time.Duration
}

// timerKind says what the next firing of a hedged call's timer sends.
type timerKind int8

const (
	noTimer   timerKind = iota
	hedgeNext           // a hedge: no attempt has answered for a while
	retryNext           // a retry: the backoff after a failure has passed
)

// Race is one hedged call: its attempts' race, its own part; the rest of
// the call (its decisions, payments and end) is its loop.Call's. Its state
// is the caller's goroutine's alone; the attempts run on goroutines of
// their own and hand back their results (and the arrival of their headers)
// on channels.
//
// Hedges answer slowness: while no attempt has answered, one is sent every
// delay, up to the plan's hedges per round. Failures answer to the retry
// rules: a failed attempt is decided on as a retry would be (loop's Decide:
// its code, the budget's reserve, the deadline, the Policy's MaxAttempts),
// and the next round starts after its backoff, no hedge going out
// meanwhile. A code neither retryable nor in NonFatalCodes ends the call.
type Race struct {
	c        loop.Call
	hp       *settings.Hedging
	ctx      context.Context // the caller's, bounded by the plan's timeout
	actx     context.Context // the attempts' parent, canceled when the call ends
	cancel   context.CancelFunc
	u        loop.Unary
	rt       replyType
	caller   callerOutputs
	delay    time.Duration // between hedges
	deadline time.Time     // the caller's; zero for none

	results   chan *hedgeAttempt // unbuffered: every attempt sent is received
	headersIn chan *hedgeAttempt // the first attempt whose headers arrived since await last looked
	flight    []*hedgeAttempt    // attempts in flight
	round     int                // attempts sent in the current round
	sent      time.Time          // when the last attempt was sent
	timer     *time.Timer
	timerC    <-chan time.Time // timer.C while armed
	next      timerKind
	unpaid    *unpaidRetry  // the retry due next, decided on while attempts were in flight
	committed *hedgeAttempt // the attempt whose headers arrived first
	last      *hedgeAttempt // the last attempt that failed
	stopped   bool          // no further attempt will be sent
	why       grpcbackoff.Reason
	final     error         // the call's error once decided, if not last's
	idleSince time.Time     // since when no attempt is in flight
	panicked  *hedgeAttempt // the first attempt whose invoker panicked
	settling  bool          // the call ended: the attempts in flight are canceled and waited for (settle)
}

// New returns the hedged call of u with plan p, in engine e, opened as o,
// or nil when u's reply cannot be copied between attempts (then it is not
// hedged). ctx is the caller's context, bounded by the plan's timeout.
func New(e *loop.Engine, ctx context.Context, p *loop.Plan, o loop.Opened, u *loop.Unary) *Race {
	rt, ok := replyTypeOf(u.Reply)
	if !ok {
		return nil
	}
	h := &Race{c: e.NewCall(p, u.CC, o, u.Opts), hp: p.Hedge, ctx: ctx, u: *u, rt: rt, caller: callerOutputsOf(u.Opts),
		results: make(chan *hedgeAttempt), headersIn: make(chan *hedgeAttempt, 1)}
	h.c.Req = u.Req
	h.deadline, _ = ctx.Deadline()
	return h
}

// Run sends the attempts, waits for the one that ends the call, cancels the
// others and waits for them, and hands the winner's outputs to the caller.
// A panic on the caller's goroutine while attempts are in flight (an
// observer's, the budget's) goes on up only once every attempt returned:
// the call leaves no goroutine behind.
func (h *Race) Run() error {
	h.actx, h.cancel = context.WithCancel(h.ctx)
	defer h.cancel()
	settled := false
	defer func() {
		if !settled {
			h.settle() // await panicked: its attempts end before the panic goes on
		}
	}()
	h.c.Start = time.Now()
	h.delay = h.hp.DelayFor(h.c.Plan.Method, h.c.Start)
	h.send(false, gate.Reservation{})
	end := h.await()
	h.settle()
	settled = true
	h.c.Cancel() // a retry reserved and not sent is given back
	if h.panicked != nil {
		panic(h.panicked.panicV) // on the caller's goroutine, every attempt ended
	}
	now := time.Now()
	if end != nil && end.err == nil {
		if h.hp.Adaptive() {
			h.hp.Record(h.c.Plan.Method, now, now.Sub(h.c.Start))
		}
		h.caller.deliver(h.u.Reply, &end.outputs, true)
		return h.c.End(h.ctx, nil)
	}
	if end != nil {
		h.caller.deliver(h.u.Reply, &end.outputs, false)
	}
	err := h.final
	if err == nil {
		err = h.c.Fail(end.err, h.why)
	}
	return h.c.End(h.ctx, err)
}

// settle cancels the attempts in flight and waits for each to return, then
// stops the timer: nothing of the call runs on afterwards.
func (h *Race) settle() {
	h.cancel()
	h.settling = true
	for len(h.flight) > 0 {
		a := <-h.results
		h.take(a)
		if a.panicked && h.panicked == nil {
			h.panicked = a
		}
	}
	if h.timer != nil {
		h.timer.Stop()
	}
}

// await waits for the attempt that ends the call and returns it (nil if the
// call ended without one), with h.final set if the call's error is made
// already.
func (h *Race) await() (end *hedgeAttempt) {
	for {
		if len(h.flight) == 0 && h.timerC == nil {
			if h.why == 0 {
				h.why = grpcbackoff.ReasonExhausted
			}
			return h.last
		}
		var ctxDone, closed <-chan struct{}
		if len(h.flight) == 0 { // waiting for a backoff or a pushback
			ctxDone, closed = h.ctx.Done(), h.c.Conn.Done()
		}
		select {
		case <-h.timerC:
			h.timerC = nil
			h.fire()
		case a := <-h.results:
			h.take(a)
			if a.panicked {
				h.stop(grpcbackoff.ReasonNotRetryable)
				h.panicked = a
				return a
			}
			if end, done := h.result(a); done {
				return end
			}
			if len(h.flight) == 0 && !h.c.WhenDue() {
				h.payUnpaid() // nothing can answer before the retry now
			}
		case a := <-h.headersIn:
			if !slices.Contains(h.flight, a) {
				a = h.answered() // a returned meanwhile; a later arrival may not have been queued
			}
			if a != nil {
				h.commit(a)
			}
		case <-ctxDone:
			return h.interrupted()
		case <-closed:
			return h.interrupted()
		}
	}
}

// interrupted ends the call, which its context or its ClientConn's closing
// ended while it waited for a retry's backoff or a pushback.
func (h *Race) interrupted() *hedgeAttempt {
	h.c.Delay += time.Since(h.idleSince)
	h.final = h.c.Interrupted(h.ctx, h.last.err)
	h.why = h.c.Reason()
	return h.last
}

// send sends the next attempt: a hedge, paid as res, or the first of a
// round (the call's first attempt, or a retry, reserved with the call).
func (h *Race) send(hedge bool, res gate.Reservation) {
	c := &h.c
	if h.last != nil {
		h.last.outputs = outputs{} // nothing of a failed attempt outlives the next one's start but its error
	}
	a := &hedgeAttempt{n: c.Attempts + 1, hedge: hedge, h: h}
	a.reply = h.u.Reply
	if a.n > 1 {
		a.reply = h.rt.new()
	}
	actx := c.NextAttempt(h.actx) // c.Attempts attempts came before
	if !hedge {
		if r := c.Reservation(); r != nil {
			res = *r
		}
	}
	a.res = res
	opts := a.attemptOptions(h.u.Opts)
	if c.Plan.Policy != nil && c.Plan.Policy.AttemptTimeout > 0 {
		actx, a.timer = attempt.StartTimer(actx, c.Plan.Policy.AttemptTimeout)
		a.cancel = a.timer.Stop
	} else {
		actx, a.cancel = context.WithCancel(actx)
	}
	actx = attempt.WithListener(actx, a)
	if len(h.flight) == 0 && !h.idleSince.IsZero() {
		c.Delay += time.Since(h.idleSince)
	}
	if hedge {
		c.Hedges++
	} else {
		h.round = 0
	}
	h.round++
	c.Unanswered++ // until it answers (take)
	h.flight = append(h.flight, a)
	h.sent = time.Now()
	go func() {
		h.invoke(a, actx, opts)
		if a.cut = a.timer != nil && a.timer.Cut(h.ctx, a.err); a.cut {
			a.err = attempt.CutError(c.Plan.Policy.AttemptTimeout)
		}
		a.cancel()
		h.results <- a
	}()
	h.arm(h.delay, hedgeNext)
}

// invoke makes attempt a on its own goroutine. A panic in the invoker (an
// interceptor chained after this one, the transport) is caught, and raised
// again, with the same value, on the caller's goroutine once the call's
// other attempts ended (see run), as it would reach the caller without
// hedging.
func (h *Race) invoke(a *hedgeAttempt, actx context.Context, opts []grpc.CallOption) {
	returned := false
	defer func() {
		if !returned {
			a.panicV, a.panicked = recover(), true
			a.err = status.Error(codes.Internal, "interceptor: the attempt panicked")
		}
	}()
	a.err = h.u.Invoker(actx, h.u.Method, h.u.Req, a.reply, h.u.CC, opts...)
	returned = true
}

// payUnpaid pays for the retry due next if it was decided on unpaid, and
// reports whether it may be sent. If it is refused, no attempt follows: the
// call ends with the last attempt's error once none is in flight.
func (h *Race) payUnpaid() bool {
	u := h.unpaid
	if u == nil {
		return true
	}
	h.unpaid = nil
	if h.c.Pay(h.ctx, u.f, u.delay) != nil {
		h.stop(h.c.Reason())
		if len(h.flight) == 0 {
			h.final = h.c.Fail(h.last.err, h.c.Reason()) // the last failure's, which may be a later one's than u's
		}
		return false
	}
	return true
}

// take removes a, which returned, from the attempts in flight, and records
// how it ended (loop.Record) unless the call itself canceled it.
func (h *Race) take(a *hedgeAttempt) {
	h.flight = slices.DeleteFunc(h.flight, func(b *hedgeAttempt) bool { return b == a })
	if len(h.flight) == 0 {
		h.idleSince = time.Now()
	}
	a.answered = !a.dropped && h.actx.Err() == nil || a.err == nil
	if a.answered {
		h.c.Unanswered-- // else canceled without an answer: the call's error and Reason are not made of it
	}
	if !a.panicked && a.answered {
		var res *gate.Reservation
		if a.n > 1 {
			res = &a.res
		}
		// The first success taken before the call settles is its answer.
		loop.Record(h.ctx, h.c.Conn, a.err, gate.Outcome{Won: a.err == nil && !h.settling, Reservation: res})
	}
}

// arm sets the timer to send the next attempt of kind k after d, if one
// could start before the deadline. A retry replaces a hedge that was due.
func (h *Race) arm(d time.Duration, k timerKind) {
	if h.stopped || h.committed != nil || h.next == retryNext && k == hedgeNext {
		return // a retry's backoff is not cut short by a hedge
	}
	if k == hedgeNext && (h.round >= h.c.Plan.Hedges || h.c.Attempts >= h.c.Plan.Max) {
		h.timerC, h.next = nil, noTimer
		return
	}
	if !h.deadline.IsZero() && !time.Now().Add(d).Before(h.deadline) {
		h.timerC, h.next = nil, noTimer
		if len(h.flight) == 0 {
			h.stop(grpcbackoff.ReasonDeadline)
		}
		return
	}
	if h.timer == nil {
		h.timer = time.NewTimer(d)
	} else {
		h.timer.Reset(d)
	}
	h.timerC, h.next = h.timer.C, k
}

func (h *Race) stop(why grpcbackoff.Reason) {
	h.stopped, h.timerC, h.next = true, nil, noTimer
	if h.why == 0 {
		h.why = why
	}
}

// fire sends what the timer was armed for.
func (h *Race) fire() {
	k := h.next
	h.next = noTimer
	switch k {
	case retryNext:
		if h.payUnpaid() {
			h.send(false, gate.Reservation{})
		}
	case hedgeNext:
		if res, ok := h.pay(); ok {
			h.send(true, res)
		}
	}
}

// pay asks adaptive throttling and the budget for a hedge, which is paid
// from the budget's long-run allowance, as the retry of a cut attempt is:
// the server may be working on every attempt in flight. A refused hedge is
// not sent, nor is any other of its round; the attempts in flight go on,
// and a failure of theirs is decided on as any other (the reserve may pay
// for its retry).
func (h *Race) pay() (gate.Reservation, bool) {
	var last attempt.Failure
	if h.last != nil {
		last.Err = h.last.err
	}
	res, ok := h.c.PayHedge(h.ctx, last, time.Since(h.sent))
	if !ok {
		h.round = h.c.Plan.Hedges
	}
	return res, ok
}

// answered returns an attempt in flight whose headers arrived, or nil.
func (h *Race) answered() *hedgeAttempt {
	for _, a := range h.flight {
		if a.headers.Load() {
			return a
		}
	}
	return nil
}

// commit commits the call to a, whose response headers arrived: no
// further attempt is sent, and the others are canceled.
func (h *Race) commit(a *hedgeAttempt) {
	if h.committed != nil || !slices.Contains(h.flight, a) {
		return
	}
	h.committed = a
	h.timerC, h.next = nil, noTimer
	for _, b := range h.flight {
		if b != a {
			b.dropped = true
			b.cancel()
		}
	}
}

// result takes in a, an attempt that returned, and returns the attempt that
// ends the call and true if the call ends.
func (h *Race) result(a *hedgeAttempt) (end *hedgeAttempt, done bool) {
	c := &h.c
	if a.err == nil {
		h.why = 0
		return a, true
	}
	if a.dropped {
		return nil, false // canceled for the committed attempt
	}
	if a == h.committed || a.Header != nil {
		h.why = grpcbackoff.ReasonNotRetryable // it committed the call
		return a, true
	}
	h.last = a
	if final := c.Over(h.ctx, a.err, a.answered); final != nil {
		// Its ClientConn shut down, or the caller's context ended (if before
		// any attempt was answered, a's error is the call's, without a
		// Reason, however many hedges were in flight).
		h.final, h.why = final, c.Reason()
		return a, true
	}
	code := status.Code(a.err)
	if c.LeftToClient(h.ctx, status.Convert(a.err), false) {
		h.why = grpcbackoff.ReasonClientRetries // the client retries it: the call ends
		return a, true
	}
	retryable := c.Plan.Policy != nil && (c.Plan.Policy.Retryable(code) || a.cut)
	nonFatal := h.hp.NonFatal(code)
	switch {
	case !retryable && !nonFatal:
		// A definitive answer: it ends the call, and the others are
		// canceled (as a fatal code does in gRFC A6).
		h.why = grpcbackoff.ReasonNotRetryable
		return a, true
	case !retryable: // non-fatal: the attempts in flight go on
		h.stop(grpcbackoff.ReasonNotRetryable)
		return nil, false
	case h.stopped || h.next == retryNext:
		return nil, false // a retry is due, or nothing more will be sent
	}
	trailer := a.Trailer
	if c.Engine().NoPushback {
		trailer = nil // RetryInfo only, as WithoutPushback says
	}
	f := attempt.Failure{Err: a.err, Trailer: trailer, Status: len(a.Trailer) > 0, Sent: a.Sent(), Cut: a.cut, Number: a.n}
	d, final := c.Decide(h.ctx, f)
	if final == nil {
		// An attempt in flight may answer before the retry is due (or a
		// gate pays when it is due, told of it now): the retry is paid
		// for, and told to observers, when it is.
		final = c.Reserve(h.ctx, f, d, len(h.flight) > 0)
		if final == nil && c.Unpaid() {
			h.unpaid = &unpaidRetry{f: f, delay: d}
		}
	}
	if final != nil {
		h.unpaid = nil
		h.stop(c.Reason())
		if len(h.flight) == 0 {
			h.final = final
			return a, true
		}
		return nil, false // the attempts in flight may still answer
	}
	h.arm(d, retryNext) // no hedge until the retry: failures answer to the Policy
	return nil, false
}
