package interceptor

import (
	"fmt"
	"strings"
	"unicode"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/platformkit/grpcbackoff"
)

// Safety says whether a method may be sent again after a failure that the
// server may have applied: whether it is idempotent.
//
// A method known to be NotIdempotent is not retried after a failure that
// may have been applied (UNAVAILABLE, DEADLINE_EXCEEDED, UNKNOWN, INTERNAL,
// DATA_LOSS), so that a write is never applied twice; it is still retried,
// as its Policy says, after a failure that proves the request was not
// applied: RESOURCE_EXHAUSTED, ABORTED and the other refusals, and an
// UNAVAILABLE from a connection that could not be made (the request never
// left the client). A method that is Idempotent, or that nothing is known
// about (SafetyUnknown), is retried on every code of its Policy.
//
// What is known of a method comes from, first to last (the first that
// knows wins):
//
//  1. the call's options: CallIdempotent, CallNotIdempotent, or CallPolicy
//     (a Policy given for one call states that the call may be retried);
//  2. the Retrier's options for the method itself: WithSafety, then
//     WithMethod or WithServiceConfig naming the method (not only its
//     service), which states that the method may be retried;
//  3. WithSafety for the method's service;
//  4. the method's descriptor, when its .proto is registered in
//     protoregistry.GlobalFiles (it is once the generated Go package is
//     linked in): the option idempotency_level (NO_SIDE_EFFECTS and
//     IDEMPOTENT are Idempotent), then the google.api.http binding: GET,
//     PUT, PATCH and DELETE are Idempotent; POST is NotIdempotent unless
//     its request carries a request_id (AIP-155) or it is a standard
//     Create with a user-specified ID (AIP-133: CreateInstance with an
//     instance_id field), and always for a custom method (AIP-136: a path
//     ending in ":verb", such as ":failover").
//
// WithNonIdempotentRetries turns the protection off. gaxretry.Adopt passes
// the judgement of a cloud.google.com/go client with CallIdempotent on the
// methods the client itself retries.
type Safety int8

const (
	// SafetyUnknown: nothing is known; the Policy's codes apply.
	SafetyUnknown Safety = iota
	// Idempotent: the method may be sent again after any failure.
	Idempotent
	// NotIdempotent: the method is not sent again after a failure that may
	// have been applied.
	NotIdempotent
)

func (s Safety) String() string {
	switch s {
	case SafetyUnknown:
		return "safety unknown"
	case Idempotent:
		return "idempotent"
	case NotIdempotent:
		return "not idempotent"
	}
	return fmt.Sprintf("Safety(%d)", int(s))
}

// safetyOption is the call option of CallIdempotent and CallNotIdempotent.
// gRPC ignores it (grpc.EmptyCallOption).
type safetyOption struct {
	grpc.EmptyCallOption
	s Safety
}

var (
	idempotentOption    = &safetyOption{s: Idempotent}
	notIdempotentOption = &safetyOption{s: NotIdempotent}
)

// CallIdempotent states that one call may be sent again after any failure
// of its Policy's codes, whatever is known of its method. It allocates
// nothing. For cloud.google.com/go clients, pass it with
// gax.WithGRPCOptions.
func CallIdempotent() grpc.CallOption { return idempotentOption }

// CallNotIdempotent states that one call must not be sent again after a
// failure that may have been applied (see Safety). It allocates nothing.
func CallNotIdempotent() grpc.CallOption { return notIdempotentOption }

// WithSafety states the Safety of the methods that name matches (matched as
// in WithMethod: "/pkg.Service/Method" or "/pkg.Service/"), over what their
// descriptors say. SafetyUnknown makes the Retrier ignore the descriptors
// for them.
func WithSafety(name string, s Safety) Option {
	return func(r *Retrier) error {
		if err := checkMethodName(name); err != nil {
			return err
		}
		if s < SafetyUnknown || s > NotIdempotent {
			return fmt.Errorf("interceptor: WithSafety(%q, %d): unknown Safety", name, int(s))
		}
		if r.safety == nil {
			r.safety = make(map[string]Safety)
		}
		r.safety[name] = s
		return nil
	}
}

// WithNonIdempotentRetries retries every method on every code of its
// Policy, even a method known to be NotIdempotent after a failure the server
// may have applied: a write may then be applied twice. It is the behaviour
// of versions before Safety; use it only for services whose writes are all
// idempotent in fact.
func WithNonIdempotentRetries() Option {
	return func(r *Retrier) error { r.unsafeRetries = true; return nil }
}

// knowledge is what is known of a method's Safety, and from where.
type knowledge struct {
	s      Safety
	source string
}

// safeToRetry reports whether the call may be sent again after an attempt
// failed with st, whose code its Policy retries.
func (c *call) safeToRetry(st *status.Status) bool {
	if c.r.unsafeRetries || !mayHaveApplied(st) {
		return true
	}
	return c.r.knowledgeOf(c.method, c.opts).s != NotIdempotent
}

// mayHaveApplied reports whether a failure with st may have been applied by
// the server.
func mayHaveApplied(st *status.Status) bool {
	switch st.Code() {
	case codes.Unavailable:
		return !neverSent(st.Message())
	case codes.DeadlineExceeded, codes.Unknown, codes.Internal, codes.DataLoss:
		return true
	}
	return false
}

// neverSent reports whether the message of an UNAVAILABLE status is grpc-go's
// for a call that found no connection to send on: the connection could not
// be made, or the name not resolved.
func neverSent(msg string) bool {
	return strings.Contains(msg, "Error while dialing") ||
		strings.Contains(msg, "name resolver error") ||
		strings.Contains(msg, "produced zero addresses")
}

// knowledgeOf returns what is known of method, for a call with opts.
func (r *Retrier) knowledgeOf(method string, opts []grpc.CallOption) knowledge {
	for i := len(opts) - 1; i >= 0; i-- {
		switch o := opts[i].(type) {
		case *safetyOption:
			return knowledge{o.s, "call option " + callOptionName(o.s)}
		case *callOption:
			if o.policy != nil {
				return knowledge{Idempotent, "call option CallPolicy"}
			}
		}
	}
	if k, ok := r.known.Load(method); ok {
		return k.(knowledge)
	}
	k := r.learn(method)
	r.known.Store(method, k)
	return k
}

func callOptionName(s Safety) string {
	if s == Idempotent {
		return "CallIdempotent"
	}
	return "CallNotIdempotent"
}

// learn finds what the Retrier's options and the method's descriptor say of
// method.
func (r *Retrier) learn(method string) knowledge {
	if s, ok := r.safety[method]; ok {
		return knowledge{s, "WithSafety(" + method + ")"}
	}
	if p, ok := r.methods[method]; ok && p != nil {
		return knowledge{Idempotent, "its own Policy (WithMethod or WithServiceConfig)"}
	}
	if i := strings.LastIndexByte(method, '/'); i > 0 {
		if s, ok := r.safety[method[:i+1]]; ok {
			return knowledge{s, "WithSafety(" + method[:i+1] + ")"}
		}
	}
	return describe(method)
}

// describe reads the Safety of method from its descriptor in
// protoregistry.GlobalFiles.
func describe(method string) knowledge {
	service, name, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		return knowledge{SafetyUnknown, "no descriptor registered for " + service}
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return knowledge{SafetyUnknown, service + " is not a service"}
	}
	md := sd.Methods().ByName(protoreflect.Name(name))
	if md == nil {
		return knowledge{SafetyUnknown, "no method " + name + " in service " + service}
	}
	opts, _ := md.Options().(*descriptorpb.MethodOptions)
	switch lvl := opts.GetIdempotencyLevel(); lvl {
	case descriptorpb.MethodOptions_NO_SIDE_EFFECTS, descriptorpb.MethodOptions_IDEMPOTENT:
		return knowledge{Idempotent, "idempotency_level " + lvl.String()}
	}
	verb, path, ok := httpBinding(opts)
	if !ok {
		return knowledge{SafetyUnknown, "neither idempotency_level nor google.api.http"}
	}
	binding := "google.api.http " + strings.ToUpper(verb) + " " + path
	switch verb {
	case "get", "put", "patch", "delete":
		return knowledge{Idempotent, binding}
	case "post":
	default:
		return knowledge{SafetyUnknown, binding}
	}
	in := md.Input().Fields()
	if f := in.ByName("request_id"); f != nil && f.Kind() == protoreflect.StringKind {
		return knowledge{Idempotent, binding + " with a request_id (AIP-155)"}
	}
	if v := customVerb(path); v != "" {
		return knowledge{NotIdempotent, binding + ": custom method :" + v + " (AIP-136)"}
	}
	if resource, ok := strings.CutPrefix(name, "Create"); ok && resource != "" {
		id := snake(resource) + "_id"
		if f := in.ByName(protoreflect.Name(id)); f != nil && f.Kind() == protoreflect.StringKind {
			return knowledge{Idempotent, binding + ": Create with a user-specified " + id + " (AIP-133)"}
		}
	}
	return knowledge{NotIdempotent, binding + " without a request_id or user-specified ID"}
}

// httpBinding returns the verb ("get", "post", ..., or a custom kind) and the
// path of the google.api.http option in opts, read through protoreflect so
// that this module needs no import of the annotations package: the option is
// known when some linked package registered the extension.
func httpBinding(opts *descriptorpb.MethodOptions) (verb, path string, ok bool) {
	if opts == nil {
		return "", "", false
	}
	xt, err := protoregistry.GlobalTypes.FindExtensionByName("google.api.http")
	if err != nil || !proto.HasExtension(opts, xt) {
		return "", "", false
	}
	rule := opts.ProtoReflect().Get(xt.TypeDescriptor()).Message()
	fields := rule.Descriptor().Fields()
	for _, v := range []protoreflect.Name{"get", "put", "post", "delete", "patch"} {
		if f := fields.ByName(v); f != nil && rule.Has(f) {
			return string(v), rule.Get(f).String(), true
		}
	}
	if f := fields.ByName("custom"); f != nil && rule.Has(f) {
		c := rule.Get(f).Message()
		cf := c.Descriptor().Fields()
		if k, p := cf.ByName("kind"), cf.ByName("path"); k != nil && p != nil {
			return strings.ToLower(c.Get(k).String()), c.Get(p).String(), true
		}
	}
	return "", "", false
}

// customVerb returns the verb of an HTTP path that ends in ":verb" after its
// last segment or variable ("/v1/{name=projects/*/instances/*}:failover"),
// or "".
func customVerb(path string) string {
	i := strings.LastIndexByte(path, ':')
	if i < 0 || strings.ContainsAny(path[i:], "/}") {
		return ""
	}
	return path[i+1:]
}

// snake turns "InstanceConfig" into "instance_config".
func snake(s string) string {
	var b strings.Builder
	for i, c := range s {
		if unicode.IsUpper(c) {
			if i > 0 {
				b.WriteByte('_')
			}
			c = unicode.ToLower(c)
		}
		b.WriteRune(c)
	}
	return b.String()
}

// Decision is the effective retry policy of one method, as Explain gives it.
type Decision struct {
	// Method is the full method name, "/pkg.Service/Method".
	Method string
	// Policy is the Policy that applies to the method's calls, or nil when
	// they are not retried at all (WithoutRetryFor, or a service config
	// entry without a retryPolicy).
	Policy *grpcbackoff.Policy
	// PolicySource says where Policy comes from.
	PolicySource string
	// Safety is what is known of the method (see Safety), and Source where
	// it comes from.
	Safety Safety
	Source string
	// Codes are the codes retried after a failure that may have been
	// applied: Policy.Codes, less those (see Safety) for a method that is
	// NotIdempotent unless WithNonIdempotentRetries is set.
	Codes []codes.Code
}

// String describes d in one line, e.g.
//
//	/google.cloud.redis.v1.CloudRedis/FailoverInstance: up to 5 attempts on RESOURCE_EXHAUSTED (UNAVAILABLE only when the connection could not be made); not idempotent: google.api.http POST ...
func (d Decision) String() string {
	var b strings.Builder
	b.WriteString(d.Method)
	b.WriteString(": ")
	if d.Policy == nil {
		fmt.Fprintf(&b, "never retried (%s)", d.PolicySource)
		return b.String()
	}
	fmt.Fprintf(&b, "up to %d attempts on %s", d.Policy.MaxAttempts, codeList(d.Codes))
	if len(d.Codes) < len(d.Policy.Codes) && d.Policy.Retryable(codes.Unavailable) {
		b.WriteString(" (UNAVAILABLE only when the connection could not be made)")
	}
	fmt.Fprintf(&b, " [%s]; %s: %s", d.PolicySource, d.Safety, d.Source)
	return b.String()
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

// Explain returns the effective retry policy of calls of fullMethod
// ("/pkg.Service/Method") made without call options, and why: which Policy
// applies and where from, what is known of the method's Safety and where
// from, and so which codes are retried.
func (r *Retrier) Explain(fullMethod string) Decision {
	d := Decision{Method: fullMethod}
	p, src := r.policy, "the Retrier's Policy"
	if mp, ok := r.methods[fullMethod]; ok {
		p, src = mp, "WithMethod or WithServiceConfig for "+fullMethod
	} else if i := strings.LastIndexByte(fullMethod, '/'); i > 0 {
		if sp, ok := r.methods[fullMethod[:i+1]]; ok {
			p, src = sp, "WithMethod or WithServiceConfig for "+fullMethod[:i+1]
		}
	}
	d.PolicySource = src
	if p == nil {
		d.PolicySource = "no default Policy: WithServiceConfig's default entry has no retryPolicy"
		if name, ok := strings.CutPrefix(src, "WithMethod or WithServiceConfig for "); ok {
			d.PolicySource = "WithoutRetryFor, or a service config entry without a retryPolicy, for " + name
		}
		return d
	}
	pol := p.Policy
	pol.Codes = append([]codes.Code(nil), p.Codes...)
	d.Policy = &pol
	k := r.knowledgeOf(fullMethod, nil)
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

// notIdempotent reports whether name, a method "/pkg.Service/Method" or a
// service "/pkg.Service/", is known not to be safe to send twice: for a
// service, whether any of its registered methods is. Hedging uses it (see
// WithHedging).
func (r *Retrier) notIdempotent(name string) bool {
	if !strings.HasSuffix(name, "/") {
		return r.knowledgeOf(name, nil).s == NotIdempotent
	}
	if s, ok := r.safety[name]; ok {
		return s == NotIdempotent
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(strings.Trim(name, "/")))
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if err != nil || !ok {
		return false
	}
	for i := range sd.Methods().Len() {
		if r.notIdempotent(name + string(sd.Methods().Get(i).Name())) {
			return true
		}
	}
	return false
}
