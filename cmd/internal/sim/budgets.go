package sim

import (
	"time"

	"github.com/platformkit/grpcbackoff"
)

// Budgets is the experiment of issue 29: one backend's fleet of clients,
// its traffic the same whatever the number of processes it is split into,
// through a 30 s outage, with a budget per process or one for the fleet.
type Budgets struct {
	// Base is the scenario; its PerProcess is set from each run's
	// number of processes.
	Base Fleet
	// Processes are the numbers of processes, e.g. 10 to 10 000.
	Processes []int
}

// DefaultBudgets returns 100 000 clients (10 000 calls/s) in 10 to 10 000
// processes, the outage from 20 s to 50 s, 110 s in all. A paused server
// keeps at most 10 000 requests waiting, so that it can recover.
func DefaultBudgets() Budgets {
	sc := DefaultFleet()
	sc.PauseAt, sc.Pause, sc.Duration, sc.Backlog = 20*time.Second, 30*time.Second, 110*time.Second, 10_000
	return Budgets{Base: sc, Processes: []int{10, 100, 1000, 10_000}}
}

// Scenario returns b's scenario for processes processes, the outage a
// pause or, with unavailable, UNAVAILABLE answered at once.
func (b Budgets) Scenario(processes int, unavailable bool) Fleet {
	sc := b.Base
	sc.PerProcess = max(sc.Clients/processes, 1)
	sc.Unavailable = unavailable
	return sc
}

// Outage is what a run did during its outage.
type Outage struct {
	// Retries is the retries sent during the outage, Started the calls
	// started during it, and Before the calls that succeeded in the
	// Throttle's Window before it.
	Retries, Started, Before int
	// Bound is the Throttle's bound on Retries for one budget serving the
	// whole fleet: MinReserve + Reserve·Before + Burst + Ratio·Started +
	// PerSecond·T; PerProcess the sum of the processes' bounds, each with
	// its own floors.
	Bound, PerProcess float64
}

// OutageOf measures r, a run of sc with throttle t, in processes processes.
func OutageOf(r Result, sc Fleet, t grpcbackoff.Throttle, processes int) Outage {
	var o Outage
	from, to := int(sc.PauseAt/time.Second), int((sc.PauseAt+sc.Pause)/time.Second)
	for _, s := range r.Samples[from:min(to, len(r.Samples))] {
		o.Retries += s.Attempts - s.Started
		o.Started += s.Started
	}
	for _, s := range r.Samples[max(from-int(t.Window/time.Second), 0):from] {
		o.Before += s.OK
	}
	T := sc.Pause.Seconds()
	floors := float64(t.MinReserve) + float64(t.Burst) + t.PerSecond*T
	rest := t.Reserve*float64(o.Before) + t.Ratio*float64(o.Started)
	o.Bound, o.PerProcess = floors+rest, float64(processes)*floors+rest
	return o
}
