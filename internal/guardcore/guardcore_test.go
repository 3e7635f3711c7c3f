package guardcore

import (
	"math/rand/v2"
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

func TestNewErrors(t *testing.T) {
	_, err := New(Params{Share: 1.5, Window: time.Millisecond, MinRetries: -1, ClientMinRetries: -2})
	for _, want := range []string{"Options.Share (1.5)", "Options.Window (1ms)", "Options.MinRetries (-1)", "Options.ClientMinRetries (-2)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New error = %v, want one naming %s", err, want)
		}
	}
	c := newCore(t, Params{})
	if c.share != DefaultShare || c.width != int64(DefaultWindow/buckets) || c.minRetries != DefaultMinRetries || c.clientMin != DefaultClientMinRetries {
		t.Errorf("New(Params{}) = share %v, bucket %v, min %d, client min %d; want the defaults", c.share, time.Duration(c.width), c.minRetries, c.clientMin)
	}
}

// TestTally checks harm's arithmetic: retries served cost nothing, those
// still expected weigh as the arrived ones do, and the share that paces
// them weighs the calls that ended.
func TestTally(t *testing.T) {
	for _, tc := range []struct {
		name          string
		t             tally
		harm, failing float64
		over          bool
	}{
		{"nothing", tally{}, 0, 1, false},
		{"an outage: every retry counts, expected ones too", tally{first: 100, retries: 20, pending: 10, failures: 30}, 30, 1, true},
		{"served retries are refunded", tally{first: 100, retries: 20, refunds: 15, pending: 4, failures: 30, saved: 15, expired: 1}, 5 + 4*5.0/20, 1.0 / 16, false},
		{"refunds past the retries count nothing", tally{first: 10, retries: 2, refunds: 5, pending: 3}, 0, 1, false},
		{"served while overloaded: counted", tally{first: 100, retries: 20, failures: 30, unrefunded: 15, expired: 1}, 20, 1, true},
	} {
		if h, f := tc.t.harm(), tc.t.failing(); h != tc.harm || f != tc.failing {
			t.Errorf("%s: harm, failing = %v, %v; want %v, %v", tc.name, h, f, tc.harm, tc.failing)
		}
		if got := tc.t.over(0.1, 10); got != tc.over {
			t.Errorf("%s: over = %v, want %v", tc.name, got, tc.over)
		}
	}
}

// TestSchedule: slots come a spacing apart from the earliest free time; a
// slot asked for later leaves the earlier times free; a slot past the limit
// is not taken; a smaller spacing fits new slots between the old ones.
func TestSchedule(t *testing.T) {
	var s schedule
	for i, want := range []int64{0, 30, 60} {
		if w, ok := s.slot(1000, 1000, 30, 200); !ok || w != want {
			t.Errorf("slot %d: %d, %v; want %d, true", i, w, ok, want)
		}
	}
	if w, ok := s.slot(1000, 1200, 30, 300); !ok || w != 200 {
		t.Errorf("a slot from 1200: %d, %v; want 200", w, ok)
	}
	if w, ok := s.slot(1000, 1000, 30, 300); !ok || w != 90 {
		t.Errorf("from now again: %d, %v; want 90, before the one at 1200", w, ok)
	}
	if w, ok := s.slot(1000, 1000, 30, 100); ok {
		t.Errorf("a fourth slot from now with a limit of 100: %d, taken", w)
	}
	if w, ok := s.slot(1000, 1000, 10, 100); !ok || w != 10 {
		t.Errorf("a spacing of 10: %d, %v; want 10, between 1000 and 1030", w, ok)
	}
	if w, ok := s.slot(5000, 5000, 0, 10); !ok || w != 0 {
		t.Errorf("no spacing: %d, %v; want 0, true", w, ok)
	}
	if w, ok := s.slot(5000, 5000, 30, 10); !ok || w != 0 || len(s.at) != 1 {
		t.Errorf("later: %d, %v, %d times kept; want 0, true, 1: the past ones dropped", w, ok, len(s.at))
	}
}

// TestFlakyServerKeepsRetries is the flaky server: far below
// capacity, 20% or 40% of attempts fail at random, 100 clients, 200
// calls a second, 10 s, each call with 5 attempts and a 2 s deadline, as
// grpc-go's built-in retry and this library's clients retry. Served retries
// cost nothing, so the guard fails no more calls than no guard, within the
// target: 2× as many, and 0.1% of the calls.
func TestFlakyServerKeepsRetries(t *testing.T) {
	for _, library := range []bool{false, true} {
		for _, p := range []float64{0.2, 0.4} {
			for seed := uint64(1); seed <= 3; seed++ {
				d := drive{clients: 100, rate: 200, length: 10 * time.Second, deadline: 2 * time.Second, answer: flaky(p), seed: seed, library: library}
				plain := d.run()
				d.core = newCore(t, Params{})
				g := d.run()
				if limit := 2*plain.failed + plain.calls/1000; g.failed > limit {
					t.Errorf("library %v, %.0f%% failing, seed %d: %d calls failed with the guard, %d without; want at most %d (paced %d, refused %d)",
						library, 100*p, seed, g.failed, plain.failed, limit, g.paced, g.refused)
				}
			}
		}
	}
}

// patient are the patient callers: 8 calls with 30 s deadlines,
// started in the outage of TestOutagePaces (5 s to 10 s).
var patient = []time.Duration{5500 * time.Millisecond, 6 * time.Second, 6500 * time.Millisecond, 7 * time.Second,
	7500 * time.Millisecond, 8 * time.Second, 8500 * time.Millisecond, 9 * time.Second}

// TestOutagePaces is a 5 s outage in the flaky server's traffic: the guard
// paces the retries at its share's rate, never more than twice that rate in
// any 100 ms while over (4.4 a tenth of a second here: 10% of 220 attempts
// a second, twice), and far fewer in all than without it; the patient
// callers are served after the outage, each paced retry within their
// deadline, where grpc-go's 5 attempts alone serve only the 2 started in
// its last 1.5 s.
func TestOutagePaces(t *testing.T) {
	for _, library := range []bool{false, true} {
		d := drive{clients: 100, rate: 200, length: 20 * time.Second, deadline: 2 * time.Second, answer: outage(5*time.Second, 10*time.Second),
			seed: 1, library: library, extra: patient, extraDeadline: 30 * time.Second}
		plain := d.run()
		d.core = newCore(t, Params{})
		g := d.run()
		t.Logf("library %v: %d retries at the server (%d without), %d calls failed (%d without), patient calls served %d (%d without), at most %d retries in 100 ms while over",
			library, g.retries, plain.retries, g.failed, plain.failed, g.extraOK, plain.extraOK, g.maxRetriesPer100msOver)
		if g.extraOK != len(patient) || plain.extraOK >= len(patient) {
			t.Errorf("library %v: %d patient calls served with the guard, %d without; want all with it", library, g.extraOK, plain.extraOK)
		}
		if g.maxRetriesPer100msOver > 4 {
			t.Errorf("library %v: %d retries in a 100 ms while over, want at most 4", library, g.maxRetriesPer100msOver)
		}
		if 10*g.retries > plain.retries {
			t.Errorf("library %v: %d retries at the server with the guard, %d without; want at most a tenth", library, g.retries, plain.retries)
		}
	}
}

// TestBrownoutShedsSheddableFirst is a brownout: the server sheds 40% of
// attempts with RESOURCE_EXHAUSTED, half the calls sheddable, half
// critical. Sheddable retries would be shed: refused; critical retries are
// served, and cost nothing: critical calls' failed share is at most a tenth
// of sheddable calls'.
func TestBrownoutShedsSheddableFirst(t *testing.T) {
	for _, library := range []bool{false, true} {
		d := drive{clients: 100, rate: 200, length: 10 * time.Second, deadline: 2 * time.Second, seed: 1, library: library, core: newCore(t, Params{}),
			answer: func(_ time.Duration, rng *rand.Rand) (bool, bool) { ok := rng.Float64() >= 0.4; return ok, !ok },
			rank: func(i int) Rank {
				if i%2 == 0 {
					return RankSheddable
				}
				return RankCritical
			}}
		g := d.run()
		shed := float64(g.failedByRank[RankSheddable]) / float64(g.callsByRank[RankSheddable])
		crit := float64(g.failedByRank[RankCritical]) / float64(g.callsByRank[RankCritical])
		t.Logf("library %v: sheddable calls failed %.1f%%, critical %.1f%%", library, 100*shed, 100*crit)
		if crit > shed/10 {
			t.Errorf("library %v: critical calls failed %.1f%%, sheddable %.1f%%; want at most a tenth", library, 100*crit, 100*shed)
		}
	}
}

// TestNoisyPairRefused: beside 20 pairs that call, one retries a failing
// call with no first tries at all: once its harm is ClientMinRetries, it is
// refused without taking a slot, and the others' failures are paced just
// behind one another.
func TestNoisyPairRefused(t *testing.T) {
	c := newCore(t, Params{})
	var m Method
	for i := range 2000 {
		c.Count(&m, uint64(i%20)<<32|uint64(i%20), time.Duration(i)*5*time.Millisecond, false, RankDefault)
	}
	now := 10 * time.Second
	const noisy = 99<<32 | 99
	var refused int
	for i := range 30 {
		cl, _ := c.Count(&m, noisy, now, true, RankDefault)
		if v, _ := c.Failed(&m, cl, now, 0, 0, RankDefault, false); v.Refused {
			refused++
		} else if i >= 10 {
			t.Errorf("noisy retry %d let through: %+v", i, v)
		}
	}
	if refused < 19 {
		t.Errorf("%d of the noisy pair's 30 failures refused, want 20", refused)
	}
	cl, _ := c.Count(&m, 3<<32|3, now, false, RankDefault)
	if v, _ := c.Failed(&m, cl, now, 0, 0, RankDefault, false); v.Refused || v.Wait > time.Second {
		t.Errorf("an honest pair's failure beside the noisy one: %+v, want a wait of about a slot", v)
	}
}

// TestServedRefunds: a retry served refunds itself and its call's retries
// before it, at most what its pair and rank counted; one forged as the
// billionth costs what a real one does; while the server sheds, only
// critical retries are refunded.
func TestServedRefunds(t *testing.T) {
	c := newCore(t, Params{})
	var m Method
	const key = 7<<32 | 7
	cl, _ := c.Count(&m, key, 0, false, RankDefault)
	for range 3 {
		cl, _ = c.Count(&m, key, 0, true, RankDefault)
	}
	c.Served(&m, cl, 0, 3, RankDefault)
	if s := c.State(&m, 0); s.Refunded != 3 {
		t.Errorf("a call served at its 4th attempt refunded %d, want 3", s.Refunded)
	}
	cl, _ = c.Count(&m, key, 0, true, RankDefault)
	c.Served(&m, cl, 0, 1_000_000_000, RankDefault)
	if s := c.State(&m, 0); s.Refunded != 4 {
		t.Errorf("a forged count refunded %d in all, want 4: the one retry left", s.Refunded)
	}

	// The server sheds 20 of 40 attempts: overloaded.
	var o Method
	for i := range 40 {
		cl, _ := c.Count(&o, key, 0, i%2 == 1, RankDefault)
		if i%2 == 0 {
			c.Failed(&o, cl, 0, 0, 0, RankDefault, true)
		}
	}
	cl, _ = c.Count(&o, key, 0, true, RankDefault)
	c.Served(&o, cl, 0, 1, RankDefault)
	cl, _ = c.Count(&o, key, 0, true, RankCritical)
	c.Served(&o, cl, 0, 1, RankCritical)
	if s := c.State(&o, 0); s.Refunded != 1 {
		t.Errorf("overloaded: %d refunded, want 1: the critical retry's", s.Refunded)
	}
	if v, _ := c.Failed(&o, cl, 0, 0, 0, RankSheddable, false); !v.Refused {
		t.Errorf("overloaded: a sheddable failure got %+v, want refused: the server would shed its retry", v)
	}
}

// TestOverAndBack: a method goes over when its failures ask for more harm
// than its share, and back once the retries after the outage are served;
// each change is seen once.
func TestOverAndBack(t *testing.T) {
	c := newCore(t, Params{Window: time.Second})
	var m Method
	var changes []Change
	note := func(ch Change) {
		if ch != NoChange {
			changes = append(changes, ch)
		}
	}
	at := func(i int) time.Duration { return time.Duration(i) * time.Millisecond }
	// An attempt a millisecond from 10 pairs: 1 s healthy, 0.5 s of
	// failures, then every other attempt a retry, served.
	for i := range 3000 {
		key := uint64(i%10)<<32 | uint64(i%10)
		cl, ch := c.Count(&m, key, at(i), i >= 1500 && i%2 == 0, RankDefault)
		note(ch)
		switch {
		case i >= 1000 && i < 1500:
			_, ch = c.Failed(&m, cl, at(i), 0, 0, RankDefault, false)
			note(ch)
		case i >= 1500 && i%2 == 0:
			c.Served(&m, cl, at(i), 1, RankDefault)
		}
	}
	if len(changes) != 2 || changes[0] != BecameOver || changes[1] != WentBack {
		t.Errorf("changes = %v, want [BecameOver WentBack]", changes)
	}
	if c.State(&m, at(2999)).Over {
		t.Error("over at the end")
	}
}
