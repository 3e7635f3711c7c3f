package interceptor

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/attempt"
	"github.com/platformkit/grpcbackoff/internal/cloudclients"
	"github.com/platformkit/grpcbackoff/internal/loop"
	"github.com/platformkit/grpcbackoff/internal/safety"
	"github.com/platformkit/grpcbackoff/internal/settings"
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
	// NotIdempotent unless WithNonIdempotentRetries is set. Of those left
	// for such a method (RESOURCE_EXHAUSTED, ABORTED), a failure is retried
	// only when it is the server's own status, never a stream reset that
	// grpc-go gave the same code; none for a unary method under
	// WithoutPushback, which leaves that unknown.
	Codes []codes.Code
	// Clients says what the Google Cloud clients that call the method retry
	// by themselves, one entry per kind of client: for their calls, the
	// Retrier makes one attempt on those codes and retries the others of
	// Codes. Calls made otherwise (generated stubs on a connection of your
	// own) are retried on every code of Codes. Empty for a method no Google
	// Cloud client is known to call.
	Clients []ClientRetries
	// SharedBudget says the retries are paid from budgets shared with
	// other processes (WithSharedBudget), one per target, rather than the
	// process's own.
	SharedBudget bool
	// Budget says the retries are paid from a retry budget per target (the
	// process's, or the fleet's with SharedBudget): a retry it cannot pay
	// for ends the call with grpcbackoff.ReasonThrottled. False under
	// WithoutThrottle.
	Budget bool
	// Pushback says unary calls read the server's grpc-retry-pushback-ms
	// trailer: a negative value, as a server's retry guard sends (package
	// guard), ends the retries with grpcbackoff.ReasonServerRefused, the
	// server's refusal, where the budget's is ReasonThrottled. False under
	// WithoutPushback: unary calls then ignore a retry guard (streams read
	// the trailer still, and RetryInfo is honoured).
	Pushback bool
	// Resume is the name the method's resume rule was given for
	// (WithResume: the method's, or its service's): its server streams are
	// resumed after they fail having delivered messages. "" for none, and
	// for a method without a Policy.
	Resume string
}

// String describes d in one line, e.g.
//
//	/google.cloud.redis.v1.CloudRedis/FailoverInstance: up to 5 attempts on RESOURCE_EXHAUSTED (UNAVAILABLE only when the connection could not be made) [the Retrier's Policy]; not idempotent: google.api.http POST ...
func (d Decision) String() string {
	var b strings.Builder
	b.WriteString(d.Method)
	b.WriteString(": ")
	if d.Hedging != nil {
		fmt.Fprintf(&b, "unary calls hedged, %d attempts at most in flight, one every %v while none answers", d.Hedging.MaxAttempts, d.Hedging.Delay)
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
	if d.Resume != "" {
		fmt.Fprintf(&b, "; a server stream that fails after delivering messages is resumed (WithResume for %q), MaxAttempts counting the opens in a row that deliver none", d.Resume)
	}
	d.writeTail(&b)
	return b.String()
}

// writeTail adds the call timeout and who retries what for the callers
// that retry by themselves, if any.
func (d Decision) writeTail(b *strings.Builder) {
	if d.Timeout > 0 {
		fmt.Fprintf(b, "; each call bounded by %v", d.Timeout)
	}
	for _, c := range d.Clients {
		fmt.Fprintf(b, "; called by %s: ", c.Client)
		var left cloudclients.CodeSet
		for _, code := range c.Codes {
			left |= 1 << code
		}
		var theirs, ours []codes.Code
		for _, code := range d.Codes {
			if left.Has(code) {
				theirs = append(theirs, code)
			} else {
				ours = append(ours, code)
			}
		}
		if d.Policy == nil && d.Hedging == nil {
			ours = nil
		}
		switch {
		case len(theirs) == 0 && len(ours) == 0:
			b.WriteString("nothing retried here")
		case len(theirs) == 0:
			b.WriteString("every code by this library")
		case c.OpeningOnly:
			fmt.Fprintf(b, "%s by the client's own retry at the stream's opening; once open, every code by this library until the stream commits", codeList(theirs))
		case len(ours) == 0:
			fmt.Fprintf(b, "%s by the client's own retry, one attempt each here", codeList(theirs))
		default:
			fmt.Fprintf(b, "%s by the client's own retry, one attempt each here; %s by this library", codeList(theirs), codeList(ours))
		}
		var hinted []codes.Code
		for _, code := range c.Hinted {
			if slices.Contains(ours, code) {
				hinted = append(hinted, code)
			}
		}
		if len(hinted) > 0 {
			fmt.Fprintf(b, " (%s with the server's RetryInfo: by the client's own retry)", codeList(hinted))
		}
		var once []codes.Code
		for _, code := range c.ExactlyOnce {
			if !left.Has(code) && slices.Contains(ours, code) {
				once = append(once, code)
			}
		}
		if len(once) > 0 {
			fmt.Fprintf(b, " (on a subscription with exactly-once delivery, %s by the client's own retry instead)", codeList(once))
		}
	}
	if d.SharedBudget {
		b.WriteString("; retries paid from a budget per target shared by the fleet's processes (WithSharedBudget)")
	}
	if d.Policy == nil && d.Hedging == nil {
		return
	}
	if !d.Budget {
		b.WriteString("; no retry budget (WithoutThrottle)")
	}
	if !d.Pushback {
		b.WriteString("; unary calls ignore the server's pushback, a retry guard's included (WithoutPushback)")
	}
}

func codeList(cs []codes.Code) string {
	if len(cs) == 0 {
		return "no code"
	}
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = strings.ToUpper(safety.Snake(c.String()))
	}
	return strings.Join(names, ", ")
}

// Explain returns what the calls of fullMethod ("/pkg.Service/Method") made
// without call options do, and why: the plan such a call gets (see
// WithMethod, WithHedging and WithServiceConfig), where its Policy comes
// from, what is known of the method's Safety and where from, and so which
// codes are retried.
func (r *Retrier) Explain(fullMethod string) Decision {
	var p loop.Plan
	r.e.PlanOf(&p, fullMethod, nil)
	d := Decision{Method: fullMethod, Timeout: p.Timeout, MaxAttempts: p.Max, PolicySource: r.policySource(&p),
		SharedBudget: r.e.Targets.Shared != nil && r.e.Targets.Throttle != nil, Budget: r.e.Targets.Throttle != nil, Pushback: !r.e.NoPushback}
	if p.Resume != nil {
		d.Resume = p.Resume.Name()
	}
	if p.Hedge != nil && isStream(fullMethod) {
		// Hedging is for unary calls: a stream is retried by the Policy its
		// failures answer to, as a call that is not hedged.
		p.Hedge, p.Hedges = nil, 0
		if p.Policy != nil {
			d.MaxAttempts = p.Policy.MaxAttempts
		}
	}
	if p.Hedge != nil {
		h := p.Hedge.Hedging
		h.NonFatalCodes = slices.Clone(h.NonFatalCodes)
		h.MaxAttempts = p.Hedges
		d.Hedging = &h
	}
	if p.Policy == nil {
		return d
	}
	pol := p.Policy.Policy
	pol.Codes = slices.Clone(p.Policy.Codes)
	d.Policy = &pol
	k := r.e.SafetyOf(&p)
	d.Safety, d.Source = Safety(k.Level), k.Source
	// Under WithoutPushback a unary call that is not hedged reads no
	// trailer, so no failure is known to be the server's own status: a
	// write is resent after none.
	blind := r.e.NoPushback && !isStream(fullMethod) && p.Hedge == nil
	for _, c := range pol.Codes {
		if k.Level == safety.NotIdempotent && !r.e.UnsafeRetries && (attempt.CodeMayHaveApplied(c) || blind) {
			continue
		}
		d.Codes = append(d.Codes, c)
	}
	if r.e.UnsafeRetries && k.Level == safety.NotIdempotent {
		d.Source += " (retried anyway: WithNonIdempotentRetries)"
	}
	d.Clients = clientRetries(fullMethod, isStream(fullMethod))
	return d
}

// isStream reports whether method is known, from its descriptor, or the
// data on the Google clients' methods, to be a stream.
func isStream(method string) bool {
	service, name, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
	if sd, ok := d.(protoreflect.ServiceDescriptor); err == nil && ok {
		if md := sd.Methods().ByName(protoreflect.Name(name)); md != nil {
			return md.IsStreamingClient() || md.IsStreamingServer()
		}
	}
	_, _, stream, _ := cloudclients.Safety(method)
	return stream
}

// policySource says where the Policy of p comes from.
func (r *Retrier) policySource(p *loop.Plan) string {
	name := [...]string{settings.FromDefault: "", settings.FromService: settings.ServiceOf(p.Method), settings.FromMethod: p.Method}[p.From]
	if p.Hedge != nil {
		name = r.e.Settings.RetryFrom(p.Method)
	}
	switch {
	case p.Policy == nil && name == "":
		return "no default Policy: WithServiceConfig's default entry has no retryPolicy"
	case p.Policy == nil:
		return "WithoutRetryFor, or a service config entry without a retryPolicy, for " + name
	case name == "":
		return "the Retrier's Policy"
	}
	return "WithMethod or WithServiceConfig for " + name
}
