package interceptor

import (
	"context"
	"hash/maphash"
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
}

// targets is the Retrier's registry of ClientConns and their targets. A
// ClientConn is registered by its first call, and unregistered when it shuts
// down, by one goroutine per ClientConn that watches its state. A target's
// state lives as long as the Retrier, whatever its ClientConns do: a
// ClientConn per request shares one budget, and an outage's floor is paid
// once. Past maxTargets, the targets idle longest (without a ClientConn) are
// dropped; one that comes back gets a budget with its floor paid until a
// call succeeds (budget.Revived), never a new full one.
type targets struct {
	conns sync.Map // *grpc.ClientConn -> *connState

	mu        sync.Mutex
	byName    map[string]*targetState
	dropped   *droppedNames // targets dropped for disuse; nil until one is
	local     connState     // calls without a ClientConn; its t is set by New
	localUsed atomic.Bool   // a call was made without a ClientConn
}

// maxTargets is the number of targets past which the idle ones are dropped.
// A target's state weighs under a kilobyte.
var maxTargets = 1024

// droppedNames is the set of the names of targets dropped for disuse, as
// bits of a hash: a name that was never dropped may be taken for one (one
// chance in 8 after 8 192 drops), and then gets a revived budget too.
type droppedNames struct {
	seed maphash.Seed
	bits [1 << 16 / 64]uint64
}

func (d *droppedNames) bit(name string) (int, uint64) {
	h := maphash.String(d.seed, name) % (1 << 16)
	return int(h / 64), 1 << (h % 64)
}

func (d *droppedNames) add(name string) {
	i, m := d.bit(name)
	d.bits[i] |= m
}

func (d *droppedNames) has(name string) bool {
	if d == nil {
		return false
	}
	i, m := d.bit(name)
	return d.bits[i]&m != 0
}

// newTargetState returns a target's state with a full budget for the
// Retrier's throttle, or, for a target dropped for disuse, a revived one.
// r.targets.mu is held, or r is being built.
func (r *Retrier) newTargetState(name string) *targetState {
	t := &targetState{name: name}
	if r.throttle != nil && r.shared != nil {
		t.shared = r.shared(name, *r.throttle)
	}
	if r.throttle != nil && t.shared == nil {
		newBudget := budget.New
		if r.targets.dropped.has(name) {
			newBudget = budget.Revived
		}
		t.budget, _ = newBudget(*r.throttle, time.Now()) // validated by WithThrottle
	}
	if r.adaptive != nil {
		t.adaptive, _ = adaptive.New(*r.adaptive) // validated by WithAdaptiveThrottle
	}
	return t
}

// conn returns the state of cc, registering cc on its first call. It
// allocates nothing once cc is registered.
func (r *Retrier) conn(cc *grpc.ClientConn) *connState {
	if cc == nil {
		if !r.targets.localUsed.Load() {
			r.targets.localUsed.Store(true)
		}
		return &r.targets.local
	}
	if v, ok := r.targets.conns.Load(cc); ok {
		return v.(*connState)
	}
	return r.register(cc)
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
// that many are idle, remembering their names. ts.mu is held.
func (ts *targets) dropIdle() {
	var idle []*targetState
	for _, t := range ts.byName {
		if t.conns == 0 {
			idle = append(idle, t)
		}
	}
	slices.SortFunc(idle, func(a, b *targetState) int { return a.idle.Compare(b.idle) })
	if ts.dropped == nil && len(idle) > 0 {
		ts.dropped = &droppedNames{seed: maphash.MakeSeed()}
	}
	for _, t := range idle[:min(len(idle), max(maxTargets/10, 1))] {
		ts.dropped.add(t.name)
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
	if ts.localUsed.Load() {
		all = append(all, ts.local.t)
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
