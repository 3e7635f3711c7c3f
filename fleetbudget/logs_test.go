package fleetbudget

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/platformkit/grpcbackoff"
)

// redisLog counts what go-redis logs on its own logger (redis.SetLogger,
// which only this test sets: the module never does).
type redisLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *redisLog) Printf(_ context.Context, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, v...))
}

func (l *redisLog) count() int { l.mu.Lock(); defer l.mu.Unlock(); return len(l.lines) }

// TestOneLogLinePerOutage: while Redis cannot be reached, at start-up or
// later, the module logs one line per outage, go-redis's own dial errors
// included: the renewals probe the address with a dial of their own and
// give it back to go-redis only once it answers. (Issue 35: go-redis logged
// 9 "failed to dial" lines in 4.5 s while Redis was down at start-up.)
func TestOneLogLinePerOutage(t *testing.T) {
	rl := &redisLog{}
	redis.SetLogger(rl)
	t.Cleanup(func() { redis.SetLogger(&redisLog{}) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there yet
	p := newProcess(t, Options{URL: "redis://" + addr})
	b := p.f.Budget("t", grpcbackoff.DefaultThrottle())
	ctx := context.Background()
	now := time.Now()
	ticks := func(n int) { // renewals, each due
		for range n {
			now = now.Add(period * 3 / 4)
			p.f.tick(ctx, now)
		}
	}
	ticks(6)
	if w, r := p.log.count("cannot renew"), rl.count(); w != 1 || r != 0 {
		t.Errorf("Redis down at start-up, 6 renewals: %d warnings, %d lines of go-redis (%q); want 1 and 0", w, r, rl.lines)
	}
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr(addr); err != nil {
		t.Fatal(err)
	}
	ticks(1)
	if !b.State(now).Joined || p.log.count("renewed again") != 1 {
		t.Fatalf("Redis up: joined %v; logs:\n%s", b.State(now).Joined, p.log)
	}
	mr.Close() // down again, its connection cut
	for i := range 6 {
		ticks(1)
		t.Logf("tick %d: %d go-redis lines", i, rl.count())
	}
	if w, r := p.log.count("cannot renew"), rl.count(); w != 2 || r != 0 {
		t.Errorf("Redis down again, 6 renewals: %d warnings in all, %d lines of go-redis (%q); want 2 and 0", w, r, rl.lines)
	}
	if n := strings.Count(p.log.String(), "\n"); n != 3 {
		t.Errorf("%d lines logged, want 3: a warning per outage, and the return:\n%s", n, p.log)
	}
}
