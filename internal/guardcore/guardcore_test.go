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
	if f, r, over, refused := c.State(&m, now); f != 100 || r != 12 || !over || refused != 1 {
		t.Errorf("State = %d, %d, %v, %d; want 100, 12, true, 1", f, r, over, refused)
	}
	// The 100 first tries and 9 retries were counted in the bucket of 0 s,
	// which leaves the window at 10 s: the 3 retries left are then fewer
	// than MinRetries.
	for _, tc := range []struct {
		at   time.Duration
		want bool
	}{{9900 * time.Millisecond, true}, {10 * time.Second, false}} {
		c.Count(&m, key+2, tc.at, false) // another client's first try
		if _, _, over, _ := c.State(&m, tc.at); over != tc.want {
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
	var places []*Window
	for j := range probes {
		places = append(places, c.Count(&m, key(j), 0, false))
	}
	for j, w := range places {
		if w != &c.clients[1+j].w {
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
	if w := c.Count(&m, key(probes), time.Second, false); w != &c.clients[1].w {
		t.Errorf("a window later client %d counts in %p, want place 1, given up", probes, w)
	}
	if f, r := c.clients[1].w.sum(c.epoch(time.Second)); f != 1 || r != 0 {
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
