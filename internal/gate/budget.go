package gate

import (
	"context"
	"time"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/budget"
)

// A target's retry budget as a gate: it counts every call (Admit), earns
// from the successes that answer a call (Ended), and pays for each retry and
// hedge as it is sent (Pay), what price says; it gives back what it paid
// for a retry that is not sent (Cancel) and for one whose attempt succeeds
// (Ended): a retry the server serves costs nothing. It never refuses a
// call.
//
// The bounds hold of what is not given back. A retry is paid before it is
// sent and given back only after its attempt succeeded, so the retries in
// flight at any moment, and the retries that fail, are within what the
// Throttle pays without refunds; in a total outage nothing is given back,
// and the budget pays what it paid before refunds, retry for retry.

// price returns what a budget charges for r, in µtokens, and whether it is
// paid from the long-run allowance alone:
//   - a hedge: one retry, from the long-run allowance (the server may be
//     working on every attempt in flight), never given back: it adds load
//     whether it wins or not, and a hedge given back when it won would make
//     hedging free wherever the server answers, a slow server's most of all;
//   - a retry: what its failure's code costs (budget.Cost: RESOURCE_EXHAUSTED,
//     the server's own word that it is past what it serves, more than
//     UNAVAILABLE), from the long-run allowance alone for the retry of a cut
//     attempt (whose work the server may still be doing) and for a
//     sheddable call's: the reserve, sized to carry a restart's retries
//     whole, is kept for the calls that were not said to be sheddable.
func price(r *Reservation) (cost int64, longRun bool) {
	if r.Hedge {
		return budget.Token, true
	}
	return budget.Cost(r.Code), r.LongRun || r.Criticality == Sheddable
}

// Budget is the process's own retry budget of a target, as a gate.
type Budget struct{ B *budget.Budget }

func (g Budget) Admit(Criticality) grpcbackoff.Reason { g.B.Started(); return 0 }

func (Budget) Reserve(*Reservation) grpcbackoff.Reason { return 0 }

func (g Budget) Pay(r *Reservation, now time.Time) grpcbackoff.Reason {
	cost, longRun := price(r)
	receipt, ok := g.B.AllowCost(now, longRun, cost)
	if !ok {
		return grpcbackoff.ReasonThrottled
	}
	r.Cost, r.Receipt = cost, receipt
	return 0
}

func (g Budget) Cancel(r *Reservation, now time.Time) { g.GiveBack(r, now) }

func (g Budget) Ended(_ context.Context, err error, o Outcome) {
	if err != nil {
		return
	}
	if o.Won {
		g.B.SucceededOn(int(o.Stripe))
	}
	if r := o.Reservation; r != nil && !r.Hedge {
		g.GiveBack(r, time.Now())
	}
}

// GiveBack gives back at now what r paid, if it paid.
func (g Budget) GiveBack(r *Reservation, now time.Time) {
	if r.Cost > 0 {
		g.B.Refund(now, r.Receipt)
		r.Cost, r.Receipt = 0, budget.Receipt{}
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

// CostedBudget is a SharedBudget told what each retry costs and which ones
// the server served: interceptor.CostedBudget without State.
type CostedBudget interface {
	SharedBudget
	AllowN(now time.Time, longRun bool, n int) bool
	Refund(now time.Time, longRun bool, n int)
}

// Shared is a target's SharedBudget, as a gate (NewShared). A
// DeferredBudget is told of a retry when it is decided (Want), and sets
// Reservation.WhenDue: it pays when the retry is due. A hedge, which is due
// as it is decided, it pays at once, as any SharedBudget. A CostedBudget
// pays what price says (AllowN), is told of a retry that costs n retries by
// n Wants if it is a DeferredBudget, and gives back what it paid as the
// Budget gate does (Refund); any other pays one retry for each, and gives
// nothing back.
type Shared struct {
	b        SharedBudget
	deferred DeferredBudget // b, if it is one
	costed   CostedBudget   // b, if it is one
}

// NewShared returns the gate of b, which it asks, once, what else it is
// (DeferredBudget, CostedBudget).
func NewShared(b SharedBudget) *Shared {
	g := &Shared{b: b}
	g.deferred, _ = b.(DeferredBudget)
	g.costed, _ = b.(CostedBudget)
	return g
}

func (g *Shared) Admit(Criticality) grpcbackoff.Reason { g.b.Started(); return 0 }

func (g *Shared) Reserve(r *Reservation) grpcbackoff.Reason {
	if g.deferred == nil {
		return 0
	}
	r.WhenDue = true
	n, longRun := g.price(r)
	for range n {
		if !g.deferred.Want(r.Decided, r.Due, longRun) {
			return grpcbackoff.ReasonThrottled
		}
	}
	return 0
}

func (g *Shared) Pay(r *Reservation, now time.Time) grpcbackoff.Reason {
	n, longRun := g.price(r)
	var ok bool
	switch {
	case g.costed != nil:
		ok = g.costed.AllowN(now, longRun, n)
	case longRun:
		ok = g.b.AllowLongRun(now)
	default:
		ok = g.b.Allow(now)
	}
	if !ok {
		return grpcbackoff.ReasonThrottled
	}
	r.Cost = int64(n) * budget.Token
	return 0
}

func (g *Shared) Cancel(r *Reservation, now time.Time) { g.GiveBack(r, now) }

func (g *Shared) Ended(_ context.Context, err error, o Outcome) {
	if err != nil {
		return
	}
	if o.Won {
		g.b.Succeeded()
	}
	if r := o.Reservation; r != nil && !r.Hedge {
		g.GiveBack(r, time.Now())
	}
}

// price is price in whole retries, for b: one for a budget that is not a
// CostedBudget.
func (g *Shared) price(r *Reservation) (n int, longRun bool) {
	cost, longRun := price(r)
	if g.costed == nil {
		return 1, longRun
	}
	return int(max(cost/budget.Token, 1)), longRun
}

// GiveBack gives back at now what r paid, if it paid and b is a
// CostedBudget.
func (g *Shared) GiveBack(r *Reservation, now time.Time) {
	if r.Cost > 0 && g.costed != nil {
		_, longRun := price(r)
		g.costed.Refund(now, longRun, int(r.Cost/budget.Token))
	}
	r.Cost = 0
}
