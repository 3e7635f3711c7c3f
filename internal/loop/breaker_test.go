package loop_test

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/gate"
)

// breaker is a gate of the tests' own, written as a new per-target check
// (a circuit breaker) would be, through gate.Gate alone: once limit
// attempts to its target failed, it refuses every retry and hedge
// (ReasonThrottled), when it is decided and when it is paid. It never
// refuses a call's first attempt. It counts what the loop told it.
type breaker struct {
	limit int64

	failures, retriesEnded    atomic.Int64 // attempts that failed; attempts ended that were a retry or a hedge
	admitted, reserved, paid  atomic.Int64
	refused, canceled, hedges atomic.Int64
}

func (b *breaker) open() bool { return b.failures.Load() >= b.limit }

func (b *breaker) verdict() grpcbackoff.Reason {
	if b.open() {
		b.refused.Add(1)
		return grpcbackoff.ReasonThrottled
	}
	return 0
}

func (b *breaker) Admit(gate.Criticality) grpcbackoff.Reason {
	b.admitted.Add(1)
	return 0
}

func (b *breaker) Reserve(*gate.Reservation) grpcbackoff.Reason {
	b.reserved.Add(1)
	return b.verdict()
}

func (b *breaker) Pay(r *gate.Reservation, _ time.Time) grpcbackoff.Reason {
	b.paid.Add(1)
	if r.Hedge {
		b.hedges.Add(1)
	}
	return b.verdict()
}

func (b *breaker) Cancel(*gate.Reservation, time.Time) { b.canceled.Add(1) }

func (b *breaker) Ended(_ context.Context, err error, o gate.Outcome) {
	if err != nil {
		b.failures.Add(1)
	}
	if o.Reservation != nil {
		b.retriesEnded.Add(1)
	}
}
