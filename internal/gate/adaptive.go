package gate

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/adaptive"
	"github.com/platformkit/grpcbackoff/internal/decide"
)

// Adaptive is a target's adaptive client-side throttling, as a gate
// (interceptor.WithAdaptiveThrottle): it may reject a call before its first
// attempt (Admit), and a retry or a hedge as it is sent (Pay), with the
// probability its counts give (decide.Pay: ReasonRejectedLocally); it
// counts how every attempt ended (Ended), but those the caller canceled or
// the ClientConn's closing ended, which say nothing of the backend. Critical
// calls are never rejected, though counted.
type Adaptive struct{ L *adaptive.Limiter }

func (g Adaptive) Admit(c Criticality) grpcbackoff.Reason {
	if c == Critical || g.L.Allow(time.Now(), rand.Float64()) {
		return 0
	}
	return grpcbackoff.ReasonRejectedLocally
}

func (Adaptive) Reserve(*Reservation) grpcbackoff.Reason { return 0 }

func (g Adaptive) Pay(r *Reservation, now time.Time) grpcbackoff.Reason {
	if r.Criticality == Critical {
		return 0
	}
	return decide.Pay(nil, g.L, decide.Attempt{Now: now, U: rand.Float64()})
}

func (Adaptive) Cancel(*Reservation, time.Time) {}

func (g Adaptive) Ended(ctx context.Context, err error, o Outcome) {
	if !Unjudged(ctx, err, o.Conn) {
		g.L.Record(time.Now(), adaptive.Accepted(Judged(ctx, err)))
	}
}
