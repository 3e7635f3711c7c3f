package interceptor

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/platformkit/grpcbackoff"
)

// WithThrottle replaces the default retry throttle (grpcbackoff.DefaultThrottle).
// Each backend target gets a budget of its own for t (see Retrier).
func WithThrottle(t grpcbackoff.Throttle) Option {
	return func(r *Retrier) error {
		if err := t.Validate(); err != nil {
			return err
		}
		r.e.Targets.Throttle = &t
		return nil
	}
}

// WithoutThrottle turns the retry throttle off: every call may retry up to
// its Policy whatever the others do. Use it only where a storm is impossible.
func WithoutThrottle() Option {
	return func(r *Retrier) error { r.e.Targets.Throttle = nil; return nil }
}

// TargetState is the retry state of one backend target, as States reports
// it.
type TargetState struct {
	// Target is the canonical target of the ClientConns that share this
	// state (cc.CanonicalTarget(), e.g. "dns:///redis.googleapis.com:443"),
	// or "" for calls made without a ClientConn.
	Target string
	// Retries is the number of retries the target's budget could pay for
	// now; +Inf when the Retrier has no throttle (WithoutThrottle).
	Retries float64
	// RejectProbability is the probability, from 0 to 1, that adaptive
	// throttling rejects a new call to the target now; 0 without it
	// (WithAdaptiveThrottle).
	RejectProbability float64
	// Shared is the state of the target's budget when it is shared with
	// other processes (WithSharedBudget); nil otherwise.
	Shared *SharedBudgetState
}

// States returns the retry state of every target r keeps a budget for (the
// targets of its ClientConns, open or closed, but those dropped for
// disuse), sorted by target, and of calls made without a ClientConn
// (Target "") if there were any. It is meant for metrics gauges; each call reads every
// budget once.
func (r *Retrier) States() []TargetState {
	now := time.Now()
	all := r.e.Targets.All()
	states := make([]TargetState, len(all))
	for i, t := range all {
		states[i] = TargetState{Target: t.Name(), Retries: math.Inf(1)}
		if n, ok := t.Tokens(now); ok {
			states[i].Retries = n
		} else if sb, ok := t.Shared().(SharedBudget); ok {
			s := sb.State(now)
			states[i].Retries, states[i].Shared = s.Retries, &s
		}
		if a := t.Adaptive(); a != nil {
			states[i].RejectProbability = a.RejectProbability(now)
		}
	}
	slices.SortFunc(states, func(a, b TargetState) int { return strings.Compare(a.Target, b.Target) })
	return states
}
