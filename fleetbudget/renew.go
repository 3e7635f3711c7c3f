package fleetbudget

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/platformkit/grpcbackoff/internal/lease"
)

// loop renews the budgets' leases as they fall due, until ctx ends.
func (f *Fleet) loop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := f.tick(ctx, time.Now())
		timer.Reset(time.Until(next))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-f.wake:
		}
	}
}

// tick renews, in one pipeline, every lease due by now, and returns when
// the next one falls due.
func (f *Fleet) tick(ctx context.Context, now time.Time) time.Time {
	f.mu.Lock()
	var due []*budget
	next := now.Add(time.Hour)
	for _, b := range f.order {
		if !b.next.After(now) || b.early.Swap(false) {
			due = append(due, b)
		} else if b.next.Before(next) {
			next = b.next
		}
	}
	f.mu.Unlock()
	if len(due) == 0 {
		return next
	}
	reqs := make([]lease.Request, len(due))
	params := make([]lease.Params, len(due))
	for i, b := range due {
		b.mu.Lock()
		reqs[i] = b.local.Request(now, b.started.Swap(0), b.succeeded.Swap(0))
		params[i] = b.local.Params()
		b.next = now.Add(b.local.Interval())
		b.mu.Unlock()
		next = minTime(next, b.next)
	}
	start := time.Now()
	var grants []lease.Grant
	err := f.reach(ctx)
	if err == nil {
		grants, err = f.renew(ctx, due, params, reqs)
	}
	if err != nil && f.probe != nil {
		f.unreachable = true // the client dials again once a probe answers
	}
	if ctx.Err() != nil {
		return next
	}
	done := now.Add(time.Since(start)) // now is time.Now() but in tests
	if err == nil {
		err = checkClocks(grants, time.Now())
	}
	for i, b := range due {
		if err == nil {
			b.mu.Lock()
			b.local.Apply(done, now, grants[i])
			b.mu.Unlock()
		}
	}
	f.report(err)
	return next
}

// maxSkew is how far from a process's clock the time of a grant may be.
// Further, the process refuses it: the budget's time (its birth, which the
// process remembers to make it again if Redis loses it) is not to be
// trusted.
const maxSkew = time.Minute

// checkClocks returns an error if the time of a grant is further than
// maxSkew from now, the process's clock.
func checkClocks(grants []lease.Grant, now time.Time) error {
	for _, g := range grants {
		if d := time.UnixMicro(g.Now).Sub(now); d > maxSkew || d < -maxSkew {
			return fmt.Errorf("fleetbudget: Redis's clock (%v) is %v from this process's: leases refused until they are within %v",
				time.UnixMicro(g.Now).UTC().Format(time.RFC3339Nano), d.Round(time.Millisecond), maxSkew)
		}
	}
	return nil
}

// reach returns nil if the client may be used: Redis answered the last
// renewal, or a probe of its address answers now.
func (f *Fleet) reach(ctx context.Context) error {
	if !f.unreachable {
		return nil
	}
	if err := f.probe(ctx); err != nil {
		return err
	}
	f.unreachable = false
	return nil
}

// renew runs the script once per budget, pipelined, within a quarter of
// the lease period.
func (f *Fleet) renew(ctx context.Context, due []*budget, params []lease.Params, reqs []lease.Request) ([]lease.Grant, error) {
	ctx, cancel := context.WithTimeout(ctx, f.period/4)
	defer cancel()
	run := func(eval func(pipe redis.Pipeliner, i int) *redis.Cmd) ([]*redis.Cmd, error) {
		cmds := make([]*redis.Cmd, len(due))
		_, err := f.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for i := range due {
				cmds[i] = eval(pipe, i)
			}
			return nil
		})
		return cmds, err
	}
	args := func(i int) []any { return renewArgs(params[i], reqs[i], due[i].ttl, 0) }
	cmds, err := run(func(pipe redis.Pipeliner, i int) *redis.Cmd {
		return renew.EvalSha(ctx, pipe, []string{due[i].key}, args(i)...)
	})
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// A new or restarted server: send the script itself.
		cmds, err = run(func(pipe redis.Pipeliner, i int) *redis.Cmd {
			return renew.Eval(ctx, pipe, []string{due[i].key}, args(i)...)
		})
	}
	if err != nil {
		return nil, err
	}
	grants := make([]lease.Grant, len(due))
	for i, c := range cmds {
		if grants[i], err = parseGrant(c.Val(), reqs[i]); err != nil {
			return nil, err
		}
	}
	return grants, nil
}

// report logs a failure to renew once, and the first success after it.
func (f *Fleet) report(err error) {
	switch {
	case err != nil && !f.failing:
		f.failing = true
		f.log.Warn("fleetbudget: cannot renew the leases of the fleet's retry budgets: each process spends its share of them (the fleet's floors divided by the fleet's size) once its lease expires, until Redis answers",
			"redis", f.where, "err", err)
	case err == nil && f.failing:
		f.failing = false
		f.log.Info("fleetbudget: the leases of the fleet's retry budgets are renewed again", "redis", f.where)
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
