package fleetbudget

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/lease"
)

// TestScriptIsLedger runs random renewals through the Redis script and
// through lease.Ledger.Renew, on the same times: the grants must be the
// same to the unit, a missing key included (the script and the Ledger are
// one algorithm in two languages).
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
	for i := range 2000 {
		now += rng.Int64N(200_000)
		if i%500 == 499 {
			now += 5_000_000 // a quiet spell: the Window empties
		}
		r := lease.Request{Started: rng.Int64N(50), Succeeded: rng.Int64N(50), Span: rng.Int64N(400_000),
			AskReserve: rng.Int64N(20 * lease.Token), AskLongRun: rng.Int64N(5 * lease.Token)}
		if rng.IntN(3) == 0 {
			r.Return = lease.Return{Tenth: last.Tenth, Earned: rng.Int64N(last.Earned + 1), Floor: rng.Int64N(last.Floor + 1), LongRun: rng.Int64N(last.LongRun + 1)}
		}
		if i == 1000 { // the key is lost: made again as old as it was
			if err := c.Del(ctx, key).Err(); err != nil {
				t.Fatal(err)
			}
			l = lease.Ledger{}
			r.Born = last.Born
		}
		want := l.Renew(now, p, r)
		reply, err := renew.Run(ctx, c, []string{key}, renewArgs(p, r, 60_000, now)...).Result()
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
		last = got
	}
	if ttl := c.PTTL(ctx, key).Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("the key's time to live is %v, want up to a minute", ttl)
	}
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
	reply, err := renew.Run(context.Background(), c, []string{testPrefix(t) + "{x}"}, renewArgs(p, r, 60_000, 0)...).Result()
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
