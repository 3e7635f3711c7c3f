// Package gate is the admission checks a backend target's calls pass, each
// behind one interface, Gate: the retry budget (Budget: the process's own;
// Shared: one kept beyond the process, which may pay when due), adaptive
// throttling (Adaptive), and whatever check comes next (a circuit breaker,
// a concurrency limit): one file that implements Gate, listed in the
// target's Set. The retry loop (internal/loop) asks a target's Set; no
// driver reaches a gate. In the engine's layers it sits above what the
// gates keep (internal/budget, internal/adaptive) and the retry decision's
// rules (internal/decide), and below the targets that hold a Set each
// (internal/targets).
//
// The words are golang.org/x/time/rate's: a retry or a hedge is reserved
// when it is decided (Reserve), and paid once, as it is sent (Pay); a
// Reservation is the loop's record of it that every gate is handed, which
// can be given back (Cancel) and learns how the attempt it sent ended
// (Outcome.Reservation). As failsafe-go splits a policy from its
// executions, a Gate is a target's state, shared by its calls, and a
// Reservation one retry's.
package gate

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/budget"
)

// A Gate is one admission check of a backend target's calls. It is asked
// at each call's start (Admit), at each of its retries and hedges (Reserve
// when it is decided, Pay as it is sent, Cancel if it never is), and told
// how every attempt ended (Ended). A nonzero Reason refuses: the call, the
// retry or the hedge is not sent, and the gates after the one that refused
// are not asked. Its methods are called concurrently, by every call to the
// target; Admit and Ended are on every call's path and must not block or
// allocate.
type Gate interface {
	// Admit is asked as a call starts, before its first attempt: it counts
	// the call, or refuses it (the call fails at once, without an attempt,
	// with the Reason).
	Admit(c Criticality) grpcbackoff.Reason
	// Reserve is asked when a retry is decided, before its wait: the gate
	// may refuse it, hold what it will cost, or, if it can only pay when
	// the retry is due (a budget kept on the network, which fetches
	// meanwhile), set r.WhenDue. A hedge is not reserved: it is due as
	// it is decided.
	Reserve(r *Reservation) grpcbackoff.Reason
	// Pay pays, at now, for r, a retry as it is sent (when it is decided,
	// unless a gate set r.WhenDue or an attempt in flight may yet end the
	// call) or a hedge: the one payment a retry or a hedge makes, or its
	// refusal.
	Pay(r *Reservation, now time.Time) grpcbackoff.Reason
	// Cancel gives back what r holds, if the gate can: the retry reserved,
	// or paid, will not be sent (its call ended during the wait, or a gate
	// refused it).
	Cancel(r *Reservation, now time.Time)
	// Ended is told how an attempt of a call with context ctx ended, every
	// attempt, the first included: with err (nil: it succeeded), and o.
	Ended(ctx context.Context, err error, o Outcome)
}

// Criticality is how much a call matters when its backend sheds load
// (interceptor.Critical, interceptor.Sheddable).
type Criticality int8

const (
	Default   Criticality = iota // every call without Critical or Sheddable
	Critical                     // interceptor.Critical: exempt from adaptive throttling
	Sheddable                    // interceptor.Sheddable: its retries are paid from a budget's long-run allowance alone
)

// A Reservation is one retry or hedge of a call as the gates see it. The
// loop fills in the request before Reserve (or Pay, for a hedge) and keeps
// it until the attempt it sends ends (Outcome.Reservation): one per call
// for a retry, one per attempt for the hedges of a hedged call. Its fields
// are read by the gates; WhenDue is written by Reserve, Cost and Receipt by
// the target's budget (Budget, Shared), which pays at Pay and gives back
// what it paid when the retry is canceled or the attempt it sent succeeds.
type Reservation struct {
	Decided     time.Time   // when the retry was decided (for a hedge: when it is sent)
	Due         time.Time   // when it is due to be sent, after its wait
	Code        codes.Code  // the code of the failed attempt it retries; for a hedge, the last failure's, OK if none
	LongRun     bool        // paid from a budget's long-run allowance alone: a hedge, or the retry of a cut attempt, whose work the server may still be doing
	Hedge       bool        // a hedge: sent while earlier attempts are in flight
	Criticality Criticality // the call's
	Attempt     int         // the number of the attempt it sends, from 2

	// WhenDue is set by a gate that can only pay when the retry is due:
	// every gate is then paid when it is (Pay), not when it is decided.
	WhenDue bool
	// Cost is what the target's budget took for it at Pay, in µtokens
	// (budget.Token is one retry): 0 until then, and once given back.
	Cost int64
	// Receipt is what of the process's own budget paid Cost (Budget).
	Receipt budget.Receipt
}

// Closer reports whether a call's ClientConn has shut down
// (targets.Conn).
type Closer interface{ Closed() bool }

// Outcome is how one attempt of a call ended, as the gates are told,
// beside its context and its error. It is passed by value on every call's
// path, and so is kept to four words (as the compiler keeps a struct in
// registers only up to four).
type Outcome struct {
	Conn Closer // the call's ClientConn's state
	// Reservation is the retry or hedge the attempt was, nil for a call's
	// first attempt: how it ended is what a refund will read.
	Reservation *Reservation
	// Stripe names the budget's counter of successes the attempt counts on
	// (budget.Budget.SucceededOn).
	Stripe int32
	// Won says the success is the call's answer, the one success a budget
	// counts: false for a hedge that lost the race, and for a call no
	// Policy retries, which earns a budget nothing.
	Won bool
}

// Unjudged reports whether an attempt of a call with context ctx that
// ended with err on conn ended for a reason that says nothing of the
// backend: the caller canceled the call, or its ClientConn shut down.
func Unjudged(ctx context.Context, err error, conn Closer) bool {
	return ctx.Err() == context.Canceled || status.Code(err) == codes.Canceled && conn.Closed()
}

// Judged returns the code of an attempt of a call with context ctx that
// ended with err, as a backend's judge counts it: the call's deadline
// counts as DEADLINE_EXCEEDED, not as the CANCELED of a context grpc-go saw
// end.
func Judged(ctx context.Context, err error) codes.Code {
	if ctx.Err() == context.DeadlineExceeded {
		return codes.DeadlineExceeded
	}
	return status.Code(err)
}

// A Set is the gates of one backend target, in the order they are asked:
// the first to refuse ends the asking. The zero Set has no gate. A Set is
// made with its target and not changed afterwards; it is then safe for
// concurrent use.
type Set struct {
	gates []Gate
}

// NewSet returns the Set of gates, in that order; nil ones are left out.
func NewSet(gates ...Gate) Set {
	var s Set
	for _, g := range gates {
		if g != nil {
			s.gates = append(s.gates, g)
		}
	}
	return s
}

// Admit asks every gate to admit a call of criticality c, and returns the
// Reason of the first that refuses it, 0 if none does.
func (s *Set) Admit(c Criticality) grpcbackoff.Reason {
	for i := range s.gates {
		if why := s.gates[i].Admit(c); why != 0 {
			return why
		}
	}
	return 0
}

// Reserve asks every gate to reserve r, and returns the Reason of the first
// that refuses it, 0 if none does; the gates before it are given r back
// (Cancel).
func (s *Set) Reserve(r *Reservation) grpcbackoff.Reason {
	r.WhenDue = false
	for i, g := range s.gates {
		if why := g.Reserve(r); why != 0 {
			s.cancel(r, i, r.Decided)
			return why
		}
	}
	return 0
}

// Pay asks every gate to pay for r at now, and returns the Reason of the
// first that refuses it, 0 if none does; the gates before it are given r
// back (Cancel), and so are those after it, which had reserved it.
func (s *Set) Pay(r *Reservation, now time.Time) grpcbackoff.Reason {
	for i, g := range s.gates {
		if why := g.Pay(r, now); why != 0 {
			for j, h := range s.gates {
				if j != i {
					h.Cancel(r, now)
				}
			}
			return why
		}
	}
	return 0
}

// A Giver is a gate that gives back what a retry paid once the attempt it
// sent was served (the budgets: Budget, Shared). Ended does so for an
// attempt that succeeded, as a unary one's success is its end; a stream,
// whose first response is recorded while it goes on, is given back at its
// good end (Set.GiveBack).
type Giver interface {
	GiveBack(r *Reservation, now time.Time)
}

// GiveBack gives back, at now, what r paid to every gate that is a Giver:
// the attempt r sent, a stream's, ended well.
func (s *Set) GiveBack(r *Reservation, now time.Time) {
	for _, g := range s.gates {
		if gv, ok := g.(Giver); ok {
			gv.GiveBack(r, now)
		}
	}
}

// Cancel gives r back to every gate: the retry will not be sent.
func (s *Set) Cancel(r *Reservation, now time.Time) { s.cancel(r, len(s.gates), now) }

// cancel gives r back to the first n gates.
func (s *Set) cancel(r *Reservation, n int, now time.Time) {
	for _, g := range s.gates[:n] {
		g.Cancel(r, now)
	}
}

// Ended tells every gate how an attempt of a call with context ctx ended.
func (s *Set) Ended(ctx context.Context, err error, o Outcome) {
	for i := range s.gates {
		s.gates[i].Ended(ctx, err, o)
	}
}
