package guardcore

import (
	"strings"
	"testing"
	"time"
)

func newCore(t *testing.T, p Params) *Core {
	t.Helper()
	c, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRefusesOnGivenTimes drives a Core by times given, as the simulator
// does: a client's 100 first tries, then failing retries a second apart,
// refused from the 12th (12 > 10% of 112), until the retries leave the
// window.
func TestRefusesOnGivenTimes(t *testing.T) {
	c := newCore(t, Params{})
	var m Method
	const key = 42
	now := time.Duration(0)
	for range 100 {
		c.Count(&m, key, now, false)
	}
	for i := 1; i <= 12; i++ {
		now = time.Duration(i) * 100 * time.Millisecond
		cw := c.Count(&m, key, now, true)
		if got, want := c.Refuses(&m, cw, now), i == 12; got != want {
			t.Errorf("retry %d at %v: Refuses = %v, want %v", i, now, got, want)
		}
	}
	// Each retry let through was expected, and matched by the next one: the
	// last was refused, so nothing is expected.
	if f, r, x, over, refused := c.State(&m, now); f != 100 || r != 12 || x != 0 || !over || refused != 1 {
		t.Errorf("State = %d, %d, %d, %v, %d; want 100, 12, 0, true, 1", f, r, x, over, refused)
	}
	// The 100 first tries and 9 retries were counted in the bucket of 0 s,
	// which leaves the window at 10 s: the 3 retries left are then fewer
	// than MinRetries.
	for _, tc := range []struct {
		at   time.Duration
		want bool
	}{{9900 * time.Millisecond, true}, {10 * time.Second, false}} {
		c.Count(&m, key+2, tc.at, false) // another client's first try
		if _, _, _, over, _ := c.State(&m, tc.at); over != tc.want {
			t.Errorf("at %v: over = %v, want %v", tc.at, over, tc.want)
		}
	}
}

// TestClientsApart: one client's retries do not make another's failures
// refused, though the method is over its share.
func TestClientsApart(t *testing.T) {
	c := newCore(t, Params{MinRetries: 1})
	var m Method
	for range 10 {
		c.Count(&m, 7, 0, false)
		c.Count(&m, 9, 0, false)
	}
	for range 5 {
		c.Count(&m, 7, 0, true)
	}
	quiet := c.Count(&m, 9, 0, false)
	if c.Refuses(&m, quiet, 0) {
		t.Error("a client with no retries was refused")
	}
	if noisy := c.Count(&m, 7, 0, true); !c.Refuses(&m, noisy, 0) {
		t.Error("the client retrying 6 times in 16 attempts was not refused")
	}
}

// TestTable checks the table of clients: a key's places are probes places
// from its own; a client that finds them all taken counts in the overflow,
// shared with every other such client; a place idle for a whole window is
// given to the next client that finds none.
func TestTable(t *testing.T) {
	c := newCore(t, Params{Window: time.Second})
	var m Method
	key := func(j int) uint64 { return uint64(j)*ClientSlots + 1 } // all start at place 1
	var places []*Counts
	for j := range probes {
		places = append(places, c.Count(&m, key(j), 0, false))
	}
	for j, w := range places {
		if w != &c.clients[1+j].c {
			t.Errorf("client %d counts in place %p, want place %d", j, w, 1+j)
		}
		if again := c.Count(&m, key(j), 0, false); again != w {
			t.Errorf("client %d moved from %p to %p", j, w, again)
		}
	}
	a, b := c.Count(&m, key(probes), 0, true), c.Count(&m, key(probes+1), 0, true)
	if a != &c.overflow || b != &c.overflow {
		t.Errorf("clients past their places count in %p and %p, want the overflow %p", a, b, &c.overflow)
	}
	// A window later the places are idle: the next client takes one over.
	if w := c.Count(&m, key(probes), time.Second, false); w != &c.clients[1].c {
		t.Errorf("a window later client %d counts in %p, want place 1, given up", probes, w)
	}
	if f, r := c.clients[1].c.w.sum(c.epoch(time.Second)); f != 1 || r != 0 {
		t.Errorf("the place taken over holds %d first tries and %d retries, want its new client's 1 and 0", f, r)
	}
}

func TestNewErrors(t *testing.T) {
	_, err := New(Params{Share: 1.5, Window: time.Millisecond, MinRetries: -1})
	for _, want := range []string{"Options.Share (1.5)", "Options.Window (1ms)", "Options.MinRetries (-1)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New error = %v, want one naming %s", err, want)
		}
	}
	c := newCore(t, Params{})
	if c.share != DefaultShare || c.width != int64(DefaultWindow/buckets) || c.minRetries != DefaultMinRetries {
		t.Errorf("New(Params{}) = share %v, bucket %v, min %d; want the defaults", c.share, time.Duration(c.width), c.minRetries)
	}
}

// steady fills the window of a new Core with a client's 100 successful
// first tries in each bucket, and returns it.
func steady(t *testing.T, m *Method, key uint64) *Core {
	c := newCore(t, Params{})
	for b := range buckets {
		for range 100 {
			c.Count(m, key, time.Duration(b)*time.Second, false)
		}
	}
	return c
}

// failures makes n first tries of the client key that fail at time at,
// and returns how many were let through.
func failures(c *Core, m *Method, key uint64, at time.Duration, n int) (let int) {
	for range n {
		if cc := c.Count(m, key, at, false); !c.Refuses(m, cc, at) {
			let++
		}
	}
	return let
}

// TestExpectsAndPaces is the start of an outage: a client's 100 successful
// first tries in each bucket of a full window, then 200 first tries that
// fail, in bucket 9 and again in bucket 10. The failures let through count
// at once as retries expected, so the guard does not wait a backoff for
// their retries to see the demand. Bucket 9 lets failures through until
// the retries expected are half the window's share (2·k > 10% of
// first + 2·k: 67 by 1 200 first tries); from then on a bucket lets through
// at most Share of a bucket's attempts (10·k ≤ 10% of first + 10·k,
// first ≥ 90·k), where the window alone would let through 133.
func TestExpectsAndPaces(t *testing.T) {
	var m Method
	const key = 42
	c := steady(t, &m, key)
	at := 9500 * time.Millisecond
	if let := failures(c, &m, key, at, 200); let != 67 {
		t.Errorf("bucket 9 let %d failures through, want 67", let)
	}
	if f, r, x, over, _ := c.State(&m, at); f != 1200 || r != 0 || x != 67 || !over {
		t.Errorf("State = %d, %d, %d, %v; want 1200 first tries, 0 retries, 67 expected, over", f, r, x, over)
	}

	// The next bucket lets through its own share: bucket 0 has left the
	// window, which holds 1 100 first tries, then 1 300; 15 by 1 260.
	at = 10500 * time.Millisecond
	let := failures(c, &m, key, at, 200)
	_, _, expected, _, _ := c.State(&m, at)
	if let != 15 || expected != 67+15 {
		t.Errorf("bucket 10 let %d failures through, %d expected in all; want 15 and 82", let, expected)
	}

	// Their retries come: each is counted once, as a retry, and expected no
	// more; a retry beyond them (a client that ignored a refusal) is a
	// retry that was not expected.
	at = 11 * time.Second
	for range expected + 1 {
		c.Count(&m, key, at, true)
	}
	if _, r, x, _, _ := c.State(&m, at); r != expected+1 || x != 0 {
		t.Errorf("after %d retries: State = %d retries, %d expected; want %d, 0", expected+1, r, x, expected+1)
	}
}

// TestSpikeKeepsRetries: a spike of 50 failures in one bucket of a window
// that holds no retries is let through whole (50 expected are under half
// the share of 1 050 first tries), where pacing alone would let 12.
func TestSpikeKeepsRetries(t *testing.T) {
	var m Method
	c := steady(t, &m, 42)
	if let := failures(c, &m, 42, 9500*time.Millisecond, 50); let != 50 {
		t.Errorf("a spike of 50 failures: %d let through, want all", let)
	}
}
