// Package unary is the unary path of the interceptors' engine: a unary
// call's plan, its opening, then one attempt, a hedged call
// (internal/hedge), or attempts retried as its Policy says, each with the
// call options by which grpc-go tells what became of it, pooled so that a
// call that succeeds allocates nothing (state.go). Its retries are decided,
// paid for and ended by internal/loop. It is the top of the engine's
// layers, below interceptor's Unary.
package unary

import (
	"context"

	"google.golang.org/grpc"

	"github.com/platformkit/grpcbackoff/internal/attempt"
	"github.com/platformkit/grpcbackoff/internal/connpolicy"
	"github.com/platformkit/grpcbackoff/internal/gate"
	"github.com/platformkit/grpcbackoff/internal/hedge"
	"github.com/platformkit/grpcbackoff/internal/loop"
	"github.com/platformkit/grpcbackoff/internal/targets"
)

// Invoke is the unary interceptor of engine e: the one way through a unary
// call. Its plan first, on its ClientConn; a call an earlier Retrier on the
// connection took passes through; then its opening (shared with streams),
// then one of a hedged call, a single attempt, or attempts retried as the
// plan's Policy says, through the retry loop (internal/loop).
func Invoke(e *loop.Engine, ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var p loop.Plan
	conn := e.Plan(&p, cc, method, opts)
	switch {
	case p.Through:
		return invoker(ctx, method, req, reply, cc, opts...)
	case p.OnFinish && (p.Policy != nil || p.Hedge != nil):
		return finishing(e, ctx, method, req, reply, cc, invoker, opts)
	}
	o, err := e.Open(ctx, &p, conn, req)
	if err != nil {
		return err
	}
	ctx = p.Outgoing(ctx) // its criticality, on every attempt
	origin := ctx
	if p.Timeout > 0 {
		if tctx, cancel := p.WithTimeout(ctx); cancel != nil {
			defer cancel()
			ctx = tctx
		}
	}
	// Field by field: a composite literal would be built aside and copied.
	var u loop.Unary
	u.Method, u.Req, u.Reply, u.CC, u.Invoker, u.Opts, u.Origin = method, req, reply, cc, invoker, opts, origin
	if p.Hedge != nil {
		if h := hedge.New(e, ctx, &p, o, &u); h != nil {
			return h.Run()
		}
	}
	if p.Policy == nil { // not retried (or a reply hedging cannot copy): one attempt
		return invokeOnce(ctx, conn, &u)
	}
	var f attempt.Failure
	if err := attemptUnary(e, ctx, ctx, &p, conn, nil, &u, &f); err != nil {
		return retry(e, ctx, &p, o, &u, &f)
	}
	e.EndFirst(ctx, origin, &p, cc, o, req)
	return nil
}

// finishing carries out a unary call whose options carry grpc.OnFinish and
// which may make more than one attempt: the call without its OnFinish
// options, which run once, with the call's final error.
func finishing(e *loop.Engine, ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
	fs, rest := loop.SplitOnFinish(opts)
	err := Invoke(e, ctx, method, req, reply, cc, invoker, rest...)
	loop.Finish(fs, err)
	return err
}

// invokeOnce makes the single attempt of a call that is not retried.
func invokeOnce(ctx context.Context, conn *targets.Conn, u *loop.Unary) error {
	s := getUnaryState(u.Opts, false, false)
	err := u.Invoker(ctx, u.Method, u.Req, u.Reply, u.CC, s.opts...)
	s.release()
	loop.Record(ctx, conn, err, gate.Outcome{}) // its success is not the budget's: nothing retries the call
	return err
}

// retry goes on with a unary call whose first attempt failed as f: it
// decides, pays for, waits for and makes its retries (retries), and ends the
// call. The trailer of an attempt is not held through the wait that follows
// it.
func retry(e *loop.Engine, ctx context.Context, p *loop.Plan, o loop.Opened, u *loop.Unary, f *attempt.Failure) error {
	c := e.NewCall(p, u.CC, o, u.Opts)
	c.Req = u.Req
	c.Attempts = 1
	err := retries(ctx, &c, u, f)
	c.End(ctx, err)
	c.EndUnary(u.Origin, err)
	return err
}

// retries is the loop of a unary call's retries (loop.Call.Next), after
// the attempt that failed as f, until one succeeds or the loop ends the
// call.
func retries(ctx context.Context, c *loop.Call, u *loop.Unary, f *attempt.Failure) error {
	for {
		if final := c.Next(ctx, f); final != nil {
			return final
		}
		*f = attempt.Failure{}
		actx := c.NextAttempt(ctx)
		if err := attemptUnary(c.Engine(), ctx, actx, &c.Plan, c.Conn, c, u, f); err == nil {
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
func attemptUnary(e *loop.Engine, ctx, actx context.Context, p *loop.Plan, conn *targets.Conn, c *loop.Call, u *loop.Unary, f *attempt.Failure) error {
	t := p.Policy.AttemptTimeout
	if t <= 0 {
		return invokeUnary(e, ctx, actx, p, conn, c, u, f)
	}
	actx, at := attempt.StartTimer(actx, t)
	defer at.Stop()
	err := invokeUnary(e, ctx, attempt.WithListener(actx, at), p, conn, c, u, f)
	if at.Cut(ctx, err) {
		f.Err, f.Cut, f.Committed = attempt.CutError(t), true, f.Committed || at.Answered()
		return f.Err
	}
	return err
}

// invokeUnary sends one attempt of u with plan p on actx, the attempt c
// sends (nil: the call's first), and returns its error; if it failed, f
// tells how, from what grpc-go wrote into the attempt's call options
// (internal/attempt), and, where the plan counts them, from grpc-go's own
// attempts of it (connpolicy.Attempts).
func invokeUnary(e *loop.Engine, ctx, actx context.Context, p *loop.Plan, conn *targets.Conn, c *loop.Call, u *loop.Unary, f *attempt.Failure) error {
	s := getUnaryState(u.Opts, true, !e.NoPushback)
	var grpcs *connpolicy.Attempts
	if p.CountGRPC {
		grpcs = connpolicy.Get()
		s.opts = append(s.opts, grpcs.CallOption(u.Opts))
	}
	err := u.Invoker(actx, u.Method, u.Req, u.Reply, u.CC, s.opts...)
	var res *gate.Reservation
	if c != nil {
		res = c.Reservation()
	}
	loop.Record(ctx, conn, err, gate.Outcome{Won: true, Stripe: int32(s.stripe), Reservation: res})
	if err != nil {
		f.Err = err
		s.facts.Read(f, !e.NoPushback)
	}
	if grpcs != nil {
		f.GRPCRetried = err != nil && grpcs.GRPCRetried()
		grpcs.Release()
	}
	s.release()
	return err
}
