// Package targets is the state the engine keeps per backend target, shared
// by every ClientConn to it and by every call through one Retrier: the
// target's gates (internal/gate: its adaptive throttling, then its retry
// budget, the process's own or one shared beyond the process), and, per
// ClientConn, its closing, the retry policies of its control plane
// (internal/connpolicy) and what the engine's Hook keeps of it. In the
// engine's layers it sits above the gates and below the retry loop (internal/loop), which asks a call's gates.
package targets

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/adaptive"
	"github.com/platformkit/grpcbackoff/internal/budget"
	"github.com/platformkit/grpcbackoff/internal/connpolicy"
	"github.com/platformkit/grpcbackoff/internal/gate"
)

// Target is the state that every ClientConn with one canonical target
// shares: its gates (gate.Set), and the retry budget and adaptive
// throttling among them, which Retrier.States reads.
type Target struct {
	name     string
	gates    gate.Set
	budget   *budget.Budget    // nil: no throttle, or a shared budget
	shared   gate.SharedBudget // the Registry's SharedBudget for it; nil: none
	adaptive *adaptive.Limiter // nil: no adaptive throttling
	conns    int               // ClientConns registered for it; guarded by Registry.mu
	idle     time.Time         // when its last ClientConn shut down; zero while it has one; guarded by Registry.mu
}

// Name is the target's canonical name (cc.CanonicalTarget()), "" for calls
// made without a ClientConn.
func (t *Target) Name() string { return t.name }

// Tokens returns the retries the target's own budget could pay for at now,
// and false when it has none (no throttle, or a Shared budget).
func (t *Target) Tokens(now time.Time) (float64, bool) {
	if t.budget == nil {
		return 0, false
	}
	return t.budget.Tokens(now), true
}

// Shared returns the target's Shared budget, nil if it has none.
func (t *Target) Shared() gate.SharedBudget { return t.shared }

// Adaptive returns the target's adaptive throttling, nil if it has none.
func (t *Target) Adaptive() *adaptive.Limiter { return t.adaptive }

// Conn is what a call needs of its ClientConn: its target's state, and a
// channel closed when the ClientConn shuts down (nil for calls without a
// ClientConn: it never closes).
type Conn struct {
	t      *Target
	cc     *grpc.ClientConn // nil for calls without a ClientConn
	closed chan struct{}
	// Hook is what the engine's Hook keeps of the ClientConn (the Google
	// API its calls serve, once a call told it): nil until it keeps one.
	Hook atomic.Pointer[any]
	// Policies reads the retry policies the ClientConn's service config
	// gives its methods (its resolver's); nil for calls without a
	// ClientConn.
	Policies *connpolicy.Source
	// XDS says the ClientConn resolves through xDS (connpolicy.XDS), where
	// a route's retry policy is grpc-go's alone to apply.
	XDS bool
	// GRPCRetry says grpc-go's own retry is on for the ClientConn: its
	// calls come through interceptors that keep it on (KeepsGRPCRetry).
	GRPCRetry atomic.Bool
}

// Detached returns the state of cc as an unregistered ClientConn has it,
// for what a call on cc would do (Explain), without registering cc:
// grpcRetry says grpc-go's own retry is on for it. It has no target's gates.
func Detached(cc *grpc.ClientConn, grpcRetry bool) *Conn {
	cs := &Conn{cc: cc, Policies: connpolicy.New(cc), XDS: connpolicy.XDS(cc.CanonicalTarget())}
	cs.GRPCRetry.Store(grpcRetry)
	return cs
}

// KeepsGRPCRetry records that grpc-go's own retry is on for cs's
// ClientConn; it writes nothing once recorded.
func (cs *Conn) KeepsGRPCRetry() {
	if !cs.GRPCRetry.Load() {
		cs.GRPCRetry.Store(true)
	}
}

// Registry is a Retrier's registry of ClientConns and their targets. A
// ClientConn is registered by its first call, and unregistered when it shuts
// down, by one goroutine per ClientConn that watches its state. A target's
// state lives as long as the Retrier, whatever its ClientConns do: a
// ClientConn per request shares one budget, and an outage's floor is paid
// once. Past Max targets, the targets idle longest (without a ClientConn)
// are dropped, and what their budgets hold is kept (budget.Saved, 32 bytes)
// for the last maxDropped·Max of them: one that comes back gets its budget
// as it left it, never a new full one; a target never seen, or forgotten,
// gets a new one. The state of calls made without a ClientConn (target "")
// is made by the first such call. Its settings are set before the first
// call; it is then safe for concurrent use.
type Registry struct {
	Throttle *grpcbackoff.Throttle                                       // each target's budget; nil: no throttle
	Shared   func(name string, t grpcbackoff.Throttle) gate.SharedBudget // returns a target's SharedBudget, or nil; nil: none
	Adaptive *grpcbackoff.AdaptiveThrottle                               // each target's adaptive throttling; nil: none
	Max      int                                                         // targets past which the idle ones are dropped; a target's state weighs under a kilobyte
	// Extra returns the gates a target has after its built-in ones, in
	// the order they are asked; nil: none. Only the loop package's tests
	// set it (loop.Engine.Prepare).
	Extra func(name string) []gate.Gate

	conns sync.Map // *grpc.ClientConn -> *Conn

	mu      sync.Mutex
	byName  map[string]*Target
	dropped dropped              // targets dropped for disuse, by name
	local   atomic.Pointer[Conn] // calls without a ClientConn; nil until one is made
}

// maxDropped is how many dropped targets' budgets are kept, per Max
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

func (d *dropped) add(name string, s budget.Saved, maxTargets int) {
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

// newState returns a target's state with a full budget for the throttle,
// or, for a target dropped for disuse, its budget as it was. r.mu is held.
func (r *Registry) newState(name string) *Target {
	t := &Target{name: name}
	if r.Throttle != nil && r.Shared != nil {
		t.shared = r.Shared(name, *r.Throttle)
	}
	if r.Throttle != nil && t.shared == nil {
		now := time.Now()
		if s, ok := r.dropped.take(name); ok {
			t.budget, _ = budget.Restored(*r.Throttle, s, now) // validated by WithThrottle
		} else {
			t.budget, _ = budget.New(*r.Throttle, now)
		}
	}
	if r.Adaptive != nil {
		t.adaptive, _ = adaptive.New(*r.Adaptive) // validated by WithAdaptiveThrottle
	}
	gates := r.builtIn(t)
	if r.Extra != nil {
		gates = append(gates, r.Extra(name)...)
	}
	t.gates = gate.NewSet(gates...)
	return t
}

// builtIn returns the gates every target of r has, in the order they are
// asked: adaptive throttling first, which may reject a call or a retry
// without costing the budget anything, then the budget.
func (r *Registry) builtIn(t *Target) []gate.Gate {
	var gs []gate.Gate
	if t.adaptive != nil {
		gs = append(gs, gate.Adaptive{L: t.adaptive})
	}
	switch {
	case t.budget != nil:
		gs = append(gs, gate.Budget{B: t.budget})
	case t.shared != nil:
		gs = append(gs, gate.NewShared(t.shared))
	}
	return gs
}

// Conn returns the state of cc, registering cc on its first call, or, for
// a nil cc, that of calls without a ClientConn. It allocates nothing once
// cc is registered.
func (r *Registry) Conn(cc *grpc.ClientConn) *Conn {
	if cc == nil {
		if cs := r.local.Load(); cs != nil {
			return cs
		}
		return r.makeLocal()
	}
	if v, ok := r.conns.Load(cc); ok {
		return v.(*Conn)
	}
	return r.register(cc)
}

// Registered returns the state of cc if a call registered it, nil if not.
func (r *Registry) Registered(cc *grpc.ClientConn) *Conn {
	if v, ok := r.conns.Load(cc); ok {
		return v.(*Conn)
	}
	return nil
}

// makeLocal makes the state of calls without a ClientConn, once.
func (r *Registry) makeLocal() *Conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cs := r.local.Load(); cs != nil {
		return cs
	}
	cs := &Conn{t: r.newState("")} // closed: nil, it never closes
	r.local.Store(cs)
	return cs
}

func (r *Registry) register(cc *grpc.ClientConn) *Conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	if v, ok := r.conns.Load(cc); ok {
		return v.(*Conn)
	}
	name := cc.CanonicalTarget()
	t := r.byName[name]
	if t == nil {
		if len(r.byName) >= r.Max {
			r.dropIdle()
		}
		t = r.newState(name)
		if r.byName == nil {
			r.byName = make(map[string]*Target)
		}
		r.byName[name] = t
	}
	t.conns++
	t.idle = time.Time{}
	cs := &Conn{t: t, cc: cc, closed: make(chan struct{}), Policies: connpolicy.New(cc), XDS: connpolicy.XDS(name)}
	r.conns.Store(cc, cs)
	go r.watch(cc, cs)
	return cs
}

// watch waits until cc shuts down, then wakes the calls waiting to retry on
// it and unregisters it.
func (r *Registry) watch(cc *grpc.ClientConn, cs *Conn) {
	for s := cc.GetState(); s != connectivity.Shutdown; s = cc.GetState() {
		cc.WaitForStateChange(context.Background(), s)
	}
	close(cs.closed)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.conns.Delete(cc)
	if cs.t.conns--; cs.t.conns == 0 {
		cs.t.idle = time.Now()
	}
}

// dropIdle drops the tenth of Max idle longest, at least one, if that many
// are idle, keeping what their budgets hold. r.mu is held.
func (r *Registry) dropIdle() {
	var idle []*Target
	for _, t := range r.byName {
		if t.conns == 0 {
			idle = append(idle, t)
		}
	}
	slices.SortFunc(idle, func(a, b *Target) int { return a.idle.Compare(b.idle) })
	now := time.Now()
	for _, t := range idle[:min(len(idle), max(r.Max/10, 1))] {
		if t.budget != nil {
			r.dropped.add(t.name, t.budget.Save(now), r.Max)
		}
		delete(r.byName, t.name)
	}
}

// All returns the state of every target r keeps a budget for (the targets
// of its ClientConns, open or closed, but those dropped for disuse), and of
// calls made without a ClientConn if there were any, in no order.
func (r *Registry) All() []*Target {
	r.mu.Lock()
	defer r.mu.Unlock()
	all := make([]*Target, 0, len(r.byName)+1)
	for _, t := range r.byName {
		all = append(all, t)
	}
	if cs := r.local.Load(); cs != nil {
		all = append(all, cs.t)
	}
	return all
}

// Closed reports whether cs's ClientConn has shut down: a call whose
// attempt ended then ends, ReasonCanceled, whatever the attempt's code.
// grpc-go moves the ClientConn to Shutdown before it ends the attempts in
// flight and before it refuses new ones, so its state says so by the time
// such an attempt returns, before the goroutine that watches it hears.
func (cs *Conn) Closed() bool {
	if cs.cc != nil && cs.cc.GetState() == connectivity.Shutdown {
		return true
	}
	select {
	case <-cs.closed:
		return true
	default:
		return false
	}
}

// Done returns a channel closed when cs's ClientConn has shut down, nil for
// calls without a ClientConn.
func (cs *Conn) Done() <-chan struct{} { return cs.closed }

// ClientConn returns cs's ClientConn, nil for calls without one.
func (cs *Conn) ClientConn() *grpc.ClientConn { return cs.cc }

// Gates returns the gates of cs's target, which every call on cs passes.
func (cs *Conn) Gates() *gate.Set { return &cs.t.gates }
