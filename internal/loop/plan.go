package loop

import (
	"context"
	"time"

	"google.golang.org/grpc"

	"github.com/platformkit/grpcbackoff/internal/attempt"
	"github.com/platformkit/grpcbackoff/internal/gate"
	"github.com/platformkit/grpcbackoff/internal/resume"
	"github.com/platformkit/grpcbackoff/internal/safety"
	"github.com/platformkit/grpcbackoff/internal/settings"
	"github.com/platformkit/grpcbackoff/internal/targets"
)

// Plan is what one call will do: the settings for its method on its
// ClientConn and the call's options, resolved once, in one place, before
// the first attempt (Engine.Plan). interceptor's Explain puts the plan of a
// call without options into words (Engine.PlanOf).
type Plan struct {
	Method   string
	Policy   *settings.Policy  // the retry Policy (for a hedged call, its failures'); nil: one attempt
	Hedge    *settings.Hedging // non-nil: the call is hedged
	Timeout  time.Duration     // bound on the whole call; 0: none
	Err      error             // a call option built from bad input
	Max      int               // the call's MaxAttempts (0 without a policy)
	Hedges   int               // attempts of a hedged round (0: not hedged)
	From     settings.Level    // whose entry gave the Policy or Hedge
	Safety   safety.Level      // stated by a call option (see Stated)
	Stated   Stated            // which call option stated Safety, if one did
	Critical gate.Criticality  // Critical, Sheddable (CriticalityOption); sent on every attempt (Outgoing)
	Static   bool              // grpc.StaticMethod: Method is a fixed name, for observers
	Through  bool              // an earlier Retrier on the connection takes the call: its attempts pass through (Mark)
	OnFinish bool              // the caller gave grpc.OnFinish: run once per call, not per attempt (SplitOnFinish)
	Resume   resume.Rule       // the method's resume rule (WithResume), for its server streams; nil: none, or no Policy
}

// Stated says which call option stated a call's Safety.
type Stated int8

const (
	ByNone Stated = iota
	ByCallIdempotent
	ByCallNotIdempotent
)

func (s Stated) String() string {
	return [...]string{"", "CallIdempotent", "CallNotIdempotent"}[s]
}

// ConnPolicies is a source of retry settings per ClientConn, from outside
// the Retrier: the retryPolicy a connection's name resolver publishes
// (cc.GetMethodConfig(method), gRFC A2), or its xDS route's (gRFC A44).
// Engine.Conns is nil, none, until one is given; Plan then asks it for each
// call on a ClientConn, once the connection's state is looked up, and what
// it says of the method replaces the Retrier's own settings for it; the
// call's options still win over it. It is called concurrently, on every
// call's path: it must not block, nor allocate once a connection's policy
// is known.
type ConnPolicies interface {
	// Resolve returns the settings of method on conn's ClientConn, and
	// false when the source says nothing of it: the Retrier's own apply.
	Resolve(conn *targets.Conn, method string) (settings.Resolved, bool)
}

// Plan resolves into p, a zero Plan, the plan of a call of method on cc
// with the call options opts, in this order:
//
//  1. the call's options, read once: a call an earlier Retrier on the
//     connection took passes through (p.Through), and nothing more is
//     resolved;
//  2. the ClientConn's state (targets.Conn), registered on its first call;
//  3. the method's settings: the connection's own (Engine.Conns), if it
//     says anything of the method, else the Retrier's (settings.Table:
//     WithMethod, WithServiceConfig, WithHedging, then its Policy), each
//     by method, then service, then default;
//  4. the call's options over them: NoRetry, CallPolicy, CallMaxAttempts;
//  5. its safety: a hedge of a method known not to be safe to send twice
//     is dropped, and its failures follow its Policy;
//  6. its attempts: MaxAttempts, the hedges of a round, and the method's
//     resume rule, which resumes its server streams (Engine.Resume).
//
// It returns the ClientConn's state, nil for a call that passes through.
// It allocates nothing once cc is registered.
func (e *Engine) Plan(p *Plan, cc *grpc.ClientConn, method string, opts []grpc.CallOption) *targets.Conn {
	return e.plan(p, cc, true, method, opts)
}

// PlanOf resolves into p, a zero Plan, the plan of a call of method with
// the call options opts on no ClientConn in particular, as Plan does
// without step 2: what Explain tells.
func (e *Engine) PlanOf(p *Plan, method string, opts []grpc.CallOption) {
	e.plan(p, nil, false, method, opts)
}

// plan is Plan, for a call on cc if onConn, on no ClientConn in particular
// otherwise (it then returns nil).
func (e *Engine) plan(p *Plan, cc *grpc.ClientConn, onConn bool, method string, opts []grpc.CallOption) (conn *targets.Conn) {
	p.Method = method
	// 1. The call's options.
	noRetry, maxAttempts := false, 0
	var callPolicy *settings.Policy
	for _, o := range opts {
		switch o := o.(type) {
		case *layerMark:
			p.Through = true
			return nil
		case grpc.StaticMethodCallOption:
			p.Static = true
		case grpc.OnFinishCallOption:
			p.OnFinish = true
		case *CriticalityOption:
			p.Critical = o.Level
		case *SafetyOption:
			p.Safety, p.Stated = o.Level, ByCallIdempotent
			if o.Level == safety.NotIdempotent {
				p.Stated = ByCallNotIdempotent
			}
		case *Option:
			switch {
			case o.Err != nil:
				p.Err = o.Err
			case o.NoRetry:
				noRetry, callPolicy, maxAttempts = true, nil, 0
			case o.Policy != nil:
				noRetry, callPolicy, maxAttempts = false, o.Policy, 0
			case o.MaxAttempts > 0:
				maxAttempts = o.MaxAttempts
			}
		}
	}
	// 2. The ClientConn's state; 3. the method's settings.
	known := false
	if onConn {
		conn = e.Targets.Conn(cc)
		if e.Conns != nil {
			var r settings.Resolved
			if r, known = e.Conns.Resolve(conn, method); known {
				p.Policy, p.Hedge, p.Timeout, p.From = r.Policy, r.Hedge, r.Timeout, r.From
			}
		}
	}
	switch s := &e.Settings; {
	case known:
	case s.Plain(): // the Retrier's own settings for every method
		p.Policy, p.Hedge, p.Timeout = s.Base.Policy, s.Base.Hedge, s.Base.Timeout
	default:
		r := s.Resolve(method)
		p.Policy, p.Hedge, p.Timeout, p.From = r.Policy, r.Hedge, r.Timeout, r.From
	}
	// 4. The call's options over them.
	switch {
	case noRetry:
		p.Policy, p.Hedge = nil, nil
	case callPolicy != nil:
		p.Policy, p.Hedge = callPolicy, nil
	}
	// 5. Its safety.
	if p.Hedge != nil && (p.Safety == safety.NotIdempotent || p.From != settings.FromMethod && e.Unsafe(method)) {
		p.Hedge = nil // never sent twice: its failures follow its Policy
	}
	// 6. Its attempts.
	if p.Policy != nil {
		p.Max, p.Resume = p.Policy.MaxAttempts, e.Resume.Of(method)
	}
	if maxAttempts > 0 {
		p.Max = maxAttempts
	}
	if p.Hedge != nil {
		p.Hedges = p.Hedge.MaxAttempts
		switch {
		case maxAttempts > 0: // CallMaxAttempts: the hedges and the whole call
			p.Hedges, p.Max = maxAttempts, maxAttempts
		case p.Policy == nil || p.Hedge.Config: // the hedges are every attempt (a service config's: as grpc-go)
			p.Max = min(p.Max, p.Hedges)
			if p.Policy == nil {
				p.Max = p.Hedges
			}
		}
		p.Hedges = min(p.Hedges, p.Max)
		if p.Hedges < 2 {
			p.Hedge, p.Hedges = nil, 0
		}
	}
	return conn
}

// WithTimeout bounds ctx by the plan's timeout (a service config entry's),
// if it has one that ends before ctx's deadline; cancel is nil if not.
func (p *Plan) WithTimeout(ctx context.Context) (_ context.Context, cancel context.CancelFunc) {
	if p.Timeout <= 0 {
		return ctx, nil
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= p.Timeout {
		return ctx, nil
	}
	return context.WithTimeout(ctx, p.Timeout)
}

// criticality returns the call's criticality, as its gates know it.
func (p *Plan) criticality() gate.Criticality { return p.Critical }

// SafetyOf returns what is known of the Safety of the call p plans, first
// to last as interceptor.Safety says: what its call options state, then
// what the Retrier's book says of its method.
func (e *Engine) SafetyOf(p *Plan) safety.Knowledge {
	if p.Stated != ByNone {
		return safety.Knowledge{Level: p.Safety, Source: "call option " + p.Stated.String()}
	}
	return e.Safety.Of(p.Method)
}

// safeToRetry reports whether the call p plans, with the request req (nil
// for a stream), may be sent again after an attempt failed as f, with a
// code its Policy retries.
func (e *Engine) safeToRetry(p *Plan, f attempt.Failure, req any) bool {
	if e.UnsafeRetries || !f.MayHaveApplied() {
		return true
	}
	return safety.Resendable(e.SafetyOf(p), req)
}
