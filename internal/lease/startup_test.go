package lease_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/budget"
	"github.com/platformkit/grpcbackoff/internal/lease"
)

// TestProcessesStartingOneAfterAnother: n processes of one fleet start
// apart from each other, each making one call whose first two attempts
// fail, its retries due 1 s after each failure (the recipe capped at 1 s),
// told to the Local when decided and paid when due, as fleetbudget's
// budgets are; each process goes on renewing after its call. Where one
// Throttle for all the processes would pay every retry (up to 20
// processes, 40 retries, always; 100 processes 300 ms apart or more), the
// fleet pays them all too; where it runs out (100 processes starting
// within 5 s: 200 retries wanted, about 120 paid), the fleet pays as many,
// within 5%; whatever the processes' spacing, and whether a process's
// first renewal is sent before its first attempt fails or after. (fleetbudget's TestProcessesStartingOneAfterAnother
// is the red team's probe on a real Redis: 6 processes 300 ms apart, the
// first holding the whole floor in its lease, refused two calls' retries.)
func TestProcessesStartingOneAfterAnother(t *testing.T) {
	th := grpcbackoff.DefaultThrottle()
	for _, n := range []int{2, 6, 20, 100} {
		for _, apart := range []time.Duration{0, time.Millisecond, 50 * time.Millisecond, 300 * time.Millisecond, 749 * time.Millisecond, 750 * time.Millisecond, 2 * time.Second} {
			for _, wantFirst := range []bool{false, true} {
				fleet, fleetPaid := runStartup(th, n, apart, wantFirst, false)
				one, onePaid := runStartup(th, n, apart, wantFirst, true)
				name := fmt.Sprintf("%d processes %v apart (a retry told before the first renewal: %v)", n, apart, wantFirst)
				switch {
				case one == 0 && fleet != 0:
					t.Errorf("%s: the fleet refused %d of %d calls' retries, one Throttle for all none", name, fleet, n)
				case n <= 20 && one != 0:
					t.Errorf("%s: one Throttle for all refused %d calls' retries, want none", name, one)
				case abs(fleetPaid-onePaid) > max(onePaid/20, 2):
					t.Errorf("%s: the fleet paid %d retries, one Throttle for all %d: want within 5%%", name, fleetPaid, onePaid)
				}
			}
		}
	}
}

// runStartup runs n processes starting apart, each one call that fails
// twice, and returns the calls whose retry was refused and the retries
// paid: by the fleet's budget, each process a Local renewing with one
// Ledger (answered at once, every interval from the process's start, as
// fleetbudget's loop renews), or, with one, by one Throttle for all the
// processes. Time goes from one event (a start, a renewal, a retry due) to
// the next.
func runStartup(th grpcbackoff.Throttle, n int, apart time.Duration, wantFirst, one bool) (refused, paidRetries int) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now := start
	var fleet lease.Ledger
	shared, err := budget.NewWithClock(th, func() time.Time { return now })
	if err != nil {
		panic(err)
	}
	type process struct {
		l                  *lease.Local
		next, due          time.Time
		attempts           int
		started, succeeded int64
		done               bool
	}
	renew := func(p *process) {
		if one || now.Before(p.next) {
			return
		}
		r := p.l.Request(now, p.started, p.succeeded)
		p.started, p.succeeded = 0, 0
		p.l.Apply(now, now, fleet.Renew(now.UnixMicro(), p.l.Params(), r))
		p.next = now.Add(p.l.Interval())
	}
	fail := func(p *process) {
		p.attempts++
		p.due = now.Add(time.Second)
		if !one {
			p.l.Want(now, p.due, false)
		}
	}
	procs := make([]*process, n)
	end := start.Add(time.Duration(n)*apart + 5*time.Second)
	for now.Before(end) {
		for i := range procs {
			if procs[i] != nil || now.Before(start.Add(time.Duration(i)*apart)) {
				continue
			}
			p := &process{l: lease.NewLocal(th, time.Second, 1000, now), next: now, started: 1}
			procs[i] = p
			shared.Started()
			if wantFirst {
				fail(p)
				renew(p)
			} else {
				renew(p)
				fail(p)
			}
		}
		next := end
		for i, p := range procs {
			if p == nil {
				next = minTime(next, start.Add(time.Duration(i)*apart))
				continue
			}
			renew(p) // a process goes on renewing after its call
			if !p.done && !now.Before(p.due) {
				paid := false
				if one {
					paid = shared.Allow(now)
				} else {
					paid = p.l.Allow(now)
				}
				if paid {
					paidRetries++
				}
				switch {
				case !paid:
					refused++
					p.done = true
				case p.attempts == 2:
					p.succeeded++
					shared.Succeeded()
					p.done = true
				default:
					fail(p)
				}
			}
			if !one {
				next = minTime(next, p.next)
			}
			if !p.done {
				next = minTime(next, p.due)
			}
		}
		now = next
	}
	return refused, paidRetries
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func abs(n int) int { return max(n, -n) }

// TestRollingRestart: a lone process, which holds the whole Throttle as its
// stock, is replaced by another (a rolling restart): the new one makes a
// call a second, each failing twice. If the old one leaves (Local.Leave,
// fleetbudget's Fleet.Close), giving back what it holds, the new one's
// retries are paid from its first second, as its own Throttle would pay
// them. If it dies holding its stock, the fleet gets it back only as the
// Window forgets it: the new one's first calls are refused.
func TestRollingRestart(t *testing.T) {
	th := grpcbackoff.DefaultThrottle()
	for _, leaves := range []bool{true, false} {
		refused := runRollingRestart(th, leaves)
		t.Logf("the old process leaves %v: %d of 10 calls refused", leaves, refused)
		if leaves && refused != 0 || !leaves && refused == 0 {
			t.Errorf("the old process leaves %v: %d of 10 calls of the new one refused; want none if it leaves, some if it dies", leaves, refused)
		}
	}
}

// runRollingRestart runs a process for 30 s, 10 calls a renewal all
// succeeding, then stops it, leaving or not, and starts another 1 s later,
// which makes 10 calls 1 s apart, each failing twice; it returns how many
// of those calls' retries were refused.
func runRollingRestart(th grpcbackoff.Throttle, leaves bool) int {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var fleet lease.Ledger
	old := lease.NewLocal(th, time.Second, 1000, start)
	now := start
	for ; now.Before(start.Add(30 * time.Second)); now = now.Add(old.Interval()) {
		old.Apply(now, now, fleet.Renew(now.UnixMicro(), old.Params(), old.Request(now, 10, 10)))
	}
	if leaves {
		fleet.Renew(now.UnixMicro(), old.Params(), old.Leave(now, 0, 0))
	}
	begin := now.Add(time.Second)
	l := lease.NewLocal(th, time.Second, 1000, begin)
	next := begin
	type call struct {
		due      time.Time
		attempts int
	}
	var calls []*call
	refused := 0
	for step := time.Duration(0); step < 13*time.Second; step += time.Millisecond {
		now := begin.Add(step)
		if !now.Before(next) {
			l.Apply(now, now, fleet.Renew(now.UnixMicro(), l.Params(), l.Request(now, 0, 0)))
			next = now.Add(l.Interval())
		}
		if step%time.Second == 0 && step < 10*time.Second {
			c := &call{due: now.Add(time.Second), attempts: 1}
			l.Want(now, c.due, false)
			calls = append(calls, c)
		}
		for _, c := range calls {
			switch {
			case c.attempts == 0 || now.Before(c.due):
			case !l.Allow(now):
				refused++
				c.attempts = 0
			case c.attempts == 2:
				c.attempts = 0
			default:
				c.attempts++
				c.due = now.Add(time.Second)
				l.Want(now, c.due, false)
			}
		}
	}
	return refused
}
