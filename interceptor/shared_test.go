package interceptor_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// fleet is a stand-in for a fleet's shared budgets: one budget per target,
// each paying for retries while it holds tokens.
type fleet struct {
	mu      sync.Mutex
	tokens  int
	asked   map[string]grpcbackoff.Throttle
	budgets map[string]*sharedBudget
}

func (f *fleet) budget(target string, th grpcbackoff.Throttle) interceptor.SharedBudget {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.budgets == nil {
		f.budgets, f.asked = map[string]*sharedBudget{}, map[string]grpcbackoff.Throttle{}
	}
	f.asked[target] = th
	b := f.budgets[target]
	if b == nil {
		b = &sharedBudget{name: "fleet:" + target}
		b.tokens.Store(int64(f.tokens))
		f.budgets[target] = b
	}
	return b
}

type sharedBudget struct {
	name                    string
	tokens                  atomic.Int64
	started, succeeded      atomic.Int64
	allowed, longRun, asked atomic.Int64
}

func (b *sharedBudget) Started()   { b.started.Add(1) }
func (b *sharedBudget) Succeeded() { b.succeeded.Add(1) }
func (b *sharedBudget) Allow(time.Time) bool {
	b.asked.Add(1)
	if b.tokens.Add(-1) < 0 {
		b.tokens.Add(1)
		return false
	}
	b.allowed.Add(1)
	return true
}
func (b *sharedBudget) AllowLongRun(now time.Time) bool { b.longRun.Add(1); return b.Allow(now) }
func (b *sharedBudget) State(time.Time) interceptor.SharedBudgetState {
	return interceptor.SharedBudgetState{Name: b.name, Retries: float64(b.tokens.Load()), Joined: true, FleetSize: 3, Leases: 7, Fallbacks: 1}
}

// TestSharedBudget: with WithSharedBudget each target's calls are counted
// by, and their retries paid from, the budget made for that target with the
// Retrier's Throttle; States and Explain say so.
func TestSharedBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fleet{tokens: 2}
		th := grpcbackoff.DefaultThrottle()
		th.Burst = 42
		r, err := interceptor.New(bufconntest.Exact(), testService, interceptor.WithThrottle(th), interceptor.WithSharedBudget(f.budget))
		if err != nil {
			t.Fatal(err)
		}
		down := newBackend(t, codes.Unavailable, 1<<40)
		up := newBackend(t, codes.Unavailable, 0)
		a := dialAs(t, down, "passthrough:///backend-a", r.DialOptions()...)
		b := dialAs(t, up, "passthrough:///backend-b", r.DialOptions()...)
		ctx := t.Context()

		_, err = testgrpc.NewTestServiceClient(a).UnaryCall(ctx, &testgrpc.SimpleRequest{})
		var ge *grpcbackoff.Error
		if !errors.As(err, &ge) || ge.Attempts != 3 || ge.Reason != grpcbackoff.ReasonThrottled {
			t.Fatalf("call to the broken backend: err = %v, want 3 attempts (2 retries paid by the shared budget), then throttled", err)
		}
		for range 3 {
			if _, err := testgrpc.NewTestServiceClient(b).UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
				t.Fatalf("call to the healthy backend: %v", err)
			}
		}
		ba, bb := f.budgets["passthrough:///backend-a"], f.budgets["passthrough:///backend-b"]
		if ba == nil || bb == nil {
			t.Fatalf("budgets made for %v, want both targets", f.asked)
		}
		if got := f.asked["passthrough:///backend-a"]; got != th {
			t.Errorf("budget made with %+v, want the Retrier's Throttle %+v", got, th)
		}
		if ba.started.Load() != 1 || ba.succeeded.Load() != 0 || ba.allowed.Load() != 2 || ba.asked.Load() != 3 {
			t.Errorf("backend-a's budget: %d started, %d succeeded, %d of %d retries paid; want 1, 0, 2 of 3",
				ba.started.Load(), ba.succeeded.Load(), ba.allowed.Load(), ba.asked.Load())
		}
		// Successes may be told in batches: at most 3 here.
		if bb.started.Load() != 3 || bb.succeeded.Load() > 3 || bb.asked.Load() != 0 {
			t.Errorf("backend-b's budget: %d started, %d succeeded, %d retries asked; want 3, at most 3, 0", bb.started.Load(), bb.succeeded.Load(), bb.asked.Load())
		}
		for _, s := range r.States() {
			if s.Target == "passthrough:///backend-b" {
				want := interceptor.SharedBudgetState{Name: "fleet:passthrough:///backend-b", Retries: 2, Joined: true, FleetSize: 3, Leases: 7, Fallbacks: 1}
				if s.Shared == nil || *s.Shared != want || s.Retries != 2 {
					t.Errorf("States(): %+v (Shared %+v), want Retries 2 and Shared %+v", s, s.Shared, want)
				}
			}
		}
		d := r.Explain("/pkg.Svc/Get")
		if !d.SharedBudget || !strings.Contains(d.String(), "shared by the fleet") {
			t.Errorf("Explain = %q (SharedBudget %v), want it to say the budget is the fleet's", d, d.SharedBudget)
		}
	})
}

// TestSharedBudgetOff: WithoutThrottle turns shared budgets off too, and a
// nil SharedBudget leaves the target the Retrier's own budget.
func TestSharedBudgetOff(t *testing.T) {
	called := false
	r, err := interceptor.New(grpcbackoff.DefaultPolicy(), interceptor.WithoutThrottle(),
		interceptor.WithSharedBudget(func(string, grpcbackoff.Throttle) interceptor.SharedBudget { called = true; return nil }))
	if err != nil {
		t.Fatal(err)
	}
	if d := r.Explain("/pkg.Svc/Get"); called || d.SharedBudget {
		t.Errorf("WithoutThrottle: budget called %v, Explain.SharedBudget %v; want neither", called, d.SharedBudget)
	}
	ic := interceptor.Unary(bufconntest.Exact(), interceptor.WithSharedBudget(func(string, grpcbackoff.Throttle) interceptor.SharedBudget { return nil }))
	s := &script{errs: bufconntest.Unavailable(1)}
	if err := call(context.Background(), t, ic, s); err != nil || len(s.times) != 2 {
		t.Errorf("a nil SharedBudget: err %v after %d attempts, want success after a retry paid by the Retrier's own budget", err, len(s.times))
	}
	if _, err := interceptor.New(grpcbackoff.DefaultPolicy(), interceptor.WithSharedBudget(nil)); err == nil || !strings.Contains(err.Error(), "WithSharedBudget(nil)") {
		t.Errorf("WithSharedBudget(nil): %v, want an error naming it", err)
	}
}

// TestSharedBudgetTypedNil: a factory that returns a nil *T as its
// SharedBudget (a typed nil) leaves each target the Retrier's own budget, as
// a nil one does: calls, retries and States work, and States says no budget
// is shared. (Issue 34: New accepted it, and every call and States
// panicked.)
func TestSharedBudgetTypedNil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := bufconntest.NewServer(t, bufconntest.Steps(failWith(codes.Unavailable), bufconntest.Succeed(1)))
		r, err := interceptor.New(bufconntest.Exact(), testService, interceptor.WithSharedBudget(func(string, grpcbackoff.Throttle) interceptor.SharedBudget {
			var b *sharedBudget
			return b
		}))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := srv.Client(t, r.DialOptions()...).UnaryCall(t.Context(), &testgrpc.SimpleRequest{}); err != nil || srv.Count() != 2 {
			t.Errorf("err %v after %d attempts, want success after a retry paid by the Retrier's own budget", err, srv.Count())
		}
		fresh, err := interceptor.New(bufconntest.Exact(), testService)
		if err != nil {
			t.Fatal(err)
		}
		c := bufconntest.NewServer(t, bufconntest.Steps(failWith(codes.Unavailable), bufconntest.Succeed(1))).Client(t, fresh.DialOptions()...)
		if _, err := c.UnaryCall(t.Context(), &testgrpc.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
		states, want := r.States(), fresh.States()
		if len(states) != 1 || states[0].Shared != nil || states[0].Retries != want[0].Retries {
			t.Errorf("States() = %+v, want one target without a shared budget, as the Retrier's own budget after the same call: %+v", states, want)
		}
	})
}

func TestSharedBudgetSuccessAllocatesNothing(t *testing.T) {
	f := &fleet{}
	invoke := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	ic := interceptor.Unary(grpcbackoff.DefaultPolicy(), interceptor.WithSharedBudget(f.budget))
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() { ic(ctx, "/pkg.Svc/Get", nil, nil, nil, invoke) }); n != 0 {
		t.Errorf("a successful call allocates %v times, want 0", n)
	}
	// Successes may be told in batches (of at most 64).
	if b := f.budgets[""]; b == nil || b.started.Load() < 1000 || b.succeeded.Load() > b.started.Load() || b.succeeded.Load() < b.started.Load()-64 {
		t.Errorf("the shared budget of calls without a ClientConn counted %+v, want every call started and succeeded", b)
	}
}

// TestSuccessesCountedToTheirTarget: the successes a Retrier counts
// together are told to the budget of the target whose calls made them,
// however calls to two targets interleave.
func TestSuccessesCountedToTheirTarget(t *testing.T) {
	f := &fleet{}
	r, err := interceptor.New(grpcbackoff.DefaultPolicy(), interceptor.WithSharedBudget(f.budget))
	if err != nil {
		t.Fatal(err)
	}
	ic := r.Unary()
	invoke := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	busy, quiet := newIdleConn(t, "passthrough:///busy"), newIdleConn(t, "passthrough:///quiet")
	ctx := context.Background()
	for range 100 {
		for range 15 {
			ic(ctx, "/pkg.Svc/Get", nil, nil, busy, invoke)
		}
		ic(ctx, "/pkg.Svc/Get", nil, nil, quiet, invoke)
	}
	for _, target := range []string{"passthrough:///busy", "passthrough:///quiet"} {
		b := f.budgets[target]
		if b == nil || b.succeeded.Load() > b.started.Load() || b.succeeded.Load() < b.started.Load()-64 {
			t.Errorf("%s: %+v; want the successes of its own calls, some told late", target, b)
		}
	}
}

// newIdleConn returns a ClientConn to target that no call in the test
// sends on (their invoker does not).
func newIdleConn(t *testing.T, target string) *grpc.ClientConn {
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}
