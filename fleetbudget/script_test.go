package fleetbudget

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/lease"
)

// TestScriptIsLedger runs random renewals through the Redis script and
// through lease.Ledger.Renew, on the same times: the grants must be the
// same to the unit, a missing key included (the script and the Ledger are
// one algorithm in two languages). Between renewals, fields are written
// with values out of their ranges (into both), or with garbage (into the
// hash; the Ledger's field is 0, as the script reads it), the key is
// replaced with a string or a list (the Ledger with a new one: a key that
// is not a hash is made again, as a lost one), and the server's clock
// sometimes goes back: both repair the same way.
func TestScriptIsLedger(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		name := "standalone"
		var c redis.UniversalClient
		if cluster {
			name = "cluster"
			cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{clusterServer(t)}, MaxRetries: -1})
			t.Cleanup(func() { cc.Close() })
			c = cc
		} else {
			addr, _ := server(t)
			c = client(t, addr)
		}
		t.Run(name, func(t *testing.T) { scriptIsLedger(t, c) })
	}
}

func scriptIsLedger(t *testing.T, c redis.UniversalClient) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 11))
	th := grpcbackoff.DefaultThrottle()
	th.Window = 3 * time.Second
	p := lease.ParamsOf(th, 300*time.Millisecond, 1)
	key := testPrefix(t) + "{x}"
	var l lease.Ledger
	now := int64(1_800_000_000_000_000) + rng.Int64N(1e6)
	var last lease.Grant
	hostile, pending, parked := 0, 0, 0
	for i := range 3000 {
		now += rng.Int64N(200_000)
		switch {
		case i%500 == 499:
			now += 5_000_000 // a quiet spell: the Window empties
		case i%97 == 0:
			now -= rng.Int64N(2_000_000) // the server's clock went back (a failover)
		}
		r := lease.Request{Started: rng.Int64N(50), Succeeded: rng.Int64N(50), Span: rng.Int64N(400_000),
			AskRetries: rng.Int64N(10) * lease.Token, AskReserve: rng.Int64N(20 * lease.Token), AskLongRun: rng.Int64N(5 * lease.Token),
			Stock: rng.IntN(2) == 0, Leave: rng.IntN(10) == 0, ID: fmt.Sprint(rng.IntN(12))}
		if rng.IntN(3) == 0 {
			r.Return = lease.Return{Tenth: last.Tenth, Earned: rng.Int64N(last.Earned + 1), Floor: rng.Int64N(last.Floor + 1), LongRun: rng.Int64N(last.LongRun + 1),
				Interval: last.Now / p.Interval, Shared: last.Shared}
		}
		if rng.IntN(4) == 0 {
			r.Owed, r.OwedLongRun = rng.Int64N(30*lease.Token), rng.Int64N(5*lease.Token)
		}
		if rng.IntN(2) == 0 {
			r.Held = last.Held
		}
		if i == 1000 || i == 2500 { // the key is lost: made again as old as it was
			if err := c.Del(ctx, key).Err(); err != nil {
				t.Fatal(err)
			}
			l = remade(l) // the sorted set of the processes is kept
			r.Born = last.Born
		}
		if i%700 == 350 { // the key is not a hash: made again, as a lost one
			var err error
			if i%1400 == 350 {
				err = c.Set(ctx, key, "x", 0).Err()
			} else {
				err = c.Del(ctx, key).Err()
				if err == nil {
					err = c.RPush(ctx, key, "x").Err()
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			l = remade(l) // the sorted set of the processes is kept
			r.Born = last.Born
		}
		if i > 0 && rng.IntN(40) == 0 { // the processes: one renewing at any time, or not a sorted set
			hostile++
			id, at := "h"+fmt.Sprint(rng.IntN(3)), now+rng.Int64N(4*p.Interval)-2*p.Interval
			if rng.IntN(4) == 0 {
				at = now + 1 + rng.Int64N(1e12) // the future
			}
			var err error
			if rng.IntN(10) == 0 {
				if err = c.Del(ctx, keysOf(key)[1]).Err(); err == nil {
					err = c.Set(ctx, keysOf(key)[1], "x", 0).Err()
				}
				l.ClearMembers()
			} else {
				err = c.ZAdd(ctx, keysOf(key)[1], redis.Z{Score: float64(at), Member: id}).Err()
				l.SetMember(id, at)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if i > 0 && rng.IntN(20) == 0 {
			hostile++
			field, value, garbage := hostileWrite(rng, now, p)
			if err := c.HSet(ctx, key, field, value).Err(); err != nil {
				t.Fatal(err)
			}
			s := l.State()
			if garbage {
				value = "0"
			}
			setField(t, &s, field, value)
			l.Load(s)
		}
		want := l.Renew(now, p, r)
		reply, err := renew.Run(ctx, c, keysOf(key), renewArgs(p, r, 60_000, now)...).Result()
		if err != nil {
			t.Fatalf("renewal %d: %v", i, err)
		}
		got, err := parseGrant(reply, r)
		if err != nil {
			t.Fatalf("renewal %d: %v", i, err)
		}
		if got != want {
			t.Fatalf("renewal %d of %+v: the script granted %+v, the Ledger %+v", i, r, got, want)
		}
		if i%250 == 0 { // the hash is the Ledger's state, field for field, and the sorted set its processes
			if got, want := hashState(t, c, key), l.State(); got != want {
				t.Fatalf("renewal %d: the hash holds %+v, the Ledger %+v", i, got, want)
			}
			if got, want := members(t, c, key), l.Members(); !maps.Equal(got, want) {
				t.Fatalf("renewal %d: the sorted set holds %v, the Ledger %v", i, got, want)
			}
		}
		last = got
		if s := l.State(); s.Counts[0].Refused+s.Counts[1].Refused > 0 {
			pending++
		}
		if got.Parked > 0 {
			parked++
		}
	}
	t.Logf("3000 renewals, %d hostile writes, %d with refusals pending, %d with stock parked", hostile, pending, parked)
	if pending < 100 || parked < 100 {
		t.Errorf("of 3000 renewals, %d left refusals pending and %d found stock parked: the stock's hold-back is not tested", pending, parked)
	}
	if ttl := c.PTTL(ctx, key).Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("the key's time to live is %v, want up to a minute", ttl)
	}
}

// fields names the hash's fields in the order of lease.State.
var fields = func() []string {
	f := []string{"b", "l", "p", "s", "c0", "d0", "g0", "o0", "c1", "d1", "g1", "o1"}
	for j := range 10 {
		f = append(f, fmt.Sprintf("i%d", j), fmt.Sprintf("e%d", j), fmt.Sprintf("a%d", j), fmt.Sprintf("f%d", j))
	}
	return f
}()

// field returns a pointer to the field of s named name.
func field(s *lease.State, name string) *int64 {
	switch name {
	case "b":
		return &s.Born
	case "l":
		return &s.Last
	case "p":
		return &s.Pool
	case "s":
		return &s.Since
	case "c0", "c1":
		return &s.Counts[name[1]-'0'].Index
	case "o0", "o1":
		return &s.Counts[name[1]-'0'].Shared
	case "d0", "d1":
		return &s.Counts[name[1]-'0'].Refused
	case "g0", "g1":
		return &s.Counts[name[1]-'0'].Stock
	}
	t := &s.Tenths[name[1]-'0']
	return map[byte]*int64{'i': &t.Index, 'e': &t.Earned, 'a': &t.Paid, 'f': &t.Floor}[name[0]]
}

func setField(t *testing.T, s *lease.State, name, value string) {
	t.Helper()
	var n int64
	if _, err := fmt.Sscan(value, &n); err != nil {
		t.Fatalf("field %s: %q", name, value)
	}
	*field(s, name) = n
}

// hostileWrite returns a field and a value a hostile or broken client might
// write into it: a time in the future or the past, a negative or huge
// count, or garbage.
func hostileWrite(rng *rand.Rand, now int64, p lease.Params) (name, value string, garbage bool) {
	name = fields[rng.IntN(len(fields))]
	switch rng.IntN(6) {
	case 0:
		return name, fmt.Sprint(now + 1 + rng.Int64N(1e12)), false // the future
	case 1:
		return name, fmt.Sprint(-1 - rng.Int64N(1e9)), false
	case 2:
		return name, fmt.Sprint(rng.Int64N(max(now, 1))), false
	case 3:
		return name, fmt.Sprint(rng.Int64N(3 * p.MinReserve)), false
	case 4:
		return name, fmt.Sprint(rng.Int64N(30)), false
	}
	return name, []string{"nan", "inf", "-inf", "1.5", "x", "", "1e300", "-1e300"}[rng.IntN(8)], true
}

// hashState reads key's hash as a lease.State, as the script reads it.
func hashState(t *testing.T, c redis.UniversalClient, key string) lease.State {
	t.Helper()
	vs, err := c.HMGet(context.Background(), key, fields...).Result()
	if err != nil {
		t.Fatal(err)
	}
	var s lease.State
	for i, v := range vs {
		var n int64
		if v != nil {
			if _, err := fmt.Sscan(v.(string), &n); err != nil || fmt.Sprint(n) != v {
				n = 0 // not an integer: the script reads 0
			}
		}
		*field(&s, fields[i]) = n
	}
	return s
}

// remade returns a Ledger made again, with l's processes: its hash lost,
// not its sorted set.
func remade(l lease.Ledger) lease.Ledger {
	var n lease.Ledger
	for id, at := range l.Members() {
		n.SetMember(id, at)
	}
	return n
}

// members reads the sorted set of key's processes.
func members(t *testing.T, c redis.UniversalClient, key string) map[string]int64 {
	t.Helper()
	zs, err := c.ZRangeWithScores(context.Background(), keysOf(key)[1], 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int64{}
	for _, z := range zs {
		m[z.Member.(string)] = int64(z.Score)
	}
	return m
}

// TestScriptUsesServerTime: with no time given the script reads the
// server's clock.
func TestScriptUsesServerTime(t *testing.T) {
	addr, mr := server(t)
	c := client(t, addr)
	if mr != nil {
		mr.SetTime(time.Unix(1_900_000_000, 0))
	}
	p := lease.ParamsOf(grpcbackoff.DefaultThrottle(), time.Second, 1)
	r := lease.Request{AskLongRun: 3 * lease.Token}
	reply, err := renew.Run(context.Background(), c, keysOf(testPrefix(t)+"{x}"), renewArgs(p, r, 60_000, 0)...).Result()
	if err != nil {
		t.Fatal(err)
	}
	g, err := parseGrant(reply, r)
	if err != nil {
		t.Fatal(err)
	}
	server := time.UnixMicro(g.Now)
	if mr != nil && !server.Equal(time.Unix(1_900_000_000, 0)) || mr == nil && time.Since(server).Abs() > time.Minute {
		t.Errorf("the script's time is %v, want the server's", server)
	}
	if g.LongRun != 3*lease.Token {
		t.Errorf("grant %+v, want 3 tokens from a new budget's Burst", g)
	}
}

// BenchmarkScript renews one budget, as a fleet of 100 processes does, and
// reports what a renewal costs Redis: usec_per_call of EVALSHA in INFO
// commandstats (the server's own time for the script, not the round trip).
// Against a real server: REDIS_ADDR=127.0.0.1:6379 go test -run '^$'
// -bench Script ./fleetbudget (miniredis's figure means nothing).
func BenchmarkScript(b *testing.B) {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		b.Skip("set REDIS_ADDR to a redis-server: the cost is the server's")
	}
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	p := lease.ParamsOf(grpcbackoff.DefaultThrottle(), 750*time.Millisecond, 1)
	key := fmt.Sprintf("fbbench:%d:{x}", time.Now().UnixNano())
	defer c.Del(ctx, keysOf(key)...)
	rng := rand.New(rand.NewPCG(1, 2))
	var last lease.Grant
	b.ResetTimer()
	for range b.N {
		r := lease.Request{Started: rng.Int64N(200), Succeeded: rng.Int64N(200), Span: 750_000, Stock: true, Born: last.Born,
			AskRetries: rng.Int64N(3) * lease.Token, AskReserve: rng.Int64N(40) * lease.Token, ID: fmt.Sprint(rng.IntN(100)),
			Return: lease.Return{Tenth: last.Tenth, Earned: last.Earned, Floor: last.Floor, LongRun: last.LongRun,
				Interval: last.Now / p.Interval, Shared: last.Shared}}
		reply, err := renew.Run(ctx, c, keysOf(key), renewArgs(p, r, 60_000, 0)...).Result()
		if err != nil {
			b.Fatal(err)
		}
		if last, err = parseGrant(reply, r); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if strings.HasPrefix(line, "cmdstat_evalsha:") {
			for _, f := range strings.Split(strings.TrimSpace(strings.TrimPrefix(line, "cmdstat_evalsha:")), ",") {
				if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
					us, _ := strconv.ParseFloat(v, 64)
					b.ReportMetric(us, "redis-µs/renewal")
				}
			}
		}
	}
}
