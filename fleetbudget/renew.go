package fleetbudget

import (
	"context"
	"errors"
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
	reqs, params := requests(due, func(b *budget) lease.Request {
		b.next = now.Add(b.local.Interval())
		return b.local.Request(now, b.started.Swap(0), b.succeeded.Swap(0))
	})
	for _, b := range due {
		next = minTime(next, b.next)
	}
	start := time.Now()
	var out outcome
	if err := f.reach(ctx); err != nil {
		out.err = err
	} else {
		out = f.renew(ctx, due, params, reqs)
	}
	if out.err != nil && !out.answered && f.probe != nil {
		f.unreachable = true // the client dials again once a probe answers
	}
	if ctx.Err() != nil {
		return next
	}
	done := now.Add(time.Since(start)) // now is time.Now() but in tests
	if out.err == nil {
		var got []lease.Grant
		for i, g := range out.grants {
			if out.errs[i] == nil {
				got = append(got, g)
			}
		}
		if err := checkClocks(got, time.Now()); err != nil {
			out.err, out.answered = err, true
		}
	}
	for i, b := range due {
		if out.err == nil && out.errs[i] == nil {
			b.mu.Lock()
			b.local.Apply(done, now, out.grants[i])
			b.mu.Unlock()
		}
	}
	f.report(out, due)
	return next
}

// requests returns the renewals of due, each made by request under its
// budget's lock, and their Params.
func requests(due []*budget, request func(b *budget) lease.Request) ([]lease.Request, []lease.Params) {
	reqs := make([]lease.Request, len(due))
	params := make([]lease.Params, len(due))
	for i, b := range due {
		b.mu.Lock()
		reqs[i], params[i] = request(b), b.local.Params()
		b.mu.Unlock()
	}
	return reqs, params
}

// outcome is what a round of renewals got: a grant or an error for each
// budget, or an error for all of them (err) where no renewal got an answer:
// Redis could not be reached, did not answer in time, or refused the
// connection (answered).
type outcome struct {
	grants   []lease.Grant
	errs     []error
	err      error
	answered bool
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
// the lease period. A script's error is its budget's alone: Redis answered
// the others.
func (f *Fleet) renew(ctx context.Context, due []*budget, params []lease.Params, reqs []lease.Request) outcome {
	ctx, cancel := context.WithTimeout(ctx, f.period/4)
	defer cancel()
	// run runs the script for the budgets of indices ix, with EVALSHA, or
	// with EVAL if send: a new or restarted server (or cluster node) that
	// does not know it.
	run := func(ix []int, send bool) ([]*redis.Cmd, error) {
		cmds := make([]*redis.Cmd, len(ix))
		_, err := f.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for j, i := range ix {
				keys, args := keysOf(due[i].key), renewArgs(params[i], reqs[i], due[i].ttl, 0)
				if send {
					cmds[j] = renew.Eval(ctx, pipe, keys, args...)
				} else {
					cmds[j] = renew.EvalSha(ctx, pipe, keys, args...)
				}
			}
			return nil
		})
		return cmds, err
	}
	all := make([]int, len(due))
	for i := range all {
		all[i] = i
	}
	cmds, err := run(all, false)
	if err != nil && !answered(cmds) {
		return outcome{err: f.named(err), answered: isReply(err)}
	}
	var again []int // NOSCRIPT: sent with EVAL
	for i, c := range cmds {
		if redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		sent, err := run(again, true)
		if err != nil && !answered(sent) {
			return outcome{err: f.named(err), answered: isReply(err)}
		}
		for j, i := range again {
			cmds[i] = sent[j]
		}
	}
	out := outcome{grants: make([]lease.Grant, len(due)), errs: make([]error, len(due))}
	for i, c := range cmds {
		if err := c.Err(); err != nil {
			out.errs[i] = err
		} else {
			out.grants[i], out.errs[i] = parseGrant(c.Val(), reqs[i])
		}
	}
	return out
}

// answered reports whether Redis answered any of cmds: with a reply, or
// an error of its own (go-redis sets the error of a pipeline that got no
// answer on each command, or on none).
func answered(cmds []*redis.Cmd) bool {
	for _, c := range cmds {
		if c.Err() == nil && c.Val() != nil || isReply(c.Err()) {
			return true
		}
	}
	return false
}

// isReply reports whether err is an error Redis answered (an error reply),
// rather than one of reaching it.
func isReply(err error) bool {
	var r redis.Error
	return errors.As(err, &r)
}

// named returns err, an error for every renewal that Redis answered (it
// refused the connection: credentials, the database), with the database
// the URL selects named if not 0: New cannot know how many a server has.
func (f *Fleet) named(err error) error {
	if f.db == 0 || !isReply(err) {
		return err
	}
	return fmt.Errorf("%w (the URL selects database %d: a server has databases 0 to its \"databases\" setting less one, 0 to 15 by default; a Redis Cluster, database 0 alone)", err, f.db)
}

// report logs a failure to renew once, and the first success after it:
// for all the budgets (out.err), and for budgets whose renewals Redis
// refused while it answered others (a script's error, or a reply that is
// not a grant), once per error, however many budgets it refuses and
// whichever rounds renew them, until none is refused with it.
func (f *Fleet) report(out outcome, due []*budget) {
	switch {
	case out.err != nil && !f.failing && out.answered:
		f.failing = true
		f.log.Warn("fleetbudget: cannot renew the leases of the fleet's retry budgets, Redis refused them: each process spends its share of them (the fleet's floors divided by the fleet's size) once its lease expires, until a renewal succeeds",
			"redis", f.where, "err", out.err)
	case out.err != nil && !f.failing:
		f.failing = true
		f.log.Warn("fleetbudget: cannot renew the leases of the fleet's retry budgets: each process spends its share of them (the fleet's floors divided by the fleet's size) once its lease expires, until Redis answers",
			"redis", f.where, "err", out.err)
	case out.err == nil && f.failing:
		f.failing = false
		f.log.Info("fleetbudget: the leases of the fleet's retry budgets are renewed again", "redis", f.where)
	}
	if out.err != nil {
		return
	}
	for i, b := range due {
		var fault string
		switch err := out.errs[i]; {
		case err == nil:
		case isReply(err) || errors.Is(err, errNotGrant):
			fault = err.Error()
		default:
			continue // the connection broke after other replies: as no answer
		}
		if fault == b.fault {
			continue
		}
		if b.fault != "" {
			if f.faults[b.fault]--; f.faults[b.fault] == 0 {
				delete(f.faults, b.fault)
				f.log.Info("fleetbudget: the leases of the fleet's retry budgets are renewed again", "redis", f.where, "budget", b.name, "was", b.fault)
			}
		}
		if fault != "" {
			if f.faults[fault]++; f.faults[fault] == 1 {
				f.log.Warn("fleetbudget: cannot renew the lease of a retry budget, Redis refused it: each process spends its share of it once its lease expires, until a renewal succeeds",
					"redis", f.where, "budget", b.name, "err", fault)
			}
		}
		b.fault = fault
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
