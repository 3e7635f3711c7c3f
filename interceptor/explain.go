package interceptor

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/attempt"
	"github.com/platformkit/grpcbackoff/internal/cloudclients"
	"github.com/platformkit/grpcbackoff/internal/connpolicy"
	"github.com/platformkit/grpcbackoff/internal/loop"
	"github.com/platformkit/grpcbackoff/internal/safety"
	"github.com/platformkit/grpcbackoff/internal/settings"
	"github.com/platformkit/grpcbackoff/internal/targets"
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
	// NotIdempotent unless WithNonIdempotentRetries is set, and less those
	// grpc-go's own retry takes (GRPCRetries). Of those left
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
	// GRPCRetries says, of a ClientConn where XDSDialOptions keeps
	// grpc-go's own retry on (ExplainOn), which failures it takes first,
	// which the Retrier does not retry again: an xDS route's retry_policy,
	// known only when a call is made, or the codes of the retryPolicy the
	// connection's service config gives the method. Empty elsewhere.
	GRPCRetries string
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
	if d.GRPCRetries != "" {
		fmt.Fprintf(b, "; grpc-go's own retry: %s", d.GRPCRetries)
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
// codes are retried. On a ClientConn whose control plane gives the method
// a retry policy, that policy may apply instead: ExplainOn says.
func (r *Retrier) Explain(fullMethod string) Decision {
	var p loop.Plan
	r.e.PlanOf(&p, fullMethod, nil)
	return r.explain(&p, connView{})
}

// ExplainOn returns what the calls of fullMethod made without call options
// on cc do, as Explain does, with what cc's control plane decides of them:
// the retryPolicy that cc's service config (its resolver's) gives the
// method, read now as a call reads it at its first failure (PolicySource
// names it, Safety what it states), or its refusal; where XDSDialOptions
// keeps grpc-go's own retry on, the failures that retry takes first
// (GRPCRetries), an xDS route's known only when a call is made; on an xDS
// ClientConn under DialOptions, that a route's policy is not applied. Of a
// ClientConn that no call through r went on yet, it takes an xDS target
// as dialed with XDSDialOptions and any other with DialOptions; before its
// resolver answered (a new ClientConn is idle until its first call), its
// service config is not known: as without one.
func (r *Retrier) ExplainOn(cc *grpc.ClientConn, fullMethod string) Decision {
	conn := r.e.Targets.Registered(cc)
	if conn == nil {
		conn = targets.Detached(cc, connpolicy.XDS(cc.CanonicalTarget()))
	}
	var p loop.Plan
	v := connView{conn: conn}
	v.timeout, v.err = r.e.PlanOn(&p, conn, fullMethod, nil)
	return r.explain(&p, v)
}

// connView is what ExplainOn read of a ClientConn: its state (nil for
// Explain), the timeout and the error of its service config's policy for
// the method, read as a call's first failure reads it.
type connView struct {
	conn    *targets.Conn
	timeout time.Duration
	err     error
}

// explain puts the plan p into words, of the ClientConn v if any.
func (r *Retrier) explain(p *loop.Plan, v connView) Decision {
	fullMethod := p.Method
	d := Decision{Method: fullMethod, Timeout: p.Timeout, MaxAttempts: p.Max, PolicySource: r.policySource(p, v),
		SharedBudget: r.e.Targets.Shared != nil && r.e.Targets.Throttle != nil, Budget: r.e.Targets.Throttle != nil, Pushback: !r.e.NoPushback}
	if v.timeout > 0 && (d.Timeout == 0 || v.timeout < d.Timeout) {
		d.Timeout = v.timeout
	}
	var grpcs []codes.Code // the codes grpc-go's own retry takes
	if p.Conn == loop.ConnGRPC {
		d.GRPCRetries, grpcs = grpcRetries(p, v.conn)
	}
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
	k := r.e.SafetyOf(p)
	d.Safety, d.Source = Safety(k.Level), k.Source+r.hedgeSkipped(p)
	// Under WithoutPushback a unary call that is not hedged reads no
	// trailer, so no failure is known to be the server's own status: a
	// write is resent after none.
	blind := r.e.NoPushback && !isStream(fullMethod) && p.Hedge == nil
	for _, c := range pol.Codes {
		if k.Level == safety.NotIdempotent && !r.e.UnsafeRetries && (attempt.CodeMayHaveApplied(c) || blind) || slices.Contains(grpcs, c) {
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

// grpcRetries says which failures of the calls p plans grpc-go's own retry
// takes on the ClientConn whose state is conn, where it is on, and returns
// their codes where they are known before a call.
func grpcRetries(p *loop.Plan, conn *targets.Conn) (string, []codes.Code) {
	if conn.XDS {
		return "the failures of a call that its xDS route's retry_policy retries, if the route has one: known only when the call is made, by grpc-go's attempts of it; a call grpc-go attempted more than once is not retried here", nil
	}
	cp, err := conn.Policies.Lookup(p.Method)
	switch {
	case err != nil:
		return "the codes of the retryPolicy the connection's service config gives " + p.Method + ", as grpc-go reads it (" + err.Error() + ")", nil
	case cp.Retry == nil:
		return "", nil
	}
	return fmt.Sprintf("%s, up to %d attempts, as the connection's service config's retryPolicy for %s says (its retryThrottling too): not retried here",
		codeList(cp.Retry.Codes), cp.Retry.MaxAttempts, entryName(p.Method, cp.From)), cp.Retry.Codes
}

// entryName is the name of the entry of level l that applies to method:
// the method, its service "/pkg.Service/", or "" for the default.
func entryName(method string, l settings.Level) string {
	return [...]string{settings.FromDefault: "", settings.FromService: settings.ServiceOf(method), settings.FromMethod: method}[l]
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

// hedgeSkipped says, of a method that a hedging entry of its service or
// the default one would hedge, that the plan p does not hedge it because it
// is not established safe to send twice; "" otherwise.
func (r *Retrier) hedgeSkipped(p *loop.Plan) string {
	if p.Hedge != nil || p.Conn == loop.ConnGRPC || p.From == settings.FromMethod || r.e.Settings.Resolve(p.Method).Hedge == nil || !r.e.Unsafe(p.Method) {
		return ""
	}
	return "; not hedged by the hedging entry of " + cmp.Or(entryName(p.Method, p.From), "every method") + ", which skips a method treated as a write"
}

// policySource says where the Policy of p comes from, on the ClientConn v
// if any. Where the entry deciding the method's settings hedges it, its
// failures follow the Policy of the next entry that does not (RetryFrom),
// whether the plan kept the hedge or dropped it (see hedgeSkipped).
func (r *Retrier) policySource(p *loop.Plan, v connView) string {
	name := entryName(p.Method, p.From)
	if p.Hedge != nil || r.e.Settings.Resolve(p.Method).Hedge != nil {
		name = r.e.Settings.RetryFrom(p.Method)
	}
	var src string
	switch {
	case p.FromConn:
		if name == "" {
			name = "its default entry"
		}
		return "the connection's service config from its resolver (or grpc.WithDefaultServiceConfig), its retryPolicy for " + name + ", read at each call's first failure"
	case p.Policy == nil && name == "":
		src = "no default Policy: WithServiceConfig's default entry has no retryPolicy"
	case p.Policy == nil:
		src = "WithoutRetryFor, or a service config entry without a retryPolicy, for " + name
	case name == "":
		src = "the Retrier's Policy"
	default:
		src = "WithMethod or WithServiceConfig for " + name
	}
	switch {
	case v.err != nil:
		src += "; the connection's service config gives the method a retryPolicy the Retrier cannot carry out: " + v.err.Error()
	case v.conn != nil && v.conn.XDS && p.Conn != loop.ConnGRPC:
		src += "; an xDS route's retry_policy, if the call's route has one, is not applied: grpc-go's own retry is off under DialOptions (XDSDialOptions applies it)"
	}
	return src
}
