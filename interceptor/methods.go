package interceptor

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/settings"
)

// WithMethod gives the methods that name matches their own Policy. name is
// matched as in a gRPC service config: "/pkg.Service/Method" names one
// method, "/pkg.Service/" every method of a service. For a call, the method's
// own entry wins over its service's, which wins over the Policy given to New.
// The Policy changes delays, codes and attempts, never whether a method may
// be sent again after a failure that may have been applied: WithSafety
// states that (see Safety).
func WithMethod(name string, p grpcbackoff.Policy) Option {
	return func(r *Retrier) error {
		c, err := settings.Compile(p)
		if err != nil {
			err = fmt.Errorf("interceptor: WithMethod(%q): %w", name, err)
		}
		if err := errors.Join(checkMethodName(name), err); err != nil {
			return err
		}
		r.e.Settings.Entry(name).SetPolicy(&c)
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
		r.e.Settings.Entry(name).SetPolicy(nil)
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
// method is treated as a write (known as one, or not known); a method's
// own entry states that it may be sent twice, where nothing else knows. A
// reply must be a proto.Message or a pointer to be hedged.
func WithHedging(name string, h grpcbackoff.Hedging) Option {
	return func(r *Retrier) error {
		hp, err := settings.CompileHedging(h)
		if err != nil {
			err = fmt.Errorf("interceptor: WithHedging(%q): %w", name, err)
		}
		if err := errors.Join(checkMethodName(name), err); err != nil {
			return err
		}
		r.e.Settings.Entry(name).SetHedge(hp)
		return nil
	}
}

// checkMethodName accepts "/pkg.Service/Method" and "/pkg.Service/".
func checkMethodName(name string) error {
	service, method, ok := strings.Cut(strings.TrimPrefix(name, "/"), "/")
	if !strings.HasPrefix(name, "/") || !ok || service == "" || strings.Contains(method, "/") {
		return fmt.Errorf("interceptor: method name %q: want \"/pkg.Service/Method\" or \"/pkg.Service/\"", name)
	}
	return nil
}

// checkHedging returns an error naming every hedged name known not to be
// safe to send twice. New calls it once every option has been applied.
func (r *Retrier) checkHedging() error {
	var bad []string
	r.e.Settings.All(func(name string, e *settings.Entry) {
		if e.Hedge != nil {
			r.hedged = true
			if name != "" && r.e.Unsafe(name) {
				bad = append(bad, fmt.Sprintf("%q", name))
			}
		}
	})
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	return fmt.Errorf("interceptor: hedging is configured for %s, known not to be safe to send twice (not idempotent): use a retry policy there",
		strings.Join(bad, ", "))
}
