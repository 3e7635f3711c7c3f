package interceptor

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/platformkit/grpcbackoff"
)

// entry is what the Retrier's options say of one name: a method
// "/pkg.Service/Method", a service "/pkg.Service/", or the default ("").
// A name has a retry Policy, a Hedging, or no retry; a service config entry
// may also bound its calls with a timeout.
type entry struct {
	set     bool          // a retry setting was given: policy, hedge, or no retry
	policy  *compiled     // with set and hedge nil: the Policy; nil: no retry
	hedge   *hedgePolicy  // with set: hedged instead
	timeout time.Duration // bound on each call of the name; 0: none
	config  bool          // from WithServiceConfig: a Policy of its states the name safe to retry
}

// WithMethod gives the methods that name matches their own Policy. name is
// matched as in a gRPC service config: "/pkg.Service/Method" names one
// method, "/pkg.Service/" every method of a service. For a call, the method's
// own entry wins over its service's, which wins over the Policy given to New.
// The Policy changes delays, codes and attempts, never whether a method may
// be sent again after a failure that may have been applied: WithSafety
// states that (see Safety).
func WithMethod(name string, p grpcbackoff.Policy) Option {
	return func(r *Retrier) error {
		c, err := compile(p)
		if err != nil {
			err = fmt.Errorf("interceptor: WithMethod(%q): %w", name, err)
		}
		if err := errors.Join(checkMethodName(name), err); err != nil {
			return err
		}
		r.entry(name).setPolicy(&c)
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
		r.entry(name).setPolicy(nil)
		return nil
	}
}

// WithHedging hedges the unary calls of the methods that name matches
// (matched as in WithMethod), as h says: the first attempt is sent at once,
// another every h.Delay while none has answered, up to h.MaxAttempts; the
// first response wins and the others are canceled. Hedges answer slowness;
// failures answer to the retry rules of the Policy the method would have
// without the hedging (its own or its service's, else New's): a code it
// retries is retried after its backoff, lengthened by pushback or RetryInfo,
// as a new round of hedges, and its MaxAttempts bounds every attempt of the
// call. Any other code ends the call, unless it is in h.NonFatalCodes: then
// the attempts in flight go on. Each attempt is bounded by AttemptTimeout;
// CallMaxAttempts(n) makes n the hedges of a round and the call's attempts.
//
// Once an attempt's response headers arrive, the call commits to it: no
// further attempt is sent, the others are canceled, and its reply, header,
// trailer and peer are the caller's (DialOptions sees headers as they
// arrive; Unary alone, when the attempt ends). A name has a retry Policy or
// a Hedging, the later option winning. Streams of a hedged name are retried
// by its Policy. CallPolicy and NoRetry turn hedging off for one call. New
// refuses hedging for a name known not to be idempotent (see Safety); a
// call hedged by its service's or the default entry is not hedged if its
// method is. A reply must be a proto.Message or a pointer to be hedged.
func WithHedging(name string, h grpcbackoff.Hedging) Option {
	return func(r *Retrier) error {
		hp, err := compileHedging(h)
		if err != nil {
			err = fmt.Errorf("interceptor: WithHedging(%q): %w", name, err)
		}
		if err := errors.Join(checkMethodName(name), err); err != nil {
			return err
		}
		r.entry(name).setHedge(hp)
		return nil
	}
}

// entry returns the entry of name, made on first use. Only options call it,
// before New returns.
func (r *Retrier) entry(name string) *entry {
	if name == "" {
		return &r.base
	}
	if r.entries == nil {
		r.entries = make(map[string]*entry)
	}
	e := r.entries[name]
	if e == nil {
		e = &entry{}
		r.entries[name] = e
	}
	return e
}

func (e *entry) setPolicy(p *compiled) { e.set, e.policy, e.hedge, e.config = true, p, nil, false }

func (e *entry) setHedge(h *hedgePolicy) { e.set, e.policy, e.hedge, e.config = true, nil, h, false }

// checkMethodName accepts "/pkg.Service/Method" and "/pkg.Service/".
func checkMethodName(name string) error {
	service, method, ok := strings.Cut(strings.TrimPrefix(name, "/"), "/")
	if !strings.HasPrefix(name, "/") || !ok || service == "" || strings.Contains(method, "/") {
		return fmt.Errorf("interceptor: method name %q: want \"/pkg.Service/Method\" or \"/pkg.Service/\"", name)
	}
	return nil
}

// serviceOf returns the service name "/pkg.Service/" of a method
// "/pkg.Service/Method", or "" if method has no service part.
func serviceOf(method string) string {
	if i := strings.LastIndexByte(method, '/'); i > 0 {
		return method[:i+1]
	}
	return ""
}

// resolve fills in the settings of p.method from the entries that apply:
// its own, its service's, then the default, the first that has a setting
// deciding; a hedged method's failures answer to the Policy of the next
// entry that has one. It allocates nothing; without per-method options it
// reads no map.
func (r *Retrier) resolve(p *plan) {
	if r.entries == nil {
		p.policy, p.hedge, p.timeout, p.from = r.base.policy, r.base.hedge, r.base.timeout, fromDefault
		return
	}
	decided := false
	take := func(e *entry, l level) (done bool) {
		if e == nil || !e.set {
			return false
		}
		if !decided {
			decided = true
			p.policy, p.hedge, p.timeout, p.from = e.policy, e.hedge, e.timeout, l
			return e.hedge == nil
		}
		if e.hedge == nil { // the Policy a hedged method's failures answer to
			p.policy = e.policy
			return true
		}
		return false
	}
	if take(r.entries[p.method], fromMethod) {
		return
	}
	if svc := serviceOf(p.method); svc != "" && take(r.entries[svc], fromService) {
		return
	}
	take(&r.base, fromDefault)
}
