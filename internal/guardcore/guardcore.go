// Package guardcore is the retry guard's counting and decision without
// gRPC: the first tries and retries of each method and of each of its
// clients over a sliding window, the retries they are expected to make (the
// failures let through whose retries have not come), and whether a
// retriable failure is to carry pushback −1. Package guard drives it from
// its server interceptors and the real clock; the fleet simulator
// (cmd/internal/sim) from its model clock. It reads no clock: every time is
// an argument, the time since the Core was made.
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
	DefaultShare      = 0.1
	DefaultWindow     = 10 * time.Second
	DefaultMinRetries = 10
)

// ClientSlots is the size of the table of per-client counts, shared by
// every method (past it, clients share one count), and probes how many
// places a client may try in it.
const (
	ClientSlots = 4096
	probes      = 8
)

// Params are the counting settings of a guard: guard.Options less the codes
// it marks, with the same meaning, defaults and bounds. The zero value is
// the defaults.
type Params struct {
	Share      float64
	Window     time.Duration
	MinRetries int
}

// A Core counts attempts and decides refusals for the methods it is given
// (see Count and Refuses), keeping the counts of up to ClientSlots clients
// (of a method each) in one table: a client idle for a whole window gives
// its place up, and clients that find none share one count. It is safe for
// concurrent use; no call locks or allocates.
type Core struct {
	share      float64
	width      int64 // of a bucket, in nanoseconds
	minRetries int64
	clients    []client
	overflow   Counts // the clients that found no place in clients
}

// client is a place in the table of clients: the key of the client that
// holds it (never 0; 0 for a free place) and its counts.
type client struct {
	key atomic.Uint64
	c   Counts
}

// Counts are what a Core counts of a method or of a client: the attempts in
// the window, and the retries it expects. The zero value counts nothing.
type Counts struct {
	w Window
	x Expected
}

// Method is the counts of one method: its zero value counts nothing yet.
type Method struct {
	c       Counts
	refused atomic.Int64
}

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
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Core{
		share:      p.Share,
		width:      int64(p.Window / buckets),
		minRetries: int64(p.MinRetries),
		clients:    make([]client, ClientSlots),
	}, nil
}

// Count counts an attempt of m, a retry or a first try, by the client whose
// key is key (a hash of the client and of m, any value), at time now, and
// returns the client's counts, for Refuses. A retry is matched with a
// failure of its client let through within the horizon, if any, so that it
// is expected no more: it is counted once, now as a retry.
func (c *Core) Count(m *Method, key uint64, now time.Duration, retry bool) *Counts {
	e := c.epoch(now)
	cc := c.client(key|1, e)
	m.c.w.add(e, retry)
	cc.w.add(e, retry)
	if retry && cc.x.arrive(e) {
		m.c.x.arrive(e)
	}
	return cc
}

// Refuses reports whether a retriable failure of an attempt of m, by the
// client whose counts Count returned as cc, at time now, is to carry
// pushback −1, and counts the refusal if so: it is while both m, with at
// least MinRetries retries counted and expected, and the client are over
// (see overs). A failure it does not refuse is expected to be retried
// (Expected).
func (c *Core) Refuses(m *Method, cc *Counts, now time.Duration) bool {
	e := c.epoch(now)
	if c.overs(&m.c, e, c.minRetries) && c.overs(cc, e, 0) {
		m.refused.Add(1)
		return true
	}
	m.c.x.let(e)
	cc.x.let(e)
	return false
}

// overs reports whether the counts k are over in epoch e: their retries in
// the window and those expected are at least minRetries, and either more
// than Share of their attempts and those expected, or more than half that
// share while the failures let through in bucket e are more than Share of a
// bucket's attempts (the first tries in the window shared among its
// buckets, or among those since the Core was made in its first window). So
// once a window is half used, what it allows is let through a bucket at a
// time rather than all at once, and a short spike of failures in a window
// that holds few retries keeps its retries.
func (c *Core) overs(k *Counts, e int64, minRetries int64) bool {
	first, retries := k.sum(e)
	switch {
	case retries < minRetries:
		return false
	case over(first, retries, c.share):
		return true
	case !over(first, 2*retries, c.share):
		return false
	}
	lets, _ := counts(&k.x.b[e%horizon], e)
	return over(first, min(e+1, buckets)*lets, c.share)
}

// State returns m's first tries and retries in the window at time now, the
// retries it expects, whether it is over (Refuses refuses the failures of
// its clients that are over too), and the refusals counted since m was
// made.
func (c *Core) State(m *Method, now time.Duration) (first, retries, expected int64, isOver bool, refused int64) {
	e := c.epoch(now)
	first, retries = m.c.w.sum(e)
	return first, retries, m.c.x.sum(e), c.overs(&m.c, e, c.minRetries), m.refused.Load()
}

// sum returns the first tries counted in epoch e's window, and the retries
// counted and expected.
func (k *Counts) sum(e int64) (first, retries int64) {
	first, retries = k.w.sum(e)
	return first, retries + k.x.sum(e)
}

// epoch returns the number of the bucket of time now.
func (c *Core) epoch(now time.Duration) int64 { return int64(now) / c.width }

// client returns the counts of the client whose key is key (never 0), in
// epoch e: its place in the table, found within probes places of the key's
// own, or, failing that, a place another client left idle for a whole
// window, or, failing that, the overflow count. (A client that comes back
// to a place taken over that very moment may count one attempt in the new
// client's.)
func (c *Core) client(key uint64, e int64) *Counts {
	for i := range uint64(probes) {
		s := &c.clients[(key+i)%ClientSlots]
		switch k := s.key.Load(); {
		case k == key:
			return &s.c
		case k == 0 && s.key.CompareAndSwap(0, key):
			return &s.c
		}
	}
	for i := range uint64(probes) {
		s := &c.clients[(key+i)%ClientSlots]
		k := s.key.Load()
		if k == key {
			return &s.c
		}
		if f, r := s.c.w.sum(e); f+r == 0 && s.key.CompareAndSwap(k, key) {
			return &s.c
		}
	}
	return &c.overflow
}

// Params returns c's Share and Window, its defaults applied.
func (c *Core) Params() (share float64, window time.Duration) {
	return c.share, time.Duration(c.width * buckets)
}
