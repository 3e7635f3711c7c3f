package gate

import (
	"context"
	"time"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/budget"
	"github.com/platformkit/grpcbackoff/internal/decide"
)

// A target's retry budget as a gate: it counts every call (Admit), earns
// from the successes that answer a call (Ended), and pays for each retry and
// hedge as it is sent (Pay), as decide.Pay says: from the long-run
// allowance alone for a hedge or the retry of a cut attempt, from the
// reserve first otherwise. It never refuses a call, and gives nothing back
// (Cancel) yet.

// Budget is the process's own retry budget of a target, as a gate.
type Budget struct{ B *budget.Budget }

func (g Budget) Admit(Criticality) grpcbackoff.Reason { g.B.Started(); return 0 }

func (Budget) Reserve(*Reservation) grpcbackoff.Reason { return 0 }

func (g Budget) Pay(r *Reservation, now time.Time) grpcbackoff.Reason {
	return decide.Pay(g.B, nil, decide.Attempt{TimedOut: r.LongRun, Now: now})
}

func (Budget) Cancel(*Reservation, time.Time) {}

func (g Budget) Ended(_ context.Context, err error, o Outcome) {
	if err == nil && o.Won {
		g.B.SucceededOn(int(o.Stripe))
	}
}

// SharedBudget is a target's retry budget shared beyond the process, as
// the engine uses it: interceptor.SharedBudget without State, which only
// interceptor's States reads.
type SharedBudget interface {
	Started()
	Succeeded()
	Allow(now time.Time) bool
	AllowLongRun(now time.Time) bool
}

// DeferredBudget is a SharedBudget that pays for a retry when it is due,
// after its backoff: interceptor.DeferredBudget without State.
type DeferredBudget interface {
	SharedBudget
	Want(now, due time.Time, longRun bool) bool
}

// Shared is a target's SharedBudget, as a gate. A DeferredBudget is told of
// a retry when it is decided (Want), and sets Reservation.WhenDue: it pays
// when the retry is due. A hedge, which is due as it is decided, it pays at
// once, as any SharedBudget.
type Shared struct{ B SharedBudget }

func (g Shared) Admit(Criticality) grpcbackoff.Reason { g.B.Started(); return 0 }

func (g Shared) Reserve(r *Reservation) grpcbackoff.Reason {
	d, ok := g.B.(DeferredBudget)
	if !ok {
		return 0
	}
	r.WhenDue = true
	if !d.Want(r.Decided, r.Due, r.LongRun) {
		return grpcbackoff.ReasonThrottled
	}
	return 0
}

func (g Shared) Pay(r *Reservation, now time.Time) grpcbackoff.Reason {
	return decide.Pay(g.B, nil, decide.Attempt{TimedOut: r.LongRun, Now: now})
}

func (Shared) Cancel(*Reservation, time.Time) {}

func (g Shared) Ended(_ context.Context, err error, o Outcome) {
	if err == nil && o.Won {
		g.B.Succeeded()
	}
}
