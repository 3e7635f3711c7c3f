package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/test/bufconn"
)

// bufconnTransport is a transport over one bufconn listener, for runs in a
// synctest bubble.
func bufconnTransport() transport {
	lis := bufconn.Listen(1 << 20)
	return transport{
		listen: func() (net.Listener, error) { return lis, nil },
		dial:   func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) },
	}
}

// small is a run of 13 s: 10 clients of 20 calls a second (200/s), a 3 s
// trigger from 2 s.
func small() config {
	return config{clients: 10, rate: 20, deadline: 2 * time.Second, warm: 2 * time.Second,
		trigger: 3 * time.Second, after: 8 * time.Second, step: 250 * time.Millisecond, seed: 1}
}

// TestOverloadRecoversWithGuard runs the overload scenario (a failing
// dependency in front of a server of 300 requests/s) on a virtual clock:
// without the guard the retries keep the server overloaded after the
// outage, with it the server recovers, and the retries that reached the
// handler stay within the bound.
func TestOverloadRecoversWithGuard(t *testing.T) {
	cfg := small()
	sc := scenario{name: "overload", costly: true, capacity: tight}
	var got [2]summary
	for i, guarded := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			r, err := run(t.Context(), cfg, bufconnTransport(), sc, "mixed", guarded)
			if err != nil {
				t.Fatal(err)
			}
			got[i] = summarize(cfg, r)
		})
	}
	plain, guarded := got[0], got[1]
	t.Logf("without the guard: %+v", plain)
	t.Logf("with the guard: %+v", guarded)
	if plain.recovered || !guarded.recovered {
		t.Errorf("recovered without the guard %v (after %v), with it %v (after %v); want only with it",
			plain.recovered, plain.recoverAfter, guarded.recovered, guarded.recoverAfter)
	}
	if guarded.retries > guarded.bound || guarded.retries*5 > plain.retries {
		t.Errorf("retries at the handler: %d with the guard (bound %d), %d without; want within the bound and a fifth at most",
			guarded.retries, guarded.bound, plain.retries)
	}
	if guarded.failedCalls >= plain.failedCalls {
		t.Errorf("failed calls: %d with the guard, %d without; want fewer with it", guarded.failedCalls, plain.failedCalls)
	}
}

// TestSummarize checks the table's arithmetic on a series made by hand:
// 100 calls a second offered and failing in the trigger, recovering a
// second after it.
func TestSummarize(t *testing.T) {
	cfg := config{clients: 10, rate: 10, warm: 2 * time.Second, trigger: 2 * time.Second, after: 6 * time.Second, step: 500 * time.Millisecond}
	start := time.Unix(0, 0)
	s := newSeries(start, cfg.step, cfg.length())
	for i := range len(s.b) {
		at := start.Add(time.Duration(i) * cfg.step)
		s.add(at, offered, 50)
		s.add(at, firstTries, 50)
		switch {
		case i >= 4 && i < 10: // the trigger and a second after it
			s.add(at, failed, 50)
			s.add(at, retries, 100)
		default:
			s.add(at, ok, 50)
		}
	}
	u := summarize(cfg, &result{s: s, guarded: true})
	want := summary{calls: 1000, first: 1000, retries: 600, okCalls: 700, failedCalls: 300,
		share: 600.0 / 1600, goodputAfter: 500.0 / 6, recovered: true, recoverAfter: time.Second,
		bound: int64(0.1*1000 + 0.1*100*10 + 10)}
	if u != want {
		t.Errorf("summarize = %+v, want %+v", u, want)
	}
	var b bytes.Buffer
	writeTable(&b, cfg, []*result{{sc: scenario{name: "outage"}, mix: "mixed", guarded: true, s: s}})
	if row := "| outage | mixed | guard | 1000 | 1000 | 600 | 38% | 210 ✗ | 0 | 300 | 0 | 83 | +1.00 s |"; !strings.Contains(b.String(), row) {
		t.Errorf("table:\n%s\nwant the row\n%s", b.String(), row)
	}
}
