package interceptor

import (
	"context"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff/internal/adaptive"
	"github.com/platformkit/grpcbackoff/internal/budget"
	"github.com/platformkit/grpcbackoff/internal/cloudclients"
)

// errConnClosing is what a call on a closed ClientConn gets from grpc-go
// (grpc.ErrClientConnClosing), and what a call waiting to retry gets when
// its ClientConn is closed.
var errConnClosing = status.Error(codes.Canceled, errConnClosingMessage)

const errConnClosingMessage = "grpc: the client connection is closing"

// TargetState is the retry state of one backend target, as States reports
// it.
type TargetState struct {
	// Target is the canonical target of the ClientConns that share this
	// state (cc.CanonicalTarget(), e.g. "dns:///redis.googleapis.com:443"),
	// or "" for calls made without a ClientConn.
	Target string
	// Retries is the number of retries the target's budget could pay for
	// now; +Inf when the Retrier has no throttle (WithoutThrottle).
	Retries float64
	// RejectProbability is the probability, from 0 to 1, that adaptive
	// throttling rejects a new call to the target now; 0 without it
	// (WithAdaptiveThrottle).
	RejectProbability float64
	// Shared is the state of the target's budget when it is shared with
	// other processes (WithSharedBudget); nil otherwise.
	Shared *SharedBudgetState
}

// targetState is the state that every ClientConn with one canonical target
// shares: its retry budget and its adaptive throttling.
type targetState struct {
	name     string
	budget   *budget.Budget  // nil: no throttle, or a shared budget
	shared   SharedBudget    // WithSharedBudget's budget (shared.go); nil: none
	adaptive *adaptive.State // nil: no adaptive throttling
	conns    int             // ClientConns registered for it; guarded by targets.mu
	idle     time.Time       // when its last ClientConn shut down; zero while it has one; guarded by targets.mu
}

// connState is what a call needs of its ClientConn: its target's state, and
// a channel closed when the ClientConn shuts down (nil for calls without a
// ClientConn: it never closes).
type connState struct {
	t      *targetState
	closed chan struct{}
	api    atomic.Pointer[cloudclients.API] // the Google API its calls serve, once a call told
}

// targets is the Retrier's registry of ClientConns and their targets. A
// ClientConn is registered by its first call, and unregistered when it shuts
// down, by one goroutine per ClientConn that watches its state. A target's
// state lives as long as the Retrier, whatever its ClientConns do: a
// ClientConn per request shares one budget, and an outage's floor is paid
// once. Past maxTargets, the targets idle longest (without a ClientConn) are
// dropped, and what their budgets hold is kept (budget.Saved, 32 bytes) for
// the last maxDropped of them: one that comes back gets its budget as it
// left it, never a new full one; a target never seen, or forgotten, gets a
// new one. The state of calls made without a ClientConn (target "") is
// made by the first such call.
type targets struct {
	conns sync.Map // *grpc.ClientConn -> *connState

	mu      sync.Mutex
	byName  map[string]*targetState
	dropped dropped                   // targets dropped for disuse, by name
	local   atomic.Pointer[connState] // calls without a ClientConn; nil until one is made
}

// maxTargets is the number of targets past which the idle ones are dropped.
// A target's state weighs under a kilobyte.
var maxTargets = 1024

// maxDropped is how many dropped targets' budgets are kept, per maxTargets
// targets kept whole.
const maxDropped = 4

// dropped is what the budgets of the targets dropped for disuse held, by
// the targets' names, for the last maxDropped·maxTargets of them, or fewer
// if their names weigh more than 64 bytes on average. Names are kept
// whole: two names are never taken for one.
type dropped struct {
	saved map[string]budget.Saved
	order []string // oldest first
	bytes int      // of the names kept
}

func (d *dropped) add(name string, s budget.Saved) {
	if d.saved == nil {
		d.saved = make(map[string]budget.Saved)
	}
	if _, ok := d.saved[name]; !ok {
		d.order = append(d.order, name)
		d.bytes += len(name)
	}
	d.saved[name] = s
	for limit := maxDropped * maxTargets; len(d.saved) > limit || d.bytes > limit*64 && len(d.order) > 1; {
		old := d.order[0]
		d.order[0] = ""
		d.order = d.order[1:]
		delete(d.saved, old)
		d.bytes -= len(old)
	}
}

// take returns, and forgets, what the budget of the dropped target name
// held, if it is kept.
func (d *dropped) take(name string) (budget.Saved, bool) {
	s, ok := d.saved[name]
	if ok {
		delete(d.saved, name)
		i := slices.Index(d.order, name)
		d.order = slices.Delete(d.order, i, i+1)
		d.bytes -= len(name)
	}
	return s, ok
}

// newTargetState returns a target's state with a full budget for the
// Retrier's throttle, or, for a target dropped for disuse, its budget as it
// was. r.targets.mu is held.
func (r *Retrier) newTargetState(name string) *targetState {
	t := &targetState{name: name}
	if r.throttle != nil && r.shared != nil {
		t.shared = r.shared(name, *r.throttle)
	}
	if r.throttle != nil && t.shared == nil {
		now := time.Now()
		if s, ok := r.targets.dropped.take(name); ok {
			t.budget, _ = budget.Restored(*r.throttle, s, now) // validated by WithThrottle
		} else {
			t.budget, _ = budget.New(*r.throttle, now)
		}
	}
	if r.adaptive != nil {
		t.adaptive, _ = adaptive.New(*r.adaptive) // validated by WithAdaptiveThrottle
	}
	return t
}

// conn returns the state of cc, registering cc on its first call, or, for
// a nil cc, that of calls without a ClientConn. It allocates nothing once
// cc is registered.
func (r *Retrier) conn(cc *grpc.ClientConn) *connState {
	if cc == nil {
		if cs := r.targets.local.Load(); cs != nil {
			return cs
		}
		return r.makeLocal()
	}
	if v, ok := r.targets.conns.Load(cc); ok {
		return v.(*connState)
	}
	return r.register(cc)
}

// makeLocal makes the state of calls without a ClientConn, once.
func (r *Retrier) makeLocal() *connState {
	ts := &r.targets
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if cs := ts.local.Load(); cs != nil {
		return cs
	}
	cs := &connState{t: r.newTargetState("")} // closed: nil, it never closes
	ts.local.Store(cs)
	return cs
}

func (r *Retrier) register(cc *grpc.ClientConn) *connState {
	ts := &r.targets
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if v, ok := ts.conns.Load(cc); ok {
		return v.(*connState)
	}
	name := cc.CanonicalTarget()
	t := ts.byName[name]
	if t == nil {
		if len(ts.byName) >= maxTargets {
			ts.dropIdle()
		}
		t = r.newTargetState(name)
		if ts.byName == nil {
			ts.byName = make(map[string]*targetState)
		}
		ts.byName[name] = t
	}
	t.conns++
	t.idle = time.Time{}
	cs := &connState{t: t, closed: make(chan struct{})}
	ts.conns.Store(cc, cs)
	go r.watch(cc, cs)
	return cs
}

// watch waits until cc shuts down, then wakes the calls waiting to retry on
// it and unregisters it.
func (r *Retrier) watch(cc *grpc.ClientConn, cs *connState) {
	for s := cc.GetState(); s != connectivity.Shutdown; s = cc.GetState() {
		cc.WaitForStateChange(context.Background(), s)
	}
	close(cs.closed)
	ts := &r.targets
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.conns.Delete(cc)
	if cs.t.conns--; cs.t.conns == 0 {
		cs.t.idle = time.Now()
	}
}

// dropIdle drops the tenth of maxTargets idle longest, at least one, if
// that many are idle, keeping what their budgets hold. ts.mu is held.
func (ts *targets) dropIdle() {
	var idle []*targetState
	for _, t := range ts.byName {
		if t.conns == 0 {
			idle = append(idle, t)
		}
	}
	slices.SortFunc(idle, func(a, b *targetState) int { return a.idle.Compare(b.idle) })
	now := time.Now()
	for _, t := range idle[:min(len(idle), max(maxTargets/10, 1))] {
		if t.budget != nil {
			ts.dropped.add(t.name, t.budget.Save(now))
		}
		delete(ts.byName, t.name)
	}
}

// States returns the retry state of every target r keeps a budget for (the
// targets of its ClientConns, open or closed, but those dropped for
// disuse), sorted by target, and of calls made without a ClientConn
// (Target "") if there were any. It is meant for metrics gauges; each call reads every
// budget once.
func (r *Retrier) States() []TargetState {
	now := time.Now()
	ts := &r.targets
	ts.mu.Lock()
	all := make([]*targetState, 0, len(ts.byName)+1)
	for _, t := range ts.byName {
		all = append(all, t)
	}
	if cs := ts.local.Load(); cs != nil {
		all = append(all, cs.t)
	}
	ts.mu.Unlock()
	states := make([]TargetState, len(all))
	for i, t := range all {
		states[i] = TargetState{Target: t.name, Retries: math.Inf(1)}
		if t.budget != nil {
			states[i].Retries = t.budget.Tokens(now)
		} else if t.shared != nil {
			s := t.shared.State(now)
			states[i].Retries, states[i].Shared = s.Retries, &s
		}
		if t.adaptive != nil {
			states[i].RejectProbability = t.adaptive.RejectProbability(now)
		}
	}
	slices.SortFunc(states, func(a, b TargetState) int { return strings.Compare(a.Target, b.Target) })
	return states
}

// isClosed reports whether cs's ClientConn has shut down.
func (cs *connState) isClosed() bool {
	select {
	case <-cs.closed:
		return true
	default:
		return false
	}
}

// started tells the budget of cs's target that a call started.
func (cs *connState) started() {
	if b := cs.t.budget; b != nil {
		b.Started()
	} else if s := cs.t.shared; s != nil {
		s.Started()
	}
}

// succeeded tells the budget of cs's target that an attempt succeeded,
// which feeds its reserve.
func (cs *connState) succeeded() { cs.succeededOn(0) }

// succeededOn is succeeded, counted on stripe i of the budget's counters.
func (cs *connState) succeededOn(i int) {
	if b := cs.t.budget; b != nil {
		b.SucceededOn(i)
	} else if s := cs.t.shared; s != nil {
		s.Succeeded()
	}
}

// connClosed reports whether the ClientConn cc, or the state conn watches,
// has shut down: a call whose attempt ended then ends, ReasonCanceled,
// whatever the attempt's code. grpc-go moves cc to Shutdown before it ends
// the attempts in flight and before it refuses new ones, so the state is
// set by the time such an attempt returns.
func connClosed(cc *grpc.ClientConn, conn *connState) bool {
	return cc != nil && cc.GetState() == connectivity.Shutdown || conn.isClosed()
}
