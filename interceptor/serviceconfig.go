package interceptor

import (
	"errors"
	"fmt"
	"time"

	"github.com/platformkit/grpcbackoff/internal/settings"
	"github.com/platformkit/grpcbackoff/serviceconfig"
)

// WithServiceConfig applies the retry configuration of a gRPC service
// config, as serviceconfig.Parse reads it, so that a client moving from
// grpc-go's built-in retry keeps its configuration. Each entry's names get
// its Policy (as WithMethod gives one), its Hedging (as WithHedging, but
// its MaxAttempts bounds every attempt of the call, as in grpc-go), or no
// retry (as WithoutRetryFor) when it has neither; its Timeout bounds each
// call of its names, as grpc-go bounds it. As in grpc-go, a method an
// entry's retryPolicy names is taken as safe to send again (Idempotent):
// the service config's author chose to retry it. The default entry (name "")
// replaces the Policy given to New; without one, methods no entry names keep
// that Policy, where grpc-go does not retry them (add {"name": [{}]} to do
// as grpc-go). A Throttle replaces the retry throttle, as WithThrottle does;
// without one the Retrier keeps its own, where grpc-go has none.
//
// Options apply in order: a later WithMethod, WithoutRetryFor or
// WithThrottle for the same name wins over the service config, which wins
// over earlier ones. grpc-go's own retry must stay off on the connection
// (DialOptions turns it off; with Unary or Stream alone, add
// grpc.WithDisableRetry), or attempts multiply.
//
// It returns an error naming the entry for a name that is malformed or
// listed twice, an invalid Policy or an invalid Throttle: which only a
// Config built by hand can have.
func WithServiceConfig(sc serviceconfig.Config) Option {
	return func(r *Retrier) error {
		type named struct {
			name    string
			p       *settings.Policy  // nil: no retry
			h       *settings.Hedging // non-nil: hedged instead
			timeout time.Duration
		}
		var (
			errs    []error
			entries []named
			seen    = make(map[string]int)
		)
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("interceptor: WithServiceConfig: "+format, args...))
		}
		for i, m := range sc.Methods {
			var c *settings.Policy
			if m.Policy != nil {
				cp, err := settings.Compile(*m.Policy)
				if err != nil {
					bad("Methods[%d] %q: %w", i, m.Names, err)
					continue
				}
				c = &cp
			}
			var h *settings.Hedging
			if m.Hedging != nil {
				if m.Policy != nil {
					bad("Methods[%d] %q has both a Policy and a Hedging", i, m.Names)
					continue
				}
				hp, err := settings.CompileHedging(*m.Hedging)
				if err != nil {
					bad("Methods[%d] %q: %w", i, m.Names, err)
					continue
				}
				hp.Config = true
				h = hp
			}
			for j, name := range m.Names {
				if prev, dup := seen[name]; dup {
					bad("Methods[%d].Names[%d] %q is also in Methods[%d]", i, j, name, prev)
					continue
				}
				seen[name] = i
				if name != "" {
					if err := checkMethodName(name); err != nil {
						bad("Methods[%d].Names[%d]: %w", i, j, err)
						continue
					}
				}
				entries = append(entries, named{name, c, h, m.Timeout})
			}
		}
		if sc.Throttle != nil {
			if err := sc.Throttle.Validate(); err != nil {
				bad("Throttle: %w", err)
			}
		}
		if len(errs) > 0 {
			return errors.Join(errs...)
		}

		for _, e := range entries {
			en := r.e.Settings.Entry(e.name)
			if e.h != nil {
				en.SetHedge(e.h)
			} else {
				en.SetPolicy(e.p)
			}
			en.Timeout, en.Config = e.timeout, true
		}
		if sc.Throttle != nil {
			t := *sc.Throttle
			r.e.Targets.Throttle = &t
		}
		return nil
	}
}
