// Package guardcore is the retry guard's counting and decision without
// gRPC: the first tries and retries of each method, by criticality, and of
// each (method, client) pair over a sliding window, the retries expected
// (failures let through whose retries have not come), the retries refunded
// because they were served, the schedule of paced retries, and what a
// retriable failure is to carry: nothing, a pushback wait, or −1. Package
// guard drives it from its server interceptors and the real clock; the fleet
// simulator (cmd/internal/sim) from its model clock. It reads no clock: every
// time is an argument, the time since the Core was made.
package guardcore

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// The defaults of Params (guard.Options).
const (
	DefaultShare            = 0.1
	DefaultWindow           = 10 * time.Second
	DefaultMinRetries       = 10
	DefaultClientMinRetries = 10
)

// Params are the counting settings of a guard: guard.Options less what the
// interceptors read, with the same meaning, defaults and bounds. The zero
// value is the defaults.
type Params struct {
	Share            float64
	Window           time.Duration
	MinRetries       int
	ClientMinRetries int
}

// A Rank is how critical a call is, lowest first. Package guard reads it
// from the call's metadata: RankSheddable for the SRE book's SHEDDABLE,
// RankDefault for SHEDDABLE_PLUS and for a call that says nothing,
// RankCritical for CRITICAL and CRITICAL_PLUS.
type Rank uint8

const (
	RankSheddable Rank = iota
	RankDefault
	RankCritical
	Ranks = iota // the number of ranks
)

// A Core counts attempts and decides what failures carry for the methods
// it is given (see Count, Failed and Served), keeping the counts of (method,
// client) pairs in a sketch of cells (see Client). It is safe for concurrent
// use. Count and Served neither lock nor allocate; Failed takes its rank's
// schedule's lock, and makes the schedule on a method's first paced failure.
type Core struct {
	share      float64
	width      int64 // of a bucket, in nanoseconds
	minRetries int64
	clientMin  int64
	cells      *[rows][CellsPerRow]Counts
}

// Counts are what a Core counts of a method's rank or of a cell of pairs:
// the attempts in the window, the retries it expects, and the retries
// refunded and answers shed in the window. The zero value counts nothing.
type Counts struct {
	w Window   // first tries, retries
	x Expected // failures let through, retries matched with them
	r Window   // retries refunded, answers shed
}

// tally returns what k holds in epoch e's window.
func (k *Counts) tally(e int64) tally {
	var t tally
	t.first, t.retries, t.since = k.w.span(e)
	t.refunds, t.shed = k.r.sum(e)
	t.pending, t.expired = k.x.sum(e), k.x.expired(e)
	return t
}

// Method is the counts of one method: its zero value counts nothing yet.
type Method struct {
	ranks                 [Ranks]Counts
	saves                 [Ranks]Window // calls served by a retry, refunded and not (Served)
	refusals              [Ranks]Window // failures refused
	pace                  paces
	paced, refused, freed atomic.Int64
	over                  atomic.Bool  // as last seen (Change)
	shed                  atomic.Int64 // shedding's answer, and the epoch it is of: (epoch+1)<<1 | answer
	checked               atomic.Int64 // the epoch Count last looked at over, plus one
}

// A Change is a change of a method's state that a call saw: it became over
// (Core.over) or went back under.
type Change uint8

const (
	NoChange Change = iota
	BecameOver
	WentBack
)

// New returns a Core for p, or an error naming each invalid field of p
// with its value, as guard.Options's.
func New(p Params) (*Core, error) {
	var errs []error
	switch {
	case p.Share == 0:
		p.Share = DefaultShare
	case math.IsNaN(p.Share) || p.Share < 0 || p.Share > 1:
		errs = append(errs, fmt.Errorf("guard: Options.Share (%v) must be in (0, 1]", p.Share))
	}
	switch {
	case p.Window == 0:
		p.Window = DefaultWindow
	case p.Window < 10*time.Millisecond:
		errs = append(errs, fmt.Errorf("guard: Options.Window (%v) must be at least 10ms", p.Window))
	}
	switch {
	case p.MinRetries == 0:
		p.MinRetries = DefaultMinRetries
	case p.MinRetries < 0:
		errs = append(errs, fmt.Errorf("guard: Options.MinRetries (%d) must not be negative", p.MinRetries))
	}
	switch {
	case p.ClientMinRetries == 0:
		p.ClientMinRetries = DefaultClientMinRetries
	case p.ClientMinRetries < 0:
		errs = append(errs, fmt.Errorf("guard: Options.ClientMinRetries (%d) must not be negative", p.ClientMinRetries))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Core{
		share:      p.Share,
		width:      int64(p.Window / buckets),
		minRetries: int64(p.MinRetries),
		clientMin:  int64(p.ClientMinRetries),
		cells:      new([rows][CellsPerRow]Counts),
	}, nil
}

// Count counts an attempt of m of rank r, a retry or a first try, by the
// (method, client) pair whose key is key (a hash of both, any value), at
// time now, and returns the pair's cells, for Failed and Served. A retry is
// matched with a failure let through within the horizon, if any, so that it
// is expected no more: it is counted once, now as a retry. While m is over,
// the first attempt of each bucket looks whether it went back.
func (c *Core) Count(m *Method, key uint64, now time.Duration, retry bool, r Rank) (Client, Change) {
	e := c.epoch(now)
	cl := c.client(key)
	k := &m.ranks[r]
	k.w.add(e, retry)
	cl[0].w.add(e, retry)
	cl[1].w.add(e, retry)
	if retry {
		a, b := cl[0].x.arrive(e), cl[1].x.arrive(e)
		if a && b {
			k.x.arrive(e)
		}
	}
	if !m.over.Load() || m.checked.Load() == e+1 {
		return cl, NoChange
	}
	m.checked.Store(e + 1)
	return cl, c.change(m, c.tallies(m, e))
}

// A Verdict is what a retriable failure carries: nothing (the zero
// Verdict), a wait before its retry (Paced, Wait ≥ 0: gRFC A6's pushback),
// or a refusal (Refused: pushback −1).
type Verdict struct {
	Wait    time.Duration
	Paced   bool
	Refused bool
}

// Failed decides a retriable failure of an attempt of m of rank r, by the
// pair whose cells Count returned as cl, at time now, after prev attempts
// of its call, whose deadline is at deadline (0: none); shed says the
// handler answered it RESOURCE_EXHAUSTED, its own measure of overload.
//
// Each rank of m is paced apart, by its own counts: each failure takes a
// slot of the rank's schedule, whose slots come Core.spacing apart (Share
// of the rank's attempts per Window, each slot weighted by the harm it
// weighs). It takes the earliest free one from now or, for a call with a
// deadline, once retries have arrived, from half its time left shared
// among the attempts it may have left (as many as 5 allow), weighted the
// same: a slot free at once lets the failure through, a later one paces
// it (Verdict.Wait). A slot past half the time to the deadline (a retry
// must come with as much time left as it waited), or more than a Window
// away, does not fit: the failure is then refused, unless the rank is
// quiet (its harm under MinRetries, or its counts begun in this bucket:
// nothing seen yet to judge by), whose failures are only paced. A noisy
// pair (its harm more than ClientMinRetries past 4 times its fair part of
// the method's, in every cell: a client that ignores pushback, or only
// retries) is refused without taking a slot, so that it cannot crowd
// the others out of the schedule, unless the rank's harm is under
// MinRetries.
func (c *Core) Failed(m *Method, cl Client, now, deadline time.Duration, prev int64, r Rank, shed bool) (Verdict, Change) {
	e := c.epoch(now)
	k := &m.ranks[r]
	if shed {
		k.r.addN(e, true, 1)
	}
	ts := c.tallies(m, e)
	ch := c.change(m, ts)
	t := ts[r]
	if r == RankSheddable && c.overloaded(ts) {
		c.refuse(m, e, r) // the server sheds: the retry would not be served
		return Verdict{Refused: true}, ch
	}
	quiet := t.harm() < float64(c.minRetries)
	if !quiet && c.noisy(cl, e, ts) {
		c.refuse(m, e, r)
		return Verdict{Refused: true}, ch
	}
	window := c.width * buckets
	limit, from := window, int64(now)
	if deadline > 0 {
		left := int64(deadline - now)
		limit = min(limit, left/2)
		// Spread the call's retries over its time: a failure of a call
		// with time to wait asks for a slot no sooner than half its time
		// left shared among the attempts it may have left (grpc-go caps a
		// call at 5), weighted as the slots are.
		if t.retries > 0 { // not before a retry arrived: only from what is seen
			from += int64(float64(left/(2*(max(4-prev, 1)+1))) * c.weight(t))
		}
	}
	wait, ok := m.pace.of(r).slot(int64(now), min(from, int64(now)+limit), c.spacing(t, now), limit)
	// A rank whose counts begun in this bucket is quiet too: nothing seen
	// yet to judge by.
	if !ok && !quiet && t.since < e {
		c.refuse(m, e, r)
		return Verdict{Refused: true}, ch
	}
	c.let(m, cl, e, r)
	if wait == 0 {
		return Verdict{}, ch
	}
	m.paced.Add(1)
	return Verdict{Wait: time.Duration(wait), Paced: true}, ch
}

// Let counts a retriable failure of an attempt of m of rank r, by the pair
// whose cells are cl, at time now, that the guard lets through without
// deciding (its status says when to retry): its retry is expected. shed is
// as for Failed.
func (c *Core) Let(m *Method, cl Client, now time.Duration, r Rank, shed bool) {
	e := c.epoch(now)
	if shed {
		m.ranks[r].r.addN(e, true, 1)
	}
	c.let(m, cl, e, r)
}

// refuse counts a failure of rank r refused in epoch e.
func (c *Core) refuse(m *Method, e int64, r Rank) {
	m.refused.Add(1)
	m.refusals[r].add(e, false)
}

// let counts a failure of rank r let through in epoch e: its retry is
// expected.
func (c *Core) let(m *Method, cl Client, e int64, r Rank) {
	m.ranks[r].x.let(e)
	cl[0].x.let(e)
	cl[1].x.let(e)
}

// Served counts the answer of an attempt of m of rank r, by the pair whose
// cells are cl, at time now, that was served (not a retriable failure, its
// caller still waiting), after prev attempts of its call: a retry served is
// refunded, and so are the retries of its call before it (its prev in all,
// at most the unrefunded retries of m's rank and of each cell, in the
// window). A served retry costs nothing unless the server is past what it
// serves (m's answers shed in the window at least MinRetries and more than
// Share of its attempts): then only the retries of calls of rank
// RankCritical and above are refunded, and the others count.
func (c *Core) Served(m *Method, cl Client, now time.Duration, prev int64, r Rank) {
	if prev < 1 {
		return
	}
	e := c.epoch(now)
	k := &m.ranks[r]
	if r < RankCritical && c.shedding(m, e) {
		m.saves[r].add(e, true)
		return
	}
	n := int64(1) // the retry itself, counted when it arrived
	if prev > 1 {
		n = min(prev, k.unserved(e))
		for _, cell := range cl {
			n = min(n, cell.unserved(e))
		}
		if n <= 0 {
			return
		}
	}
	k.r.addN(e, false, n)
	m.saves[r].add(e, false)
	cl[0].r.addN(e, false, n)
	cl[1].r.addN(e, false, n)
	m.freed.Add(n)
}

// unserved returns k's retries in epoch e's window not refunded.
func (k *Counts) unserved(e int64) int64 {
	_, retries := k.w.sum(e)
	refunds, _ := k.r.sum(e)
	return max(retries-refunds, 0)
}

// shedding is overloaded for m in epoch e, reading only what it needs, at
// most once a bucket (a served retry asks it: a failure's answer shed in
// this bucket is seen from the next).
func (c *Core) shedding(m *Method, e int64) bool {
	if v := m.shed.Load(); v>>1 == e+1 {
		return v&1 == 1
	}
	var t tally
	for i := range m.ranks {
		first, retries := m.ranks[i].w.sum(e)
		_, shed := m.ranks[i].r.sum(e)
		t.first, t.retries, t.shed = t.first+first, t.retries+retries, t.shed+shed
	}
	on := t.overloaded(c.share, c.minRetries)
	v := (e + 1) << 1
	if on {
		v |= 1
	}
	m.shed.Store(v)
	return on
}

// tallies returns the tally of each of m's ranks in epoch e.
func (c *Core) tallies(m *Method, e int64) [Ranks]tally {
	var ts [Ranks]tally
	for i := range m.ranks {
		t := m.ranks[i].tally(e)
		t.saved, t.unrefunded = m.saves[i].recent(e)
		refused, _ := m.refusals[i].sum(e)
		t.failures = m.ranks[i].x.lets(e) + refused
		ts[i] = t
	}
	return ts
}

// over reports whether one of the ranks of tallies ts is over (tally.over,
// by MinRetries): the guard is holding the method's retries back.
func (c *Core) over(ts [Ranks]tally) bool {
	for _, t := range ts {
		if t.over(c.share, c.minRetries) {
			return true
		}
	}
	return false
}

// overloaded reports whether the server is past what it serves, by its own
// measure, in tallies ts: the answers its handler shed (RESOURCE_EXHAUSTED)
// in the window at least MinRetries and more than Share of the method's
// attempts.
func (c *Core) overloaded(ts [Ranks]tally) bool {
	var all tally
	for _, t := range ts {
		all.add(t)
	}
	return all.overloaded(c.share, c.minRetries)
}

// change records whether m is over by tallies ts (near at its lowest rank)
// and returns how that changed.
func (c *Core) change(m *Method, ts [Ranks]tally) Change {
	over := c.over(ts)
	if m.over.Load() == over || !m.over.CompareAndSwap(!over, over) {
		return NoChange
	}
	if over {
		return BecameOver
	}
	return WentBack
}

// spacing returns the time between two slots of the pace of a rank that
// holds t at time now, in nanoseconds: a slot for each retry Share allows
// (Share of the rank's attempts that arrived, counted since its oldest
// bucket in the window, over that time, at least a millisecond), each
// weighted by the harm it weighs (Core.weight), so that the calls whose
// retries serve them cost little. In an outage, where no
// retry is served, that is Share/(1−Share) of the first tries.
func (c *Core) spacing(t tally, now time.Duration) int64 {
	window := c.width * buckets
	elapsed := float64(min(max(int64(now)-t.since*c.width, int64(time.Millisecond)), window))
	allowed := max(float64(t.first+t.retries)*c.share*float64(window)/elapsed, float64(c.minRetries), 1)
	return int64(float64(window) / allowed * c.weight(t)) // 0 for a Share of 1: never paced apart
}

// weight returns the harm a slot of a rank that holds t weighs: the share
// of the calls that retried and ended that ended failed (tally.failing),
// or, if less, the share of the arrived retries not refunded (tally.doing:
// it learns sooner, before calls end).
func (c *Core) weight(t tally) float64 { return min(t.failing(), t.doing()) }

// Totals are what State returns of a method.
type Totals struct {
	// FirstTries, Retries and Expected are in the window now.
	FirstTries, Retries, Expected int64
	// Over says the guard holds back the retries of one of the method's
	// ranks: the harm its failures ask for is more than Share allows.
	Over bool
	// Paced, Refused and Refunded count since the method was made: the
	// failures paced, those refused, and the retries refunded.
	Paced, Refused, Refunded int64
}

// State returns what c counts of m at time now.
func (c *Core) State(m *Method, now time.Duration) Totals {
	ts := c.tallies(m, c.epoch(now))
	var all tally
	for _, t := range ts {
		all.add(t)
	}
	return Totals{
		FirstTries: all.first, Retries: all.retries, Expected: all.pending,
		Over:  c.over(ts),
		Paced: m.paced.Load(), Refused: m.refused.Load(), Refunded: m.freed.Load(),
	}
}

// Activity returns m's attempts in the window at time now: how busy it is,
// for a table of methods that gives the idlest place up.
func (c *Core) Activity(m *Method, now time.Duration) int64 {
	e := c.epoch(now)
	var n int64
	for i := range m.ranks {
		f, r := m.ranks[i].w.sum(e)
		n += f + r
	}
	return n
}

// epoch returns the number of the bucket of time now.
func (c *Core) epoch(now time.Duration) int64 { return int64(now) / c.width }

// Params returns c's Share and Window, its defaults applied.
func (c *Core) Params() (share float64, window time.Duration) {
	return c.share, time.Duration(c.width * buckets)
}
