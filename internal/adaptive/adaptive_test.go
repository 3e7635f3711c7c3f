package adaptive_test

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/adaptive"
)

func newAdaptive(t *testing.T, a grpcbackoff.AdaptiveThrottle) *adaptive.Limiter {
	t.Helper()
	s, err := adaptive.New(a)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestAccepted(t *testing.T) {
	not := map[codes.Code]bool{codes.Unavailable: true, codes.ResourceExhausted: true, codes.DeadlineExceeded: true, codes.Canceled: true}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if got := adaptive.Accepted(c); got != !not[c] {
			t.Errorf("Accepted(%v) = %v, want %v", c, got, !not[c])
		}
	}
}

// TestAdaptiveProbability checks the formula max(0, (requests − K·accepts) /
// (requests + 1)) against counts made by Allow and Record.
func TestAdaptiveProbability(t *testing.T) {
	a := newAdaptive(t, grpcbackoff.DefaultAdaptiveThrottle())
	now := t0
	if p := a.RejectProbability(now); p != 0 {
		t.Fatalf("fresh state: probability %v, want 0", p)
	}
	// 10 requests, 4 accepted: (10 − 8)/11.
	for i := range 10 {
		if !a.Allow(now, 0.99) {
			t.Fatalf("request %d rejected with p = 0", i)
		}
		a.Record(now, i < 4)
	}
	if p, want := a.RejectProbability(now), 2.0/11; math.Abs(p-want) > 1e-12 {
		t.Fatalf("probability %v, want %v", p, want)
	}
	// u below p rejects, and the rejected request counts: (11 − 8)/12.
	if a.Allow(now, 0.1) {
		t.Fatal("u 0.1 < p 2/11: allowed, want rejected")
	}
	if p, want := a.RejectProbability(now), 3.0/12; math.Abs(p-want) > 1e-12 {
		t.Fatalf("after a rejection: probability %v, want %v", p, want)
	}
	// u at or above p allows, and counts nothing until Record.
	if !a.Allow(now, 0.25) {
		t.Fatal("u 0.25 ≥ p 3/12: rejected, want allowed")
	}
	if req, acc := a.Counts(now); req != 11 || acc != 4 {
		t.Fatalf("counts %d requests, %d accepts; want 11, 4", req, acc)
	}
	a.Record(now, true)
	if req, acc := a.Counts(now); req != 12 || acc != 5 {
		t.Fatalf("counts %d requests, %d accepts; want 12, 5", req, acc)
	}
	// Requests in flight do not count: many allowed at once from a fresh
	// state are all sent.
	c := newAdaptive(t, grpcbackoff.DefaultAdaptiveThrottle())
	for i := range 100 {
		if !c.Allow(now, 0) {
			t.Fatalf("fresh state, call %d in flight at once: rejected", i)
		}
	}
	// Accepted half of the time with K 2: never rejected.
	b := newAdaptive(t, grpcbackoff.DefaultAdaptiveThrottle())
	for i := range 1000 {
		b.Allow(now, 0)
		b.Record(now, i%2 == 0)
	}
	if p := b.RejectProbability(now); p != 0 {
		t.Errorf("half accepted, K 2: probability %v, want 0", p)
	}
}

// TestAdaptiveWindow checks that counts leave the window after Window, one
// bucket (Window/120) at a time.
func TestAdaptiveWindow(t *testing.T) {
	a := newAdaptive(t, grpcbackoff.AdaptiveThrottle{K: 2, Window: 120 * time.Second})
	start := t0.Truncate(time.Second)
	for s := range 10 { // one request per second for 10 s, none accepted
		a.Record(start.Add(time.Duration(s)*time.Second), false)
	}
	if req, _ := a.Counts(start.Add(119 * time.Second)); req != 10 {
		t.Fatalf("at 119 s: %d requests, want 10", req)
	}
	for s := range 10 {
		at := start.Add(time.Duration(120+s) * time.Second)
		if req, _ := a.Counts(at); req != int64(9-s) {
			t.Fatalf("at %d s: %d requests, want %d", 120+s, req, 9-s)
		}
	}
	// A jump of more than a window empties everything.
	a.Record(start.Add(200*time.Second), true)
	if req, acc := a.Counts(start.Add(time.Hour)); req != 0 || acc != 0 {
		t.Fatalf("an hour later: %d requests, %d accepts; want 0, 0", req, acc)
	}
	// Earlier times count in the current bucket.
	a.Record(start.Add(time.Hour-time.Minute), false)
	if req, _ := a.Counts(start.Add(time.Hour)); req != 1 {
		t.Fatalf("a request a minute back: %d requests, want 1", req)
	}
}

// TestAdaptiveOutageAndRecovery checks the throttle's shape in an outage: no
// rejection while the backend accepts; rejections rise during the outage to
// nearly all; after it, the share sent grows back as accepts come in.
func TestAdaptiveOutageAndRecovery(t *testing.T) {
	a := newAdaptive(t, grpcbackoff.DefaultAdaptiveThrottle())
	now := t0
	tick := 10 * time.Millisecond // 100 requests per second
	rng := rand.New(rand.NewPCG(1, 2))
	send := func(up bool) bool {
		now = now.Add(tick)
		ok := a.Allow(now, rng.Float64())
		if ok {
			a.Record(now, up)
		}
		return ok
	}
	for range 3000 { // 30 s healthy
		if !send(true) {
			t.Fatal("rejected while the backend accepts everything")
		}
	}
	sent := 0
	for range 6000 { // 60 s outage
		if send(false) {
			sent++
		}
	}
	// The first 3000 failures are sent (requests ≤ K·accepts), then the
	// probability grows to (9000 − 6000)/9001 and about 5500 are sent.
	if sent > 5800 || sent < 5200 {
		t.Errorf("60 s outage after 30 s of accepts: %d of 6000 sent, want about 5500", sent)
	}
	if p := a.RejectProbability(now); p < 0.25 || p > 0.4 {
		t.Errorf("after the outage: probability %v, want about 1/3", p)
	}
	for range 12000 { // 120 s healthy: the outage leaves the window
		send(true)
	}
	if p := a.RejectProbability(now); p != 0 {
		t.Errorf("a window after the outage: probability %v, want 0", p)
	}
}

// TestAdaptiveConcurrent counts from many goroutines across bucket changes;
// the sums must equal what was counted within the window (run with -race).
func TestAdaptiveConcurrent(t *testing.T) {
	a := newAdaptive(t, grpcbackoff.AdaptiveThrottle{K: 2, Window: 120 * time.Second})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				now := t0.Add(time.Duration(i%50) * time.Second).Add(time.Duration(g) * time.Millisecond)
				a.Record(now, i%3 == 0)
			}
		})
	}
	wg.Wait()
	req, acc := a.Counts(t0.Add(60 * time.Second))
	if req != 8000 || acc != 8*334 {
		t.Fatalf("counts %d requests, %d accepts; want 8000, %d", req, acc, 8*334)
	}
}

func TestAdaptiveAllocatesNothing(t *testing.T) {
	a := newAdaptive(t, grpcbackoff.DefaultAdaptiveThrottle())
	now := t0
	allocs := testing.AllocsPerRun(1000, func() {
		now = now.Add(100 * time.Millisecond)
		if a.Allow(now, 0.5) {
			a.Record(now, true)
		}
	})
	if allocs != 0 {
		t.Errorf("Allow and Record allocate %v times, want 0", allocs)
	}
}

// BenchmarkAdaptiveSuccessPath is the cost adaptive throttling adds to a
// call that succeeds: one Allow and one Record.
func BenchmarkAdaptiveSuccessPath(b *testing.B) {
	a, _ := adaptive.New(grpcbackoff.DefaultAdaptiveThrottle())
	b.RunParallel(func(pb *testing.PB) {
		now := t0
		for pb.Next() {
			now = now.Add(time.Microsecond)
			if a.Allow(now, 0.5) {
				a.Record(now, true)
			}
		}
	})
}
