package fleetbudget

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/lease"
)

// TestHostileState: a client writes into a budget's hash times in the
// future, negative or huge counts, or garbage, and later the key may be
// lost; or it replaces the hash with a string or a list. Only the server's TIME moves the budget's clock, a birth is never
// after it, and the fields are repaired: the process stays joined (no
// fallback, nothing that never recovers), and it is paid no more than an
// honest budget would pay it plus one MinReserve (a floor paid that a
// write made whole again). (Issue 35: a future time, then the key lost,
// gave the fleet a new Burst and a young MinReserve, 443 retries against a
// bound of 400; negative values made every process fall back until a DEL;
// a key replaced with a string or a list, until the key expired, which a
// SET's never does.)
func TestHostileState(t *testing.T) {
	th := grpcbackoff.DefaultThrottle()
	future := strconv.FormatInt(time.Now().Add(time.Hour).UnixMicro(), 10)
	for _, tc := range []struct {
		name   string
		fields map[string]string
		lost   bool   // the key is lost after the writes
		kind   string // the key is replaced with one of this kind
	}{
		{"future", map[string]string{"l": future, "b": future, "i3": future, "c1": future}, false, ""},
		{"future, lost", map[string]string{"l": future, "b": future}, true, ""},
		{"negative", map[string]string{"p": "-5000000", "s": "-7", "e0": "-100", "a0": "-9000000", "f0": "-1", "n0": "-3", "n1": "-3", "d0": "-1", "g1": "-2"}, false, ""},
		{"negative birth", map[string]string{"b": "-1"}, false, ""},
		{"huge", map[string]string{"p": "9000000000000000", "f0": "99999999999", "s": "99999999999", "a1": "99999999999999999", "d1": "99999999999999999"}, false, ""},
		{"garbage", map[string]string{"p": "x", "l": "nan", "s": "1e300", "i0": "1.5", "b": ""}, false, ""},
		{"a string", nil, false, "string"},
		{"a list", nil, false, "list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, _ := server(t)
			c := client(t, addr)
			p := newProcess(t, Options{URL: "redis://" + addr, Prefix: testPrefix(t)})
			b := p.f.Budget("t", th)
			key := p.f.prefix + "{t}"
			ctx := context.Background()
			// Joined; everything it holds spent, as in an outage.
			now := time.Now()
			p.f.tick(ctx, now)
			spent := count(b, now, false)
			if s := b.State(now); !s.Joined || spent != th.MinReserve+th.Burst {
				t.Fatalf("before: %+v, %d retries paid; want joined, MinReserve and Burst paid", s, spent)
			}
			now = now.Add(period * 3 / 4)
			p.f.tick(ctx, now)
			honest := count(b, now, false) // what PerSecond earned meanwhile, if a token

			var err error
			switch tc.kind {
			case "string":
				err = c.Set(ctx, key, "x", 0).Err()
			case "list":
				if err = c.Del(ctx, key).Err(); err == nil {
					err = c.RPush(ctx, key, "x").Err()
				}
			default:
				args := []any{}
				for f, v := range tc.fields {
					args = append(args, f, v)
				}
				err = c.HSet(ctx, key, args...).Err()
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.lost {
				now = now.Add(period * 3 / 4)
				p.f.tick(ctx, now) // the process sees the future birth, if it is believed
				c.Del(ctx, key)
			}
			paid := 0
			for range 3 {
				now = now.Add(period * 3 / 4)
				p.f.tick(ctx, now)
				paid += count(b, now, false)
			}
			s := b.State(now)
			// A fallback is the state's doing unless a renewal timed out.
			if !s.Joined || s.Fallbacks != 0 && !p.log.timedOut() {
				t.Errorf("after the writes: %+v, want joined, never fallen back (logs: %s)", s, p.log)
			}
			// An honest budget pays PerSecond over the 3 intervals (1.1 s:
			// 1 token at most, as before the writes); a write may make the
			// floor whole once more.
			if limit := honest + 1 + th.MinReserve; paid > limit {
				t.Errorf("after the writes %d retries paid, want at most %d (one floor more than an honest budget)", paid, limit)
			}
			// Every field is back in its range, the birth before now.
			st := hashState(t, c, key)
			serverNow := time.Now().Add(time.Second).UnixMicro()
			pp := lease.ParamsOf(th, period*3/4, 1)
			if st.Born <= 0 || st.Born > serverNow || st.Last < st.Born || st.Last > serverNow || st.Pool < 0 || st.Pool > pp.Burst ||
				st.Since < 0 || st.Since > pp.MinReserve {
				t.Errorf("the hash after a renewal: %+v, want every field in its range", st)
			}
			for j, tn := range st.Tenths {
				if tn.Earned < 0 || tn.Paid < 0 || tn.Floor < 0 || tn.Floor > pp.MinReserve || tn.Index%10 != int64(j) && tn.Index != 0 {
					t.Errorf("tenth %d: %+v, want in range", j, tn)
				}
			}
			if st.Born > time.Now().UnixMicro() {
				t.Errorf("born %v, in the future", time.UnixMicro(st.Born))
			}
			t.Logf("%s: %d retries paid after the writes; %s", tc.name, paid, fmt.Sprint(s))
		})
	}
}

// TestGrantFromAnotherClock: a grant whose time is more than a minute from
// the process's clock is refused, as Redis's answer to a renewal that
// failed: the process never remembers a birth from a clock it cannot trust.
func TestGrantFromAnotherClock(t *testing.T) {
	now := time.Now()
	for _, d := range []time.Duration{0, 59 * time.Second, -59 * time.Second, 61 * time.Second, -time.Hour} {
		err := checkClocks([]lease.Grant{{Now: now.Add(d).UnixMicro(), Born: now.Add(-time.Hour).UnixMicro()}}, now)
		if refused := err != nil; refused != (d > maxSkew || d < -maxSkew) {
			t.Errorf("a grant %v from the process's clock: %v, want refused only beyond %v", d, err, maxSkew)
		}
	}
}

// TestBudgetErrorIsItsOwn: Redis refuses the renewals of some budgets and
// not of another renewed in the same pipeline (here an ACL user allowed the
// other's key alone; on a real server, REDIS_ADDR). The refused budgets
// fall back; the other stays joined; the refusal is logged once, naming a
// budget, whichever rounds renew the others it refuses, and is not taken
// for Redis being down (no probe of its address, no "until Redis
// answers"); when Redis allows them again, they join at their next
// renewal, which is logged once. (The red team: one script's error failed
// every budget of the pipeline, logged as Redis unreachable.)
func TestBudgetErrorIsItsOwn(t *testing.T) {
	addr, mr := server(t)
	if mr != nil {
		t.Skip("miniredis has no ACL key patterns: set REDIS_ADDR to a redis-server")
	}
	c := client(t, addr)
	ctx := context.Background()
	prefix := testPrefix(t)
	user := fmt.Sprintf("fbtest-%d", time.Now().UnixNano())
	if err := c.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "~"+prefix+"{good}*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Do(ctx, "ACL", "DELUSER", user) })
	p := newProcess(t, Options{URL: "redis://" + user + ":pw@" + addr, Prefix: prefix})
	th := grpcbackoff.DefaultThrottle()
	good, bad := p.f.Budget("good", th), p.f.Budget("bad", th)
	now := time.Now()
	for range 3 {
		p.f.tick(ctx, now)
		now = now.Add(period * 3 / 4)
	}
	worse := p.f.Budget("worse", th)
	p.f.tick(ctx, now.Add(-period/4)) // worse alone, in a round of its own
	p.f.tick(ctx, now)                // the others
	joined := func() [3]bool { return [3]bool{good.State(now).Joined, bad.State(now).Joined, worse.State(now).Joined} }
	if j := joined(); j != [3]bool{true, false, false} || p.f.unreachable {
		t.Errorf("two budgets' keys refused: joined %v (the allowed one's, the refused ones'), unreachable %v; want [true false false], false; logs:\n%s",
			j, p.f.unreachable, p.log)
	}
	if p.log.count("cannot renew the lease of a retry budget, Redis refused it") != 1 || p.log.count("budget=bad") != 1 ||
		p.log.count("NOPERM") != 1 || p.log.count("until Redis answers") != 0 || p.log.count("level=") != 1 {
		t.Errorf("logs:\n%s\nwant one warning, naming a budget and Redis's error, not Redis down", p.log)
	}
	if err := c.Do(ctx, "ACL", "SETUSER", user, "allkeys").Err(); err != nil {
		t.Fatal(err)
	}
	now = now.Add(period * 3 / 4)
	p.f.tick(ctx, now)
	if j := joined(); j != [3]bool{true, true, true} || p.log.count("renewed again") != 1 || p.log.count("level=") != 2 {
		t.Errorf("allowed again: joined %v; logs:\n%s\nwant all joined, the return logged once", j, p.log)
	}
}

// TestDatabaseOutOfRange: New cannot know how many databases a server has;
// a URL that selects one it does not have (/16, of the default 16) gets an
// error at the first renewal, which names the database, logged once as
// Redis refusing the renewals (it answers), and the budgets on their share.
func TestDatabaseOutOfRange(t *testing.T) {
	addr, mr := server(t)
	if mr != nil {
		t.Skip("miniredis has every database: set REDIS_ADDR to a redis-server")
	}
	p := newProcess(t, Options{URL: "redis://" + addr + "/16", Prefix: testPrefix(t)})
	b := p.f.Budget("t", grpcbackoff.DefaultThrottle())
	now := time.Now()
	for i := range 3 {
		p.f.tick(context.Background(), now.Add(time.Duration(i)*period))
	}
	if b.State(now).Joined || p.log.count("level=") != 1 || p.log.count("Redis refused them") != 1 || p.log.count("selects database 16") != 1 {
		t.Errorf("database 16 of 16: joined %v; logs:\n%s\nwant one warning naming the database", b.State(now).Joined, p.log)
	}
}
