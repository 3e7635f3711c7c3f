package interceptor

import (
	"fmt"
	"strings"

	"google.golang.org/grpc"

	"github.com/platformkit/grpcbackoff"
)

// callOption changes the Policy of one call. gRPC itself ignores it
// (grpc.EmptyCallOption), so a call carrying it works the same without our
// interceptors. It is used by pointer, so that finding it among a call's
// options copies nothing.
type callOption struct {
	grpc.EmptyCallOption
	noRetry     bool
	maxAttempts int       // > 0: replaces Policy.MaxAttempts
	policy      *compiled // replaces the Policy
	err         error     // the option was built from bad input
}

// NoRetry makes one call a single attempt, whatever its Policy says: for
// example a mutation that is not idempotent.
//
//	_, err := client.Increment(ctx, req, interceptor.NoRetry())
//
// For cloud.google.com/go clients, pass it with gax.WithGRPCOptions.
func NoRetry() grpc.CallOption {
	return &callOption{noRetry: true}
}

// CallMaxAttempts replaces, for one call, the MaxAttempts of the Policy that
// applies to it. n must be at least 1; otherwise the call fails at once with
// INVALID_ARGUMENT naming n, without reaching the server.
func CallMaxAttempts(n int) grpc.CallOption {
	if n < 1 {
		return &callOption{err: fmt.Errorf("interceptor: CallMaxAttempts(%d): MaxAttempts must be at least 1", n)}
	}
	return &callOption{maxAttempts: n}
}

// CallPolicy replaces, for one call, the Policy that applies to it. An
// invalid p makes the call fail at once with INVALID_ARGUMENT and Validate's
// message, without reaching the server.
func CallPolicy(p grpcbackoff.Policy) grpc.CallOption {
	c, err := compile(p)
	if err != nil {
		return &callOption{err: fmt.Errorf("interceptor: CallPolicy: %w", err)}
	}
	return &callOption{policy: &c}
}

// WithMethod gives the methods that name matches their own Policy. name is
// matched as in a gRPC service config: "/pkg.Service/Method" names one
// method, "/pkg.Service/" every method of a service. For a call, the method's
// own entry wins over its service's, which wins over the Policy given to New.
func WithMethod(name string, p grpcbackoff.Policy) Option {
	return func(r *Retrier) error {
		if err := checkMethodName(name); err != nil {
			return err
		}
		c, err := compile(p)
		if err != nil {
			return fmt.Errorf("interceptor: WithMethod(%q): %w", name, err)
		}
		r.setMethod(name, &c)
		return nil
	}
}

// WithoutRetryFor turns retrying off for the methods that name matches
// (matched as in WithMethod): for example a mutation that is not idempotent.
func WithoutRetryFor(name string) Option {
	return func(r *Retrier) error {
		if err := checkMethodName(name); err != nil {
			return err
		}
		r.setMethod(name, nil)
		return nil
	}
}

func (r *Retrier) setMethod(name string, p *compiled) {
	if r.methods == nil {
		r.methods = make(map[string]*compiled)
	}
	r.methods[name] = p
	r.unsetHedging(name)
}

// checkMethodName accepts "/pkg.Service/Method" and "/pkg.Service/".
func checkMethodName(name string) error {
	service, method, ok := strings.Cut(strings.TrimPrefix(name, "/"), "/")
	if !strings.HasPrefix(name, "/") || !ok || service == "" || strings.Contains(method, "/") {
		return fmt.Errorf("interceptor: method name %q: want \"/pkg.Service/Method\" or \"/pkg.Service/\"", name)
	}
	return nil
}

// policyFor returns the Policy for a call of method with opts (nil means no
// retry) and the call's MaxAttempts.
func (r *Retrier) policyFor(method string, opts []grpc.CallOption) (p *compiled, maxAttempts int, err error) {
	p = r.policy
	if r.methods != nil {
		if mp, ok := r.methods[method]; ok {
			p = mp
		} else if i := strings.LastIndexByte(method, '/'); i > 0 {
			if sp, ok := r.methods[method[:i+1]]; ok {
				p = sp
			}
		}
	}
	for _, o := range opts {
		co, ok := o.(*callOption)
		if !ok {
			continue
		}
		switch {
		case co.err != nil:
			return nil, 0, co.err
		case co.noRetry:
			p, maxAttempts = nil, 0
		case co.policy != nil:
			p, maxAttempts = co.policy, 0
		case co.maxAttempts > 0:
			maxAttempts = co.maxAttempts
		}
	}
	if p == nil {
		return nil, 0, nil
	}
	if maxAttempts == 0 {
		maxAttempts = p.MaxAttempts
	}
	return p, maxAttempts, nil
}
