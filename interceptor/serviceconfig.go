package interceptor

import (
	"errors"
	"fmt"

	"github.com/platformkit/grpcbackoff/serviceconfig"
)

// WithServiceConfig applies the retry configuration of a gRPC service config,
// as read by serviceconfig.Parse, so that a client moving from
// grpc-go's built-in retry keeps its configuration:
//
//	sc, err := serviceconfig.Parse(doc)
//	...
//	r, err := interceptor.New(grpcbackoff.DefaultPolicy(), interceptor.WithServiceConfig(sc))
//
// Each entry's names get its Policy, as WithMethod would give them, its
// Hedging, as WithHedging would, or no retry, as WithoutRetryFor would,
// when the entry has neither. A default entry with a Hedging hedges every
// method that no other entry names. The
// default entry (name "") replaces the Policy given to New; without one,
// methods that no entry names keep that Policy, whereas grpc-go does not
// retry them: add a default entry without a retryPolicy ({"name": [{}]})
// to keep grpc-go's behaviour exactly. A Throttle replaces the retry
// throttle, as WithThrottle would; without one, the Retrier keeps its
// throttle (by default grpcbackoff.DefaultThrottle), whereas grpc-go has
// none.
//
// Options apply in order: a later WithMethod, WithoutRetryFor or
// WithThrottle for the same name or throttle wins over the service config,
// and the service config wins over earlier ones.
//
// grpc-go's own retry must stay off on the same connection, or every attempt
// of ours becomes up to maxAttempts of grpc-go's when the service config also
// reaches grpc-go (from the resolver or grpc.WithDefaultServiceConfig):
// DialOptions turns it off (grpc.WithDisableRetry); with Unary or Stream
// alone, add grpc.WithDisableRetry yourself. WithServiceConfig returns an error naming the
// entry for a name that is malformed or listed twice, an invalid Policy or
// an invalid Throttle, which can only happen for a ServiceConfig built by
// hand.
func WithServiceConfig(sc serviceconfig.Config) Option {
	return func(r *Retrier) error {
		type named struct {
			name string
			p    *compiled    // nil: no retry
			h    *hedgePolicy // non-nil: hedged instead
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
			var c *compiled
			if m.Policy != nil {
				cp, err := compile(*m.Policy)
				if err != nil {
					bad("Methods[%d] %q: %w", i, m.Names, err)
					continue
				}
				c = &cp
			}
			var h *hedgePolicy
			if m.Hedging != nil {
				if m.Policy != nil {
					bad("Methods[%d] %q has both a Policy and a Hedging", i, m.Names)
					continue
				}
				hp, err := compileHedging(*m.Hedging)
				if err != nil {
					bad("Methods[%d] %q: %w", i, m.Names, err)
					continue
				}
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
				entries = append(entries, named{name, c, h})
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
			if e.h != nil {
				r.entry(e.name).setHedge(e.h)
			} else {
				r.entry(e.name).setPolicy(e.p)
			}
		}
		if sc.Throttle != nil {
			t := *sc.Throttle
			r.throttle = &t
		}
		return nil
	}
}
