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
// lost. Only the server's TIME moves the budget's clock, a birth is never
// after it, and the fields are repaired: the process stays joined (no
// fallback, nothing that never recovers), and it is paid no more than an
// honest budget would pay it plus one MinReserve (a floor paid that a
// write made whole again). (Issue 35: a future time, then the key lost,
// gave the fleet a new Burst and a young MinReserve, 443 retries against a
// bound of 400; negative values made every process fall back until a DEL.)
func TestHostileState(t *testing.T) {
	th := grpcbackoff.DefaultThrottle()
	future := strconv.FormatInt(time.Now().Add(time.Hour).UnixMicro(), 10)
	for _, tc := range []struct {
		name   string
		fields map[string]string
		lost   bool // the key is lost after the writes
	}{
		{"future", map[string]string{"l": future, "b": future, "i3": future, "c1": future}, false},
		{"future, lost", map[string]string{"l": future, "b": future}, true},
		{"negative", map[string]string{"p": "-5000000", "s": "-7", "e0": "-100", "a0": "-9000000", "f0": "-1", "n0": "-3", "n1": "-3"}, false},
		{"negative birth", map[string]string{"b": "-1"}, false},
		{"huge", map[string]string{"p": "9000000000000000", "f0": "99999999999", "s": "99999999999", "a1": "99999999999999999"}, false},
		{"garbage", map[string]string{"p": "x", "l": "nan", "s": "1e300", "i0": "1.5", "b": ""}, false},
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

			args := []any{}
			for f, v := range tc.fields {
				args = append(args, f, v)
			}
			if err := c.HSet(ctx, key, args...).Err(); err != nil {
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
			if !s.Joined || s.Fallbacks != 0 {
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
