package interceptor

import (
	"errors"
	"reflect"
	"time"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/gate"
)

// A SharedBudget is a target's retry budget shared beyond the process: the
// processes of a fleet that share its name follow one Throttle together, as
// if they were one process (the fleetbudget module keeps one on Redis).
// WithSharedBudget makes each target's budget one.
//
// Started and Succeeded are on every call's path, as the Retrier's own
// budget's are: they must not block, allocate or reach the network (an
// atomic addition). Allow and AllowLongRun are asked before each retry, and
// pay for it if they say yes: Allow from the reserve first, AllowLongRun from
// the long-run allowance alone (see grpcbackoff.Throttle). They must not wait
// for the network either: a retry is paid from what the process holds. State
// is read by Retrier.States. Every method is called concurrently.
type SharedBudget interface {
	Started()
	Succeeded()
	Allow(now time.Time) bool
	AllowLongRun(now time.Time) bool
	State(now time.Time) SharedBudgetState
}

// A DeferredBudget is a SharedBudget that may pay for a retry when the
// retry is due, after its backoff, rather than when it is decided, so that
// a budget kept on the network can fetch meanwhile what the retry needs
// (the fleetbudget module's budgets are DeferredBudgets). The Retrier calls
// Want when it decides on a retry (due at due, to be paid from the long-run
// allowance alone if longRun: see SharedBudget): false refuses the retry
// there and then, as Allow does; true makes the Retrier wait out the
// backoff, then ask Allow or AllowLongRun, which pay for it or refuse it
// (a budget that paid when told says true). A refused retry ends the call
// (ReasonThrottled); Observers hear of a retry when it is paid or refused.
// Want must return at once, as the other methods.
type DeferredBudget interface {
	SharedBudget
	Want(now, due time.Time, longRun bool) bool
}

// A CostedBudget is a SharedBudget told what each retry costs, and which
// retries the server served, as the Retrier's own budget is: a retry after
// RESOURCE_EXHAUSTED costs more than one after any other failure, or a
// hedge (grpcbackoff.Throttle says how much); a retry whose attempt succeeds costs
// nothing, and a paid retry that is not sent (its call ended during the
// wait) neither. The Retrier finds out once per target whether a
// SharedBudget is one, and then asks AllowN in place of Allow and
// AllowLongRun: it pays a retry of cost n, all of it or none, from the
// long-run allowance alone if longRun (see SharedBudget; also the retry of
// a Sheddable call). Refund gives back n, paid by AllowN with the same
// longRun. A CostedBudget that is a DeferredBudget is told of a retry of
// cost n by n calls of Want. A SharedBudget that is not a CostedBudget pays
// one retry for each and is given nothing back. The methods must return at
// once, as the others.
type CostedBudget interface {
	SharedBudget
	AllowN(now time.Time, longRun bool, n int) bool
	Refund(now time.Time, longRun bool, n int)
}

// SharedBudgetState is what a SharedBudget says of itself at a moment, in
// TargetState.Shared.
type SharedBudgetState struct {
	// Name is the budget's name: the processes that use one name share
	// one budget.
	Name string
	// Retries is the number of retries the budget could pay for now in
	// this process.
	Retries float64
	// Joined says the process holds a lease of the fleet's budget; false
	// says it is on its local fallback (the shared state cannot be
	// reached).
	Joined bool
	// FleetSize is the number of processes that share the budget, as last
	// seen; 0 before the first time.
	FleetSize int
	// Leases counts the leases the process received, and Fallbacks the
	// times it fell back, since the budget was made: both only grow.
	Leases, Fallbacks int64
}

// WithSharedBudget makes each target's retry budget the SharedBudget that
// budget returns for it, given the target (as TargetState.Target) and the
// Retrier's Throttle (WithThrottle). budget is called when the Retrier
// first needs the target's state (on a target's first call, on the first
// call without a ClientConn for target "", and again for a target dropped
// for disuse): it must return at once, without reaching the network, and
// return the same budget for the same target. A nil SharedBudget, typed or not
// (a nil *T returned as a SharedBudget), leaves the target the Retrier's
// own budget. WithoutThrottle turns budgets off, shared
// ones included.
func WithSharedBudget(budget func(target string, t grpcbackoff.Throttle) SharedBudget) Option {
	return func(r *Retrier) error {
		if budget == nil {
			return errors.New("interceptor: WithSharedBudget(nil): the function is nil")
		}
		r.e.Targets.Shared = func(target string, t grpcbackoff.Throttle) gate.SharedBudget {
			if b := budget(target, t); !isNil(b) {
				return b
			}
			return nil
		}
		return nil
	}
}

// isNil reports whether b is nil, or holds a nil pointer, map, slice,
// function or channel: a SharedBudget whose methods cannot be called.
func isNil(b SharedBudget) bool {
	if b == nil {
		return true
	}
	switch v := reflect.ValueOf(b); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return v.IsNil()
	}
	return false
}
