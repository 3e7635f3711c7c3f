package interceptor

import (
	"context"

	"google.golang.org/grpc"
)

// plan is what one call will do: the Retrier's settings for its method and
// the call's options, resolved once, in one place, before the first attempt.
// Explain puts the plan of a call without options into words.
type plan struct {
	method   string
	settings           // the method's, before call options
	max      int       // the call's MaxAttempts (0 without a policy)
	hedges   int       // attempts of a hedged round (0: not hedged)
	safety   Safety    // stated by a call option; SafetyUnknown: see safetyOf
	safetyBy string    // the call option that stated it
	critical bool      // Critical: exempt from adaptive throttling
	static   bool      // grpc.StaticMethod: Method is a fixed name, for observers
	outer    bool      // WithOuterRetry: the caller retries the call itself
	err      error     // a call option built from bad input
	callPol  *compiled // CallPolicy
}

// plan resolves the plan of a call of method with ctx and opts. It
// allocates nothing.
func (r *Retrier) plan(ctx context.Context, method string, opts []grpc.CallOption) plan {
	p := plan{method: method, settings: r.settingsOf(method)}
	noRetry, maxAttempts := false, 0
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.StaticMethodCallOption:
			p.static = true
		case *criticalOption:
			p.critical = true
		case *safetyOption:
			p.safety, p.safetyBy = o.s, callOptionName(o.s)
		case *callOption:
			switch {
			case o.err != nil:
				p.err = o.err
			case o.noRetry:
				noRetry, p.callPol, maxAttempts = true, nil, 0
			case o.policy != nil:
				noRetry, p.callPol, maxAttempts = false, o.policy, 0
				p.safety, p.safetyBy = Idempotent, "call option CallPolicy"
			case o.maxAttempts > 0:
				maxAttempts = o.maxAttempts
			}
		}
	}
	if r.outer != nil && r.outer(ctx, method, opts) {
		p.outer, noRetry = true, true
	}
	switch {
	case noRetry:
		p.policy, p.hedge = nil, nil
	case p.callPol != nil:
		p.policy, p.hedge = p.callPol, nil
	}
	if p.hedge != nil && (p.safety == NotIdempotent || p.from != method && r.unsafe(method)) {
		p.hedge = nil // never sent twice: its failures follow its Policy
	}
	if p.policy != nil {
		p.max = p.policy.MaxAttempts
	}
	if maxAttempts > 0 {
		p.max = maxAttempts
	}
	if p.hedge != nil {
		p.hedges = p.hedge.MaxAttempts
		switch {
		case maxAttempts > 0: // CallMaxAttempts: the hedges and the whole call
			p.hedges, p.max = maxAttempts, maxAttempts
		case p.policy == nil: // no Policy: the hedges are every attempt
			p.max = p.hedges
		}
		p.hedges = min(p.hedges, p.max)
		if p.hedges < 2 {
			p.hedge, p.hedges = nil, 0
		}
	}
	return p
}
