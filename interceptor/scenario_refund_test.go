package interceptor_test

// Issue 44's budget storms, through the interceptors in virtual time: a
// retry that succeeds costs nothing, a RESOURCE_EXHAUSTED retry costs more
// than an UNAVAILABLE one, and the Throttle's bound still holds of what is
// not given back. "Today" is the budget before issue 44 (one token a
// retry, nothing given back), kept as a SharedBudget over the same
// arithmetic, which is not a CostedBudget.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/budget"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// todayBudget is a budget as before issue 44: the Throttle's arithmetic,
// one token a retry whatever its code, nothing given back.
type todayBudget struct{ b *budget.Budget }

func (t todayBudget) Started()                        { t.b.Started() }
func (t todayBudget) Succeeded()                      { t.b.Succeeded() }
func (t todayBudget) Allow(now time.Time) bool        { return t.b.Allow(now) }
func (t todayBudget) AllowLongRun(now time.Time) bool { return t.b.AllowLongRun(now) }
func (todayBudget) State(time.Time) interceptor.SharedBudgetState {
	return interceptor.SharedBudgetState{}
}

// refundStorm is a storm through one Retrier with the default Policy and
// Throttle: calls start every 1/rate s; from outageAt for outage, each
// attempt fails, with probability failing, with code; every attempt takes
// latency at the server.
type refundStorm struct {
	rate             int // calls a second
	failing          float64
	code             codes.Code
	latency          time.Duration
	outageAt, outage time.Duration
	end              time.Duration // calls start until then
	today            bool          // the budget before issue 44
	mixed            bool          // every other call Sheddable
	seed             uint64

	// What the server saw of the retries (attempts after a call's first)
	// that reached it during the outage: failed and served, the most at
	// once; the calls started during the outage, and those that
	// succeeded in the Window before it; the calls that failed.
	failed, served, inFlight int
	started, before, calls   int
	// With mixed: the retries that failed of Sheddable calls, and the
	// Sheddable calls that failed.
	shedFailed, shedCalls int
}

func (s *refundStorm) run(t *testing.T) {
	t.Helper()
	s.started = 0
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		rng := rand.New(rand.NewPCG(s.seed, 44))
		var mu sync.Mutex
		var inFlight, peak, failed, served, ok, before, shedFailed atomic.Int64
		th := grpcbackoff.DefaultThrottle()
		down := func(at time.Duration) bool { return at >= s.outageAt && at < s.outageAt+s.outage }
		srv := bufconntest.NewServer(t, func(_ string, n int) bufconntest.Step {
			return bufconntest.Step{Before: func(ctx context.Context) error {
				if n > 0 {
					peak.Store(max(peak.Load(), inFlight.Add(1)))
					defer inFlight.Add(-1)
				}
				if err := bufconntest.Pause(ctx, s.latency); err != nil {
					return err
				}
				at := time.Since(start)
				mu.Lock()
				fail := down(at) && rng.Float64() < s.failing
				mu.Unlock()
				switch {
				case fail && n > 0:
					failed.Add(1)
					if slices.Contains(metadata.ValueFromIncomingContext(ctx, grpcbackoff.CriticalityKey), grpcbackoff.CriticalitySheddable) {
						shedFailed.Add(1)
					}
				case !fail && n > 0 && down(at):
					served.Add(1)
				case !fail && n == 0 && at < s.outageAt && at >= s.outageAt-th.Window:
					before.Add(1)
				}
				if fail {
					return status.Error(s.code, "storm")
				}
				ok.Add(1)
				return nil
			}}
		})
		opts := []interceptor.Option{testService}
		if s.today {
			opts = append(opts, interceptor.WithSharedBudget(func(string, grpcbackoff.Throttle) interceptor.SharedBudget {
				b, err := budget.New(th, time.Now())
				if err != nil {
					t.Fatal(err)
				}
				return todayBudget{b}
			}))
		}
		r, err := interceptor.New(grpcbackoff.DefaultPolicy(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		c := srv.Client(t, r.DialOptions()...)
		var wg sync.WaitGroup
		var callsFailed, shedCalls atomic.Int64
		n := int(s.end.Seconds() * float64(s.rate))
		for i := range n {
			at := time.Duration(i) * time.Second / time.Duration(s.rate)
			if down(at) {
				s.started++
			}
			wg.Add(1)
			time.AfterFunc(at, func() {
				defer wg.Done()
				ctx := metadata.AppendToOutgoingContext(t.Context(), bufconntest.StreamKey, strconv.Itoa(i))
				var opts []grpc.CallOption
				shed := s.mixed && i%2 == 1
				if shed {
					opts = append(opts, interceptor.Sheddable())
				}
				if _, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, opts...); err != nil {
					callsFailed.Add(1)
					if shed {
						shedCalls.Add(1)
					}
				}
			})
		}
		wg.Wait()
		s.failed, s.served, s.inFlight = int(failed.Load()), int(served.Load()), int(peak.Load())
		s.before, s.calls = int(before.Load()), int(callsFailed.Load())
		s.shedFailed, s.shedCalls = int(shedFailed.Load()), int(shedCalls.Load())
	})
}

// bound is the Throttle's bound on the retries of the outage
// (grpcbackoff.Throttle).
func (s *refundStorm) bound() float64 {
	th := grpcbackoff.DefaultThrottle()
	return float64(th.MinReserve+th.Burst) + th.Reserve*float64(s.before) + th.Ratio*float64(s.started) + th.PerSecond*s.outage.Seconds()
}

func (s *refundStorm) String() string {
	return fmt.Sprintf("%d retries failed, %d served, %d in flight at most, %d calls failed (bound %.0f)", s.failed, s.served, s.inFlight, s.calls, s.bound())
}

// TestRefundBoundsThroughInterceptors: 100 calls a second, 20 s served,
// then 10 s in which attempts fail at random, 20% or 40% of them (a flaky
// server, answering in 50 ms), 90% (a brownout, each attempt taking 2 s),
// or all (a total outage). With refunds, the retries that fail stay within
// the Throttle's bound, and so do the retries in flight at any moment; the
// refunds pay for more retries that are served, and fewer calls fail than
// today. In the total outage nothing is given back: the same retries as
// today, within 2% (the spread of one budget's runs, whose goroutines'
// order and jitter differ; internal/budget's TestRefundBounds has the
// arithmetic's equality, to the retry).
func TestRefundBoundsThroughInterceptors(t *testing.T) {
	if raceEnabled {
		t.Skip("a storm's statistics over thousands of calls: run without -race (the README's test command)")
	}
	for _, c := range []struct {
		name    string
		failing float64
		latency time.Duration
	}{
		{"flaky 20%", 0.2, 50 * time.Millisecond},
		{"flaky 40%", 0.4, 50 * time.Millisecond},
		{"brownout 90%", 0.9, 2 * time.Second},
		{"total outage", 1, 50 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := refundStorm{rate: 100, failing: c.failing, code: codes.Unavailable, latency: c.latency,
				outageAt: 20 * time.Second, outage: 10 * time.Second, end: 32 * time.Second, seed: 1}
			now, today := base, base
			today.today = true
			now.run(t)
			today.run(t)
			t.Logf("with refunds: %v", &now)
			t.Logf("today:        %v", &today)
			if b := now.bound(); float64(now.failed) > b || float64(now.inFlight) > b {
				t.Errorf("with refunds: %d retries failed, %d in flight at most: want both within the bound, %.0f", now.failed, now.inFlight, b)
			}
			if c.failing == 1 {
				if d := now.failed - today.failed; now.served != 0 || 50*max(d, -d) > today.failed {
					t.Errorf("total outage: %d retries with refunds, %d today: want the same", now.failed, today.failed)
				}
				return
			}
			// Where today's budget refused no call's retry (20% failing:
			// neither run is short of budget), the retries differ only by
			// the runs' draws; where it did, the refunds pay for more.
			if now.calls > today.calls || today.calls > 0 && now.failed+now.served < today.failed+today.served {
				t.Errorf("%d retries and %d calls failed with refunds, %d and %d today: want no more failed calls, and at least as many retries where today's failed some",
					now.failed+now.served, now.calls, today.failed+today.served, today.calls)
			}
		})
	}
}

// TestThrottledStorm: the same storm of each code, 100 calls a second, 20 s
// served, then 10 s in which every attempt fails, with UNAVAILABLE or with
// RESOURCE_EXHAUSTED: the budget pays at most half as many RESOURCE_EXHAUSTED
// retries, both within the Throttle's bound (issue 44: before, 596 and 596).
func TestThrottledStorm(t *testing.T) {
	if raceEnabled {
		t.Skip("a storm's statistics over thousands of calls: run without -race (the README's test command)")
	}
	var retries [2]int
	for i, code := range []codes.Code{codes.Unavailable, codes.ResourceExhausted} {
		s := refundStorm{rate: 100, failing: 1, code: code, latency: 50 * time.Millisecond,
			outageAt: 20 * time.Second, outage: 10 * time.Second, end: 30 * time.Second, seed: 1}
		s.run(t)
		t.Logf("%v: %v", code, &s)
		if float64(s.failed) > s.bound() {
			t.Errorf("%v: %d retries, want within the bound, %.0f", code, s.failed, s.bound())
		}
		retries[i] = s.failed
	}
	t.Logf("RESOURCE_EXHAUSTED's retries: %.2f of UNAVAILABLE's", float64(retries[1])/float64(retries[0]))
	if 2*retries[1] > retries[0] {
		t.Errorf("%d RESOURCE_EXHAUSTED retries, %d UNAVAILABLE: want at most half", retries[1], retries[0])
	}
}

// TestSheddableShedFirst: the same storms with every other call Sheddable.
// In a total outage its retries are paid from the long-run allowance alone
// (at most Burst + Ratio·calls + PerSecond·T of them fail), so that the
// reserve carries the other calls' retries; on a flaky server (40% of
// attempts failing) the sheddable calls are the ones that fail, and a
// smaller share of them than of all calls before issue 44 (today's budget,
// no call Sheddable).
func TestSheddableShedFirst(t *testing.T) {
	if raceEnabled {
		t.Skip("a storm's statistics over thousands of calls: run without -race (the README's test command)")
	}
	th := grpcbackoff.DefaultThrottle()
	for _, failing := range []float64{0.4, 1} {
		t.Run(fmt.Sprintf("%.0f%% failing", 100*failing), func(t *testing.T) {
			s := refundStorm{rate: 100, failing: failing, code: codes.Unavailable, latency: 50 * time.Millisecond,
				outageAt: 20 * time.Second, outage: 10 * time.Second, end: 32 * time.Second, mixed: true, seed: 1}
			s.run(t)
			t.Logf("%v; sheddable: %d retries failed, %d calls failed", &s, s.shedFailed, s.shedCalls)
			shed, other := s.shedFailed, s.failed-s.shedFailed
			shedCalls, otherCalls := s.shedCalls, s.calls-s.shedCalls
			if failing == 1 {
				longRun := float64(th.Burst) + th.Ratio*float64(s.started) + th.PerSecond*s.outage.Seconds()
				if float64(shed) > longRun || shed >= other/2 {
					t.Errorf("%d sheddable retries failed, %d others: want at most the long-run allowance, %.0f, and under half the others'", shed, other, longRun)
				}
				return
			}
			today := s
			today.mixed, today.today = false, true
			today.run(t)
			t.Logf("today, no call Sheddable: %v", &today)
			if otherCalls > shedCalls || 2*shedCalls > today.calls {
				t.Errorf("%d sheddable calls failed of half the calls, %d others; today %d of all: want the sheddable ones first, a smaller share than today's",
					shedCalls, otherCalls, today.calls)
			}
		})
	}
}

// TestCanceledRetryCostsNothing: a call whose caller gives up during its
// retry's backoff never sends the retry, and leaves the budget as it was
// before the retry was paid; so does a call whose retry the server then
// serves. A call whose retry fails keeps its cost.
func TestCanceledRetryCostsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var attempts atomic.Int64
		fail := atomic.Bool{}
		srv := newFaultyServer(t, func(ctx context.Context, _ int) error {
			attempts.Add(1)
			md, _ := metadata.FromIncomingContext(ctx)
			if len(md.Get(interceptor.PreviousAttemptsKey)) == 0 || fail.Load() { // a call's first attempt fails
				return status.Error(codes.Unavailable, "down")
			}
			return nil
		}, respSize(1))
		r, err := interceptor.New(grpcbackoff.DefaultPolicy(), testService)
		if err != nil {
			t.Fatal(err)
		}
		c := srv.Client(t, r.DialOptions()...)
		if _, err := c.UnaryCall(t.Context(), &testgrpc.SimpleRequest{}); err != nil { // the target's budget, served after a retry
			t.Fatal(err)
		}
		before := r.States()[0].Retries

		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(500*time.Millisecond, cancel) // during the 1–2 s backoff
		sent := attempts.Load()
		if _, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}); status.Code(err) != codes.Canceled {
			t.Fatalf("canceled call: %v, want CANCELED", err)
		}
		if n := attempts.Load() - sent; n != 1 {
			t.Fatalf("canceled call: %d attempts reached the server, want 1", n)
		}
		if got := r.States()[0].Retries; got != before {
			t.Errorf("after a call canceled during its backoff: %v retries in the budget, want %v as before", got, before)
		}

		fail.Store(true)
		ctx, cancel = context.WithTimeout(t.Context(), 2500*time.Millisecond) // one retry, then the deadline rule
		defer cancel()
		if _, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err == nil {
			t.Fatal("failing call: succeeded")
		}
		if got := r.States()[0].Retries; got > before-1 {
			t.Errorf("after a call whose retry failed: %v retries in the budget, want at most %v (its retry paid)", got, before-1)
		}
	})
}
