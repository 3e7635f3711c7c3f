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
)

// WithAdaptiveThrottle turns on adaptive client-side throttling
// (grpcbackoff.AdaptiveThrottle) for every call through the Retrier: once
// the backend has refused, or failed to answer, more than 1/K of the recent
// requests, calls are rejected locally with the probability the
// AdaptiveThrottle describes, before reaching the network.
//
// A call rejected locally fails at once with UNAVAILABLE, as a
// *grpcbackoff.Error with Attempts 0 and Reason
// grpcbackoff.ReasonRejectedLocally, and is never retried. Retries are
// subject to it too: each retry is one more request to an overloaded
// backend, so a retry is asked of the adaptive throttle (then of the retry
// budget) and, if rejected, the call ends with its last error and
// ReasonRejectedLocally. Hedges are asked too, and a rejected one is not
// sent. A call made with the Critical option is exempt,
// its retries included, though its outcomes are counted.
//
// What is counted: each attempt sent counts when it ends, as accepted or not
// by its code (accepted unless UNAVAILABLE, RESOURCE_EXHAUSTED,
// DEADLINE_EXCEEDED or CANCELED); each rejection counts as a request
// not accepted. An attempt ended by the caller (its cancellation or its
// deadline) is not counted at all: the backend refused nothing. A stream's attempt counts as accepted when its first
// response message (or its end, io.EOF) arrives, and as not accepted when
// it fails before that; a stream committed otherwise (headers, Context, a
// full replay buffer) is not counted.
//
// Each backend target has a state of its own, as it has a retry budget of
// its own (see Retrier): a backend that refuses work is throttled, another
// one reached through the same options is not. Off by default: measured with cmd/fleetsim, it
// rejects calls of clients that make few calls, and keeps rejecting for
// minutes after a long outage, with no gain over the retry budget
// (cmd/fleetsim/README.md has the figures).
func WithAdaptiveThrottle(a grpcbackoff.AdaptiveThrottle) Option {
	return func(r *Retrier) error {
		if err := a.Validate(); err != nil {
			return err
		}
		r.adaptive = &a
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
func (r *Retrier) adaptiveFor(conn *connState, p *plan) *adaptive.State {
	if a := conn.t.adaptive; a != nil && !p.critical {
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
func (r *Retrier) admit(ctx context.Context, conn *connState, p *plan, cc *grpc.ClientConn) error {
	a := r.adaptiveFor(conn, p)
	if a == nil || a.Allow(time.Now(), rand.Float64()) {
		return nil
	}
	c := call{r: r, plan: *p, cc: cc, conn: conn, reason: grpcbackoff.ReasonRejectedLocally}
	return c.end(ctx, &grpcbackoff.Error{Err: errRejectedLocally, Reason: grpcbackoff.ReasonRejectedLocally})
}

// record counts, for the adaptive throttling of cs's target, an attempt of
// a call with context ctx that ended with err. An attempt the caller ended
// (its cancellation, or its deadline) is not counted: the backend refused
// nothing.
func (cs *connState) record(ctx context.Context, err error) {
	if a := cs.t.adaptive; a != nil && ctx.Err() == nil {
		a.Record(time.Now(), adaptive.Accepted(status.Code(err)))
	}
}
