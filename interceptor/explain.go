package interceptor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
)

// Decision is what the calls of one method do, as Explain gives it.
type Decision struct {
	// Method is the full method name, "/pkg.Service/Method".
	Method string
	// Policy is the Policy that applies to the method's calls (for a hedged
	// method, to its failures), or nil when they are not retried at all
	// (WithoutRetryFor, or a service config entry without a retryPolicy).
	Policy *grpcbackoff.Policy
	// PolicySource says where Policy comes from.
	PolicySource string
	// Hedging is the method's hedging (WithHedging, or a service config's
	// hedgingPolicy), nil when its calls are not hedged; its MaxAttempts is
	// the attempts of one round.
	Hedging *grpcbackoff.Hedging
	// Timeout bounds each call (a service config's timeout); 0 for none.
	Timeout time.Duration
	// MaxAttempts bounds the attempts of a call, hedges included.
	MaxAttempts int
	// Safety is what is known of the method (see Safety), and Source where
	// it comes from.
	Safety Safety
	Source string
	// Codes are the codes retried after a failure that may have been
	// applied: Policy.Codes, less those (see Safety) for a method that is
	// NotIdempotent unless WithNonIdempotentRetries is set.
	Codes []codes.Code
	// OuterRetry says the Retrier has WithOuterRetry: calls their caller
	// retries by itself get a single attempt instead (Explain's call has no
	// context, so it cannot tell which).
	OuterRetry bool
	// SharedBudget says the retries are paid from budgets shared with
	// other processes (WithSharedBudget), one per target, rather than the
	// process's own.
	SharedBudget bool
}

// String describes d in one line, e.g.
//
//	/google.cloud.redis.v1.CloudRedis/FailoverInstance: up to 5 attempts on RESOURCE_EXHAUSTED (UNAVAILABLE only when the connection could not be made) [the Retrier's Policy]; not idempotent: google.api.http POST ...
func (d Decision) String() string {
	var b strings.Builder
	b.WriteString(d.Method)
	b.WriteString(": ")
	if d.Hedging != nil {
		fmt.Fprintf(&b, "hedged, %d attempts at most in flight, one every %v while none answers", d.Hedging.MaxAttempts, d.Hedging.Delay)
		if d.Hedging.Adaptive() {
			fmt.Fprintf(&b, " (or the p%g latency, in [%v, %v])", d.Hedging.Quantile*100, d.Hedging.MinDelay, d.Hedging.MaxDelay)
		}
		if len(d.Hedging.NonFatalCodes) > 0 {
			fmt.Fprintf(&b, ", the others going on after %s", codeList(d.Hedging.NonFatalCodes))
		}
		b.WriteString("; ")
		if d.Policy == nil {
			fmt.Fprintf(&b, "failures not retried (%s), %d attempts in all", d.PolicySource, d.MaxAttempts)
			d.writeTail(&b)
			return b.String()
		}
		b.WriteString("failures ")
	} else if d.Policy == nil {
		fmt.Fprintf(&b, "never retried (%s)", d.PolicySource)
		d.writeTail(&b)
		return b.String()
	}
	fmt.Fprintf(&b, "up to %d attempts on %s", d.MaxAttempts, codeList(d.Codes))
	if len(d.Codes) < len(d.Policy.Codes) && d.Policy.Retryable(codes.Unavailable) {
		b.WriteString(" (UNAVAILABLE only when the connection could not be made)")
	}
	if d.Policy.AttemptTimeout > 0 {
		fmt.Fprintf(&b, ", each attempt cut after %v without an answer", d.Policy.AttemptTimeout)
	}
	fmt.Fprintf(&b, " [%s]; %s: %s", d.PolicySource, d.Safety, d.Source)
	d.writeTail(&b)
	return b.String()
}

// writeTail adds the call timeout and the outer retry, if any.
func (d Decision) writeTail(b *strings.Builder) {
	if d.Timeout > 0 {
		fmt.Fprintf(b, "; each call bounded by %v", d.Timeout)
	}
	if d.OuterRetry {
		b.WriteString("; one attempt when its caller retries it (WithOuterRetry)")
	}
	if d.SharedBudget {
		b.WriteString("; retries paid from a budget per target shared by the fleet's processes (WithSharedBudget)")
	}
}

func codeList(cs []codes.Code) string {
	if len(cs) == 0 {
		return "no code"
	}
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = strings.ToUpper(snake(c.String()))
	}
	return strings.Join(names, ", ")
}

// Explain returns what the calls of fullMethod ("/pkg.Service/Method") made
// without call options do, and why: the plan such a call gets (see
// WithMethod, WithHedging and WithServiceConfig), where its Policy comes
// from, what is known of the method's Safety and where from, and so which
// codes are retried.
func (r *Retrier) Explain(fullMethod string) Decision {
	var p plan
	r.plan(&p, context.Background(), fullMethod, nil)
	d := Decision{Method: fullMethod, Timeout: p.timeout, MaxAttempts: p.max, OuterRetry: r.outer != nil,
		SharedBudget: r.shared != nil && r.throttle != nil}
	if p.hedge != nil {
		h := p.hedge.Hedging
		h.NonFatalCodes = slices.Clone(h.NonFatalCodes)
		h.MaxAttempts = p.hedges
		d.Hedging = &h
	}
	d.PolicySource = r.policySource(&p)
	if p.policy == nil {
		return d
	}
	pol := p.policy.Policy
	pol.Codes = slices.Clone(p.policy.Codes)
	d.Policy = &pol
	k := r.safetyOf(&p)
	d.Safety, d.Source = k.s, k.source
	for _, c := range pol.Codes {
		if k.s == NotIdempotent && !r.unsafeRetries && mayHaveApplied(status.New(c, "")) {
			continue
		}
		d.Codes = append(d.Codes, c)
	}
	if r.unsafeRetries && k.s == NotIdempotent {
		d.Source += " (retried anyway: WithNonIdempotentRetries)"
	}
	return d
}

// policySource says where the Policy of p comes from.
func (r *Retrier) policySource(p *plan) string {
	name := [...]string{fromDefault: "", fromService: serviceOf(p.method), fromMethod: p.method}[p.from]
	if p.hedge != nil {
		name = r.retryFrom(p.method)
	}
	switch {
	case p.policy == nil && name == "":
		return "no default Policy: WithServiceConfig's default entry has no retryPolicy"
	case p.policy == nil:
		return "WithoutRetryFor, or a service config entry without a retryPolicy, for " + name
	case name == "":
		return "the Retrier's Policy"
	}
	return "WithMethod or WithServiceConfig for " + name
}

// retryFrom returns the name whose entry gives a hedged method the Policy
// its failures answer to: its service, or "" for the default.
func (r *Retrier) retryFrom(method string) string {
	for _, name := range [...]string{method, serviceOf(method)} {
		if e := r.entries[name]; name != "" && e != nil && e.set && e.hedge == nil {
			return name
		}
	}
	return ""
}
