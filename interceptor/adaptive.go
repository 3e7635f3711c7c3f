package interceptor

import (
	"context"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/adaptive"
	"github.com/platformkit/grpcbackoff/internal/target"
)

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
		r.targets.Adaptive = &a
		return nil
	}
}

// criticalOption is the call option of Critical; gRPC ignores it.
type criticalOption struct{ grpc.EmptyCallOption }

var critical grpc.CallOption = &criticalOption{}

// Critical exempts one call, its retries included, from adaptive
// client-side throttling (WithAdaptiveThrottle): for calls that must reach
// the backend even while it is overloaded, such as health checks or the
// call that ends an outage. The retry budget still applies.
func Critical() grpc.CallOption { return critical }

// adaptiveFor returns the adaptive state that a call on conn with plan p
// is subject to, nil if none.
func (r *Retrier) adaptiveFor(conn *target.Conn, p *plan) *adaptive.State {
	if a := conn.Adaptive(); a != nil && !p.critical {
		return a
	}
	return nil
}

// errRejectedLocally is the status of a call that adaptive throttling did
// not send.
var errRejectedLocally = status.Error(codes.Unavailable, "grpcbackoff: call not sent: the backend has been refusing most requests")

// admit decides, before the first attempt, whether adaptive throttling lets
// the call p plans through; it returns the error for the caller if not, and
// tells the observers of the call's end. Only calls to a target with
// adaptive throttling need it.
func (r *Retrier) admit(ctx context.Context, conn *target.Conn, p *plan, cc *grpc.ClientConn) error {
	a := r.adaptiveFor(conn, p)
	if a == nil || a.Allow(time.Now(), rand.Float64()) {
		return nil
	}
	c := call{r: r, plan: *p, cc: cc, conn: conn}
	return c.end(ctx, c.fail(errRejectedLocally, grpcbackoff.ReasonRejectedLocally))
}
