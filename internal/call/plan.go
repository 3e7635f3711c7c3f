package call

import (
	"context"
	"time"

	"google.golang.org/grpc"

	"github.com/platformkit/grpcbackoff/internal/attempt"
	"github.com/platformkit/grpcbackoff/internal/cloudclients"
	"github.com/platformkit/grpcbackoff/internal/safety"
	"github.com/platformkit/grpcbackoff/internal/settings"
	"github.com/platformkit/grpcbackoff/internal/targets"
)

// Plan is what one call will do: the Retrier's settings for its method and
// the call's options, resolved once, in one place, before the first attempt.
// interceptor's Explain puts the plan of a call without options into words.
type Plan struct {
	Method   string
	Policy   *settings.Policy    // the retry Policy (for a hedged call, its failures'); nil: one attempt
	Hedge    *settings.Hedging   // non-nil: the call is hedged
	Timeout  time.Duration       // bound on the whole call; 0: none
	Err      error               // a call option built from bad input
	Max      int                 // the call's MaxAttempts (0 without a policy)
	Hedges   int                 // attempts of a hedged round (0: not hedged)
	From     settings.Level      // whose entry gave the Policy or Hedge
	Safety   safety.Level        // stated by a call option (see Stated)
	Stated   Stated              // which call option stated Safety, if one did
	Critical bool                // Critical: exempt from adaptive throttling
	Static   bool                // grpc.StaticMethod: Method is a fixed name, for observers
	Through  bool                // an earlier Retrier on the connection takes the call: its attempts pass through (Mark)
	Client   cloudclients.Client // what a Google Cloud client making the call retries by itself, once learnt
	Prior    int                 // retries made in the client's earlier attempts of the call (Recall)
	Taken    bool                // the call took the memory's entry of those attempts (Recall)
	OnFinish bool                // the caller gave grpc.OnFinish: run once per call, not per attempt (SplitOnFinish)
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

// Plan resolves into p, a zero Plan, the plan of a call of method with the
// call options opts. It allocates nothing.
func (e *Engine) Plan(p *Plan, method string, opts []grpc.CallOption) {
	p.Method = method
	if s := &e.Settings; s.Plain() { // the Retrier's own settings for every method
		p.Policy, p.Hedge, p.Timeout = s.Base.Policy, s.Base.Hedge, s.Base.Timeout
	} else {
		r := s.Resolve(method)
		p.Policy, p.Hedge, p.Timeout, p.From = r.Policy, r.Hedge, r.Timeout, r.From
	}
	noRetry, maxAttempts := false, 0
	var callPolicy *settings.Policy
	for _, o := range opts {
		switch o := o.(type) {
		case *layerMark:
			p.Through, p.Policy, p.Hedge = true, nil, nil
			return
		case grpc.StaticMethodCallOption:
			p.Static = true
		case grpc.OnFinishCallOption:
			p.OnFinish = true
		case *CriticalOption:
			p.Critical = true
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
	switch {
	case noRetry:
		p.Policy, p.Hedge = nil, nil
	case callPolicy != nil:
		p.Policy, p.Hedge = callPolicy, nil
	}
	if p.Hedge != nil && (p.Safety == safety.NotIdempotent || p.From != settings.FromMethod && e.Unsafe(method)) {
		p.Hedge = nil // never sent twice: its failures follow its Policy
	}
	if p.Policy != nil {
		p.Max = p.Policy.MaxAttempts
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

// learnClient learns, once, whether the call p plans, with ctx, opts and
// req (nil for a stream) on the ClientConn of conn, is a Google Cloud
// client's, and which codes its client retries (internal/cloudclients).
func (p *Plan) learnClient(ctx context.Context, conn *targets.Conn, opts []grpc.CallOption, req any) {
	if p.Client.Learnt {
		return
	}
	var api *cloudclients.API
	if conn != nil {
		api = conn.API.Load()
	}
	p.Client = cloudclients.Learn(ctx, p.Method, opts, api, req)
}

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
