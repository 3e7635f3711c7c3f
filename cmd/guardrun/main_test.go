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

	"github.com/platformkit/grpcbackoff/guard"
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
	return config{clients: 10, rate: 20, deadline: 2 * time.Second,
		timing: timing{warm: 2 * time.Second, trigger: 3 * time.Second, after: 8 * time.Second}, step: 100 * time.Millisecond, seed: 1}
}

// TestOverloadRecoversWithGuard runs the overload scenario (a failing
// dependency in front of a server of 300 requests/s) on a virtual clock:
// without the guard the retries keep the server overloaded after the
// outage, with it the server recovers and fewer calls fail, with a fifth
// of the retries at the handler at most.
func TestOverloadRecoversWithGuard(t *testing.T) {
	cfg := small()
	sc := scenario{name: "overload", costly: true, capacity: tight}
	plain, guarded := both(t, cfg, sc)
	if plain.recovered || !guarded.recovered {
		t.Errorf("recovered without the guard %v (after %v), with it %v (after %v); want only with it",
			plain.recovered, plain.recoverAfter, guarded.recovered, guarded.recoverAfter)
	}
	if guarded.retries*5 > plain.retries {
		t.Errorf("retries at the handler: %d with the guard, %d without; want a fifth at most", guarded.retries, plain.retries)
	}
	if guarded.failedCalls >= plain.failedCalls {
		t.Errorf("failed calls: %d with the guard, %d without; want fewer with it", guarded.failedCalls, plain.failedCalls)
	}
}

// TestFlakyKeepsRetries runs the flaky server (40% of requests failing at
// random, for 10 s) on a virtual clock, with grpc-go's and this library's
// clients: the guard fails at most twice as many calls as no guard, and
// 0.1% of the calls.
func TestFlakyKeepsRetries(t *testing.T) {
	cfg := small()
	cfg.timing = timing{trigger: 10 * time.Second, after: 3 * time.Second}
	plain, guarded := both(t, cfg, scenario{name: "flaky-40", flaky: 0.4, capacity: ample})
	if limit := 2*plain.failedCalls + plain.calls/1000; guarded.failedCalls > limit {
		t.Errorf("failed calls: %d with the guard, %d without; want at most %d", guarded.failedCalls, plain.failedCalls, limit)
	}
}

// both runs sc with mixed clients without the guard and with it, in
// synctest bubbles, and returns their summaries.
func both(t *testing.T, cfg config, sc scenario) (plain, guarded summary) {
	var got [2]summary
	for i, g := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			r, err := run(t.Context(), cfg, bufconnTransport(), sc, "mixed", g)
			if err != nil {
				t.Fatal(err)
			}
			got[i] = summarize(r)
		})
	}
	t.Logf("without the guard: %+v", got[0])
	t.Logf("with the guard: %+v", got[1])
	return got[0], got[1]
}

// TestSummarize checks the table's arithmetic on a series made by hand:
// 100 calls a second offered and failing in the trigger, recovering a
// second after it, the guard over in its first second.
func TestSummarize(t *testing.T) {
	cfg := config{clients: 10, rate: 10, timing: timing{warm: 2 * time.Second, trigger: 2 * time.Second, after: 6 * time.Second}, step: 500 * time.Millisecond}
	start := time.Unix(0, 0)
	s := newSeries(start, cfg.step, cfg.length())
	for i := range len(s.b) {
		at := start.Add(time.Duration(i) * cfg.step)
		s.add(at, offered, 50)
		s.add(at, firstTries, 50)
		switch {
		case i >= 4 && i < 10: // the trigger and a second after it
			s.add(at, failed, 50)
			s.add(at, retries, 100+int64(i))
		default:
			s.add(at, ok, 50)
		}
		if i == 4 || i == 5 {
			s.add(at, over, 1)
		}
	}
	r := &result{cfg: cfg, sc: scenario{name: "outage"}, mix: "mixed", guarded: true, s: s, state: guard.State{Paced: 7, Refused: 9}}
	u := summarize(r)
	want := summary{calls: 1000, first: 1000, retries: 639, okCalls: 700, failedCalls: 300,
		share: 639.0 / 1639, goodputAfter: 500.0 / 6, recovered: true, recoverAfter: time.Second,
		overSteps: 2, densest: 105, twiceShare: 2 * 0.1 / 0.9 * 50}
	if u != want {
		t.Errorf("summarize = %+v, want %+v", u, want)
	}
	var b bytes.Buffer
	writeTable(&b, []*result{r})
	if row := "| outage | mixed | guard | 1000 | 639 | 300 | 7 | 9 | 83 | +1.00 s | 105 (11.1) in 2 |  |  |"; !strings.Contains(b.String(), row) {
		t.Errorf("table:\n%s\nwant the row\n%s", b.String(), row)
	}
}
