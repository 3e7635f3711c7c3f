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
// the first attempt (Engine.Plan), and what its ClientConn's control plane
// decides of it (Conn: at its first failure, or grpc-go's own retry).
// interceptor's Explain puts the plan of a call without options into words
// (Engine.PlanOf, Engine.PlanOn).
type Plan struct {
	Method    string
	Policy    *settings.Policy  // the retry Policy (for a hedged call, its failures'); nil: one attempt
	Hedge     *settings.Hedging // non-nil: the call is hedged
	Timeout   time.Duration     // bound on the whole call; 0: none
	Err       error             // a call option built from bad input
	Max       int               // the call's MaxAttempts (0 without a policy)
	Hedges    int               // attempts of a hedged round (0: not hedged)
	From      settings.Level    // whose entry gave the Policy or Hedge (with FromConn, of the connection's service config)
	Conn      ConnRule          // what the ClientConn's control plane decides of the call
	FromConn  bool              // the Policy is the connection's (its service config's, read at the first failure)
	CountGRPC bool              // ConnGRPC on an xDS channel: each attempt counts grpc-go's attempts of it (attempt.Failure.GRPCRetried)
	Safety    safety.Level      // stated by a call option (see Stated)
	Stated    Stated            // which call option stated Safety, if one did
	Critical  gate.Criticality  // Critical, Sheddable (CriticalityOption); sent on every attempt (Outgoing)
	Static    bool              // grpc.StaticMethod: Method is a fixed name, for observers
	Through   bool              // an earlier Retrier on the connection takes the call: its attempts pass through (Mark)
	OnFinish  bool              // the caller gave grpc.OnFinish: run once per call, not per attempt (SplitOnFinish)
	Resume    resume.Rule       // the method's resume rule (WithResume), for its server streams; nil: none, or no Policy
	callMax   bool              // CallMaxAttempts set Max
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

// ConnRule is what a call's ClientConn decides of it, by its control plane:
// the service config of its name resolver (gRFC A2: a manual resolver, DNS
// TXT records, or grpc.WithDefaultServiceConfig), as
// cc.GetMethodConfig(method) gives it (internal/connpolicy), or an xDS
// route's retry_policy (gRFC A44), which only grpc-go's own retry applies.
type ConnRule int8

const (
	// ConnNone: nothing. A call without a ClientConn; a call whose options
	// (NoRetry, CallPolicy) or whose method's own options (WithMethod,
	// WithoutRetryFor, WithHedging; WithServiceConfig's hedging, or an
	// entry of it without a retryPolicy) decide.
	ConnNone ConnRule = iota
	// ConnRead: the retryPolicy the connection's service config gives the
	// method, if it gives one, replaces the Policy (and Max, unless
	// CallMaxAttempts set it) at the call's first failure, and the
	// config's timeout for the method bounds the retries from then on
	// (Call.Decide). It is read then, once: the first time it is sure to
	// be known (a new ClientConn applies its resolver's config as it lets
	// its first attempt go, not before) and the only time it matters.
	ConnRead
	// ConnGRPC: grpc-go's own retry is on for the ClientConn
	// (interceptor.XDSDialOptions): it takes first the failures its control
	// plane's policy retries, an xDS route's (known only to grpc-go, per
	// call: a call it attempted more than once) or the service config's
	// (its codes), and the plan's Policy applies to the others
	// (Call.Decide). Such a call is not hedged.
	ConnGRPC
)

// Plan resolves into p, a zero Plan, the plan of a call of method on cc
// with the call options opts, in this order:
//
//  1. the call's options, read once: a call an earlier Retrier on the
//     connection took passes through (p.Through), and nothing more is
//     resolved;
//  2. the ClientConn's state (targets.Conn), registered on its first call;
//  3. the method's settings: the Retrier's (settings.Table: WithMethod,
//     WithServiceConfig, WithHedging, then its Policy, each by method,
//     then service, then default), then what the ClientConn's control
//     plane decides (Conn): where grpc-go's own retry is on, it takes its
//     control plane's failures first (ConnGRPC), whatever the rest says;
//     elsewhere the retryPolicy of the connection's service config,
//     read at the first failure (ConnRead), replaces a default Policy, the
//     Retrier's or a retryPolicy of WithServiceConfig, never a choice made
//     before the first attempt: the call's options, WithMethod,
//     WithoutRetryFor, WithHedging, and WithServiceConfig's entries that
//     hedge or retry nothing (a read as every such call starts would cost
//     it the ClientConn's lock);
//  4. the call's options over them: NoRetry, CallPolicy, CallMaxAttempts;
//  5. its safety: a hedge of a method known not to be safe to send twice
//     is dropped, and its failures follow its Policy; so is a hedge where
//     grpc-go's own retry is on;
//  6. its attempts: MaxAttempts, the hedges of a round, and the method's
//     resume rule, which resumes its server streams (Engine.Resume).
//
// So the order is: the call's options, the Retrier's options for the
// method or its service (and WithServiceConfig's hedging and no retry),
// the connection's control plane, WithServiceConfig's retryPolicies, the
// Retrier's Policy. It returns the ClientConn's state, nil for a call
// that passes through. It allocates nothing once cc is registered.
func (e *Engine) Plan(p *Plan, cc *grpc.ClientConn, method string, opts []grpc.CallOption) *targets.Conn {
	return e.plan(p, cc, nil, true, method, opts)
}

// PlanOf resolves into p, a zero Plan, the plan of a call of method with
// the call options opts on no ClientConn in particular, as Plan does
// without step 2: what Explain tells.
func (e *Engine) PlanOf(p *Plan, method string, opts []grpc.CallOption) {
	e.plan(p, nil, nil, false, method, opts)
}

// PlanOn resolves into p, a zero Plan, the plan of a call of method with
// the call options opts on the ClientConn whose state is conn, as Plan
// does but for registering it, with the connection's policy read now
// where the call reads it at its first failure (ConnRead): what Explain
// tells of one ClientConn. It returns the connection's timeout for the
// method (0: none), which bounds such a call's retries, and the error of a
// retryPolicy of the connection's that the Retrier cannot carry out (the
// call then keeps its Policy).
func (e *Engine) PlanOn(p *Plan, conn *targets.Conn, method string, opts []grpc.CallOption) (time.Duration, error) {
	e.plan(p, nil, conn, false, method, opts)
	if p.Conn != ConnRead {
		return 0, nil
	}
	return e.adopt(p, conn) // p.Conn stays ConnRead: the read is the first failure's
}

// plan is Plan, for a call on cc if register, on the ClientConn whose
// state is conn if not nil, on no ClientConn in particular otherwise; it
// returns the ClientConn's state.
func (e *Engine) plan(p *Plan, cc *grpc.ClientConn, conn *targets.Conn, register bool, method string, opts []grpc.CallOption) *targets.Conn {
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
	// 2. The ClientConn's state.
	if register {
		conn = e.Targets.Conn(cc)
	}
	// 3. The method's settings: the Retrier's, then the connection's.
	config := false // the entry deciding is WithServiceConfig's
	switch s := &e.Settings; {
	case s.Plain(): // the Retrier's own settings for every method
		p.Policy, p.Hedge, p.Timeout, config = s.Base.Policy, s.Base.Hedge, s.Base.Timeout, s.Base.Config
	default:
		r := s.Resolve(method)
		p.Policy, p.Hedge, p.Timeout, p.From, config = r.Policy, r.Hedge, r.Timeout, r.From, r.Config
	}
	if conn != nil && conn.Policies != nil {
		switch {
		case conn.GRPCRetry.Load():
			p.Conn, p.CountGRPC = ConnGRPC, conn.XDS
		case noRetry || callPolicy != nil || p.From != settings.FromDefault && !config || p.Policy == nil || p.Hedge != nil:
			// A choice made before the first attempt: the call's options,
			// the Retrier's own for the method, a hedging or no retry.
		default: // a default Policy: the New's, or a retryPolicy of WithServiceConfig
			p.Conn = ConnRead
		}
	}
	// 4. The call's options over them.
	switch {
	case noRetry:
		p.Policy, p.Hedge = nil, nil
	case callPolicy != nil:
		p.Policy, p.Hedge = callPolicy, nil
	}
	// 5. Its safety.
	if p.Hedge != nil && (p.Conn == ConnGRPC || p.Safety == safety.NotIdempotent || p.From != settings.FromMethod && e.Unsafe(method)) {
		p.Hedge = nil // never sent twice: its failures follow its Policy
	}
	// 6. Its attempts.
	if p.Policy != nil {
		p.Max, p.Resume = p.Policy.MaxAttempts, e.Resume.Of(method)
	}
	if maxAttempts > 0 {
		p.Max, p.callMax = maxAttempts, true
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

// adopt reads into p the policy the service config of the ClientConn whose
// state is conn gives p's method (connpolicy.Source.Lookup): a retryPolicy
// replaces its Policy, but for its AttemptTimeout, which a retryPolicy has
// no word for (the Retrier's cut of a hung attempt stays), and its Max
// unless a call option set it (FromConn; From is its entry's level). It
// returns the config's timeout for the method (0: none), and the error of
// a retryPolicy the Retrier cannot carry out, which leaves p as it was.
func (e *Engine) adopt(p *Plan, conn *targets.Conn) (time.Duration, error) {
	cp, err := conn.Policies.Lookup(p.Method)
	if cp.Retry != nil {
		pol := cp.Retry
		if p.Policy != nil && p.Policy.AttemptTimeout > 0 {
			c := *pol // shared: copied, with the Retrier's AttemptTimeout
			c.AttemptTimeout = p.Policy.AttemptTimeout
			pol = &c
		}
		p.Policy, p.From, p.FromConn = pol, cp.From, true
		if !p.callMax {
			p.Max = cp.Retry.MaxAttempts
		}
	}
	return cp.Timeout, err
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
// what the Retrier's catalog says of its method, with what a retryPolicy
// of the connection's service config states of it if the call follows one
// (FromConn), as WithServiceConfig's would.
func (e *Engine) SafetyOf(p *Plan) safety.Knowledge {
	if p.Stated != ByNone {
		return safety.Knowledge{Level: p.Safety, Source: "call option " + p.Stated.String()}
	}
	if p.FromConn {
		return e.Safety.OfConn(p.Method, p.From)
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
