package lease_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/budget"
	"github.com/platformkit/grpcbackoff/internal/lease"
)

// TestLoneProcessIsLocalThrottle feeds one trace to a process's own budget
// and to a lone process of a fleet (its Local renewing with a Ledger every
// 750 ms): calls at random rates (one a minute to 50 a second), quiet
// spells, restarts and partial failures; every failed attempt wants a retry
// 1 to 2 s later (the recipe's first backoff), told to the Local when
// decided and paid by both when due. Alone in its fleet, the process pays
// what its own budget pays, within one token per renewal, at start-up,
// after quiet spells and at low traffic alike.
func TestLoneProcessIsLocalThrottle(t *testing.T) {
	if raceEnabled {
		t.Skip("an arithmetic compared over 40 random traces: run without -race (the README's test command)")
	}
	th := grpcbackoff.DefaultThrottle()
	for trial := range 40 {
		rng := rand.New(rand.NewPCG(uint64(trial), 35))
		start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		now := start
		own, err := budget.NewWithClock(th, func() time.Time { return now })
		if err != nil {
			t.Fatal(err)
		}
		var fleet lease.Ledger
		l := lease.NewLocal(th, time.Second, 1000, start)
		next := start // renewals: at once, as fleetbudget's first, then every interval
		var started, succeeded int64
		type retry struct {
			due      time.Time
			longRun  bool
			attempts int
		}
		var due []retry
		var renewals, paidOwn, paidFleet, differ int
		rate, failing := 1.0, 0.0
		for step := 0; step < 120_000; step++ { // 120 s in 1 ms steps
			now = start.Add(time.Duration(step) * time.Millisecond)
			if step%10_000 == 0 { // a new phase every 10 s
				rate = []float64{0, 1.0 / 60, 0.5, 5, 50}[rng.IntN(5)]
				failing = []float64{0, 0, 0.3, 0.67, 1}[rng.IntN(5)]
			}
			if !now.Before(next) {
				r := l.Request(now, started, succeeded)
				started, succeeded = 0, 0
				l.Apply(now, now, fleet.Renew(now.UnixMicro(), l.Params(), r))
				next = next.Add(l.Interval())
				renewals++
			}
			attempt := func(n int) {
				if rng.Float64() < failing {
					d := now.Add(time.Second + time.Duration(rng.Int64N(int64(time.Second))))
					lr := rng.IntN(10) == 0 // an attempt cut by its timeout
					l.Want(now, d, lr)
					due = append(due, retry{d, lr, n})
					return
				}
				own.Succeeded()
				succeeded++
			}
			if rng.Float64() < rate/1000 {
				own.Started()
				started++
				attempt(1)
			}
			for i := 0; i < len(due); i++ {
				r := due[i]
				if now.Before(r.due) {
					continue
				}
				due = append(due[:i], due[i+1:]...)
				i--
				var a, b bool
				if r.longRun {
					a, b = own.AllowLongRun(now), l.AllowLongRun(now)
				} else {
					a, b = own.Allow(now), l.Allow(now)
				}
				if a {
					paidOwn++
				}
				if b {
					paidFleet++
				}
				if a != b {
					differ++
				}
				if a && r.attempts < 8 { // the trace follows the process's own budget
					attempt(r.attempts + 1)
				}
			}
		}
		t.Logf("trial %2d: %4d retries paid by its own budget, %4d by the fleet's, %3d answers differ, %d renewals", trial, paidOwn, paidFleet, differ, renewals)
		if d := paidOwn - paidFleet; d > renewals || -d > renewals {
			t.Errorf("trial %d: %d retries paid by its own budget, %d by the fleet's: more than one a renewal (%d) apart", trial, paidOwn, paidFleet, renewals)
		}
	}
}
