package interceptor

import "github.com/platformkit/grpcbackoff"

// WithAdaptiveThrottle turns on adaptive client-side throttling
// (grpcbackoff.AdaptiveThrottle) for every call through the Retrier, each
// backend target with a state of its own: once the backend has refused, or
// failed to answer, more than 1/K of the recent requests, calls are
// rejected locally with the probability AdaptiveThrottle gives.
//
// A call rejected locally fails at once with UNAVAILABLE, as a
// *grpcbackoff.Error with Attempts 0 and ReasonRejectedLocally, and is not
// retried. Retries and hedges are asked too: a rejected retry ends the call
// with its last error and ReasonRejectedLocally; a rejected hedge is not
// sent. Calls with the Critical option are exempt, though counted.
//
// Each attempt counts when it ends, as grpcbackoff.AdaptiveThrottle says:
// an attempt ended by a deadline before any answer (the caller's, a
// service config's timeout, or AttemptTimeout) is not accepted, even from a
// backend merely slower than the deadline, as the SRE book's client counts
// it; one the caller canceled, or its ClientConn's closing ended, does not
// count. A stream's attempt counts when its first message or its end
// arrives, or when it fails before that. It is off unless this option is
// given.
func WithAdaptiveThrottle(a grpcbackoff.AdaptiveThrottle) Option {
	return func(r *Retrier) error {
		if err := a.Validate(); err != nil {
			return err
		}
		r.e.Targets.Adaptive = &a
		return nil
	}
}
