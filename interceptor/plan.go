package interceptor

import (
	"context"
	"time"

	"google.golang.org/grpc"

	"github.com/platformkit/grpcbackoff/internal/cloudclients"
	"github.com/platformkit/grpcbackoff/internal/safety"
	"github.com/platformkit/grpcbackoff/internal/settings"
)

// plan is what one call will do: the Retrier's settings for its method and
// the call's options, resolved once, in one place, before the first attempt.
// Explain puts the plan of a call without options into words.
type plan struct {
	method   string
	policy   *settings.Policy    // the retry Policy (for a hedged call, its failures'); nil: one attempt
	hedge    *settings.Hedging   // non-nil: the call is hedged
	timeout  time.Duration       // bound on the whole call; 0: none
	err      error               // a call option built from bad input
	max      int                 // the call's MaxAttempts (0 without a policy)
	hedges   int                 // attempts of a hedged round (0: not hedged)
	from     settings.Level      // whose entry gave the policy or hedging
	safety   safety.Level        // stated by a call option (see stated)
	stated   stated              // which call option stated safety, if one did
	critical bool                // Critical: exempt from adaptive throttling
	static   bool                // grpc.StaticMethod: Method is a fixed name, for observers
	through  bool                // an earlier Retrier on the connection takes the call: its attempts pass through (clients.go)
	client   cloudclients.Client // what a Google Cloud client making the call retries by itself, once learnt
	prior    int                 // retries made in the client's earlier attempts of the call (cloudclients.Memory)
	taken    bool                // the call took the memory's entry of those attempts (cloudclients.Memory)
	onFinish bool                // the caller gave grpc.OnFinish: run once per call, not per attempt (finish.go)
}

// stated says which call option stated a call's Safety.
type stated int8

const (
	byNone stated = iota
	byCallIdempotent
	byCallNotIdempotent
)

func (s stated) String() string {
	return [...]string{"", "CallIdempotent", "CallNotIdempotent"}[s]
}

// plan resolves into p, a zero plan, the plan of a call of method with ctx
// and opts. It allocates nothing.
func (r *Retrier) plan(p *plan, ctx context.Context, method string, opts []grpc.CallOption) {
	p.method = method
	s := r.settings.Resolve(method)
	p.policy, p.hedge, p.timeout, p.from = s.Policy, s.Hedge, s.Timeout, s.From
	noRetry, maxAttempts := false, 0
	var callPolicy *settings.Policy
	for _, o := range opts {
		switch o := o.(type) {
		case *layerMark:
			p.through, p.policy, p.hedge = true, nil, nil
			return
		case grpc.StaticMethodCallOption:
			p.static = true
		case grpc.OnFinishCallOption:
			p.onFinish = true
		case *criticalOption:
			p.critical = true
		case *safetyOption:
			p.safety, p.stated = o.s, byCallIdempotent
			if o.s == safety.NotIdempotent {
				p.stated = byCallNotIdempotent
			}
		case *callOption:
			switch {
			case o.err != nil:
				p.err = o.err
			case o.noRetry:
				noRetry, callPolicy, maxAttempts = true, nil, 0
			case o.policy != nil:
				noRetry, callPolicy, maxAttempts = false, o.policy, 0
			case o.maxAttempts > 0:
				maxAttempts = o.maxAttempts
			}
		}
	}
	switch {
	case noRetry:
		p.policy, p.hedge = nil, nil
	case callPolicy != nil:
		p.policy, p.hedge = callPolicy, nil
	}
	if p.hedge != nil && (p.safety == safety.NotIdempotent || p.from != settings.FromMethod && r.unsafe(method)) {
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
		case p.policy == nil || p.hedge.Config: // the hedges are every attempt (a service config's: as grpc-go)
			p.max = min(p.max, p.hedges)
			if p.policy == nil {
				p.max = p.hedges
			}
		}
		p.hedges = min(p.hedges, p.max)
		if p.hedges < 2 {
			p.hedge, p.hedges = nil, 0
		}
	}
}
