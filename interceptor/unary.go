package interceptor

import (
	"context"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/attempt"
	"github.com/platformkit/grpcbackoff/internal/call"
	"github.com/platformkit/grpcbackoff/internal/hedge"
	"github.com/platformkit/grpcbackoff/internal/target"
)

// Unary returns a unary client interceptor that retries calls as p says. It
// panics, with Validate's message, if p or an option is invalid: a Policy
// written in code should fail at start-up, like regexp.MustCompile. Use New
// for configuration read at run time.
//
// Every attempt gets the caller's call options, so those with effects per
// attempt (grpc.Header, grpc.Trailer) act on each attempt, the last one's
// winning; grpc.OnFinish runs once per call, with its final status.
//
// A call commits, and is not retried, once the server sent response headers
// (gRFC A6): the server may have acted on it. The interceptor learns it from
// grpc-go, never from a status message: every attempt that may be retried
// carries grpc.Header, whose metadata grpc-go sets only for real headers
// (not a trailers-only response), grpc.Peer, which grpc-go writes only for
// an attempt that made a transport stream, grpc.OnFinish, which grpc-go runs
// for every call it was given, and grpc.Trailer, for pushback. An attempt
// grpc-go had and made no stream for was never sent: a write is sent again
// (see Safety). Call options, not a stats handler: they cost less, and work
// however the interceptor is installed. So a failure after headers ends the
// call, whatever its words, a reset or GOAWAY included; one before them is
// retried. An interceptor chained after this one that answers itself, or
// drops the call options, hides these facts: its failures count as sent and
// uncommitted. WithoutPushback leaves out grpc.Trailer alone.
//
// With Policy.AttemptTimeout, an attempt whose response headers have not
// arrived AttemptTimeout after it started is cut (canceled: the timeout is
// not sent to the server as a deadline) and retried whatever Policy.Codes
// says, as DEADLINE_EXCEEDED; once its headers arrived, it is never cut and
// runs to the call's own bounds. DialOptions sees headers as they arrive;
// Unary alone sees them only once the attempt ended, so a cut attempt
// whose headers had arrived is not resent, and ends the call.
//
// Each call to Unary has its own throttle; use DialOptions, or the methods of
// one Retrier, to share one between the unary and stream interceptors.
func Unary(p grpcbackoff.Policy, opts ...Option) grpc.UnaryClientInterceptor {
	return mustNew(p, opts).Unary()
}

// Unary returns r's unary client interceptor.
func (r *Retrier) Unary() grpc.UnaryClientInterceptor { return r.unary }

// unaryState holds what an attempt needs besides the caller's arguments:
// the call options with the Retrier's mark and, for an attempt that may be
// retried, those by which grpc-go tells what became of it (unaryFacts). It
// is pooled so that a call that succeeds allocates nothing.
//
// It also names the stripe of the budgets' counters of successes that the
// attempts it serves count on (budget.Budget.SucceededOn): the pool keeps
// its states per processor, so the successes of calls on every core do not
// all write one counter's cache line. For the same reason a state, which
// every call writes (its options, the facts grpc-go writes back), and its
// option array are whole 64-byte cache lines: two processors' states never
// share one (bench/README.md).
type unaryState struct {
	facts                                         attempt.Facts
	readHeader, readPeer, readTrailer, readFinish grpc.CallOption // of facts, made once
	opts                                          []grpc.CallOption
	stripe                                        int
	_                                             [24]byte // to 192 bytes (TestUnaryStateLines)
}

// stripes numbers the unaryStates, to give each a stripe.
var stripes atomic.Int64

var unaryStates = sync.Pool{New: func() any {
	s := &unaryState{stripe: int(stripes.Add(1))}
	s.readHeader, s.readPeer, s.readFinish, s.readTrailer = s.facts.Options()
	return s
}}

// getUnaryState returns a state whose options are opts, then the layer mark
// (call.Mark), then, with facts, grpc.Header, grpc.Peer and grpc.OnFinish
// of its facts, and grpc.Trailer too with trailer (pushback).
func getUnaryState(opts []grpc.CallOption, facts, trailer bool) *unaryState {
	s := unaryStates.Get().(*unaryState)
	n := len(opts)
	if cap(s.opts) < n+5 {
		s.opts = make([]grpc.CallOption, 0, (n+5+3)&^3) // 4 options a cache line
	}
	s.opts = s.opts[:n+1]
	if n > 0 {
		copy(s.opts, opts)
	}
	s.opts[n] = call.Mark
	if facts {
		s.facts.Reset()
		s.opts = append(s.opts, s.readHeader, s.readPeer, s.readFinish)
		if trailer {
			s.opts = append(s.opts, s.readTrailer)
		}
	}
	return s
}

// release puts s back in the pool. Its option slice keeps the last call's
// options until it is reused, as the pool drops it at the next collections.
func (s *unaryState) release() {
	s.opts = s.opts[:0]
	s.facts.Reset()
	unaryStates.Put(s)
}

// unary is the one way through a unary call: its plan, its opening (shared
// with streams), then one of a single attempt, a hedged call, or attempts
// retried as the plan's Policy says.
func (r *Retrier) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var p call.Plan
	r.e.Plan(&p, method, opts)
	switch {
	case p.Through:
		return invoker(ctx, method, req, reply, cc, opts...)
	case p.OnFinish && (p.Policy != nil || p.Hedge != nil):
		return r.unaryFinishing(ctx, method, req, reply, cc, invoker, opts)
	}
	conn, err := r.e.Open(ctx, &p, cc, req, opts)
	if err != nil {
		return err
	}
	origin := ctx
	if p.Timeout > 0 {
		if tctx, cancel := p.WithTimeout(ctx); cancel != nil {
			defer cancel()
			ctx = tctx
		}
	}
	// Field by field: a composite literal would be built aside and copied.
	var u call.Unary
	u.Method, u.Req, u.Reply, u.CC, u.Invoker, u.Opts, u.Origin = method, req, reply, cc, invoker, opts, origin
	if p.Hedge != nil {
		if h := hedge.New(&r.e, ctx, &p, conn, &u); h != nil {
			return h.Run()
		}
	}
	if p.Policy == nil { // not retried (or a reply hedging cannot copy): one attempt
		return r.invokeOnce(ctx, conn, &u)
	}
	var f attempt.Failure
	if err := r.attemptUnary(ctx, ctx, &p, conn, &u, &f); err != nil {
		return r.retryUnary(ctx, &p, conn, &u, &f)
	}
	if p.Taken {
		r.e.Remember(&p, &u, nil, 0) // a success: the client's call is over
	}
	if r.e.Observer != nil {
		r.e.EndFirst(ctx, &p, cc)
	}
	return nil
}

// invokeOnce makes the single attempt of a call that is not retried.
func (r *Retrier) invokeOnce(ctx context.Context, conn *target.Conn, u *call.Unary) error {
	s := getUnaryState(u.Opts, false, false)
	err := u.Invoker(ctx, u.Method, u.Req, u.Reply, u.CC, s.opts...)
	s.release()
	conn.Record(ctx, err)
	return err
}

// retryUnary goes on with a unary call whose first attempt failed as f: it
// decides, pays for, waits for and makes its retries, and ends the call.
// The trailer of an attempt is not held through the wait that follows it.
func (r *Retrier) retryUnary(ctx context.Context, p *call.Plan, conn *target.Conn, u *call.Unary, f *attempt.Failure) error {
	c := r.e.NewCall(p, u.CC, conn, u.Opts)
	c.Req = u.Req
	c.Attempts = 1
	err := r.retries(ctx, &c, u, f)
	c.End(ctx, err)
	if c.Plan.Client.Google {
		r.e.Remember(&c.Plan, u, err, c.Attempts)
	}
	return err
}

func (r *Retrier) retries(ctx context.Context, c *call.Call, u *call.Unary, f *attempt.Failure) error {
	for {
		d, final := c.Decide(ctx, *f)
		if final != nil {
			return final
		}
		if why := c.Book(ctx, *f, d); why != 0 {
			return c.Fail(f.Err, why)
		}
		if c.Conn.Deferred() == nil {
			f.Trailer = nil // read: not held through the wait (payDue tells observers its hint)
		}
		if final := c.Wait(ctx, d, f.Err); final != nil {
			return final
		}
		if why := c.PayDue(ctx, *f, d); why != 0 {
			return c.Fail(f.Err, why)
		}
		*f = attempt.Failure{}
		err := r.attemptUnary(ctx, c.RetryContext(ctx), &c.Plan, c.Conn, u, f)
		c.Attempts++
		if err == nil {
			return nil
		}
	}
}

// attemptUnary makes one attempt of the unary call u with plan p, with
// context actx (ctx itself, or ctx with the retry metadata), under the
// Policy's AttemptTimeout if it has one, and returns its error; if it
// failed, f tells how. An attempt cut after its headers arrived (seen by
// the stats handler as they came, or by grpc.Header once it ended) is
// committed: it is not resent.
func (r *Retrier) attemptUnary(ctx, actx context.Context, p *call.Plan, conn *target.Conn, u *call.Unary, f *attempt.Failure) error {
	t := p.Policy.AttemptTimeout
	if t <= 0 {
		return r.invokeUnary(ctx, actx, conn, u, f)
	}
	actx, at := attempt.StartTimer(actx, t)
	defer at.Stop()
	err := r.invokeUnary(ctx, attempt.WithListener(actx, at), conn, u, f)
	if at.Cut(ctx, err) {
		f.Err, f.Cut, f.Committed = attempt.CutError(t), true, f.Committed || at.Answered()
		return f.Err
	}
	return err
}

// invokeUnary sends one attempt of u on actx and returns its error; if it
// failed, f tells how, from what grpc-go wrote into the attempt's call
// options (internal/attempt).
func (r *Retrier) invokeUnary(ctx, actx context.Context, conn *target.Conn, u *call.Unary, f *attempt.Failure) error {
	s := getUnaryState(u.Opts, true, !r.e.NoPushback)
	err := u.Invoker(actx, u.Method, u.Req, u.Reply, u.CC, s.opts...)
	conn.Record(ctx, err)
	if err != nil {
		f.Err = err
		s.facts.Read(f, !r.e.NoPushback)
	} else {
		conn.SucceededOn(s.stripe) // a success feeds the budget's reserve
	}
	s.release()
	return err
}

// unaryFinishing carries out a unary call whose options carry grpc.OnFinish
// and which may make more than one attempt: its attempts go without the
// OnFinish options, which run once with the call's final error.
func (r *Retrier) unaryFinishing(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
	fs, rest := call.SplitOnFinish(opts)
	err := r.unary(ctx, method, req, reply, cc, invoker, rest...)
	call.Finish(fs, err)
	return err
}
