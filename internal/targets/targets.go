// Package targets is the state the engine keeps per backend target, shared
// by every ClientConn to it and by every call through one Retrier: the
// target's retry budget (the process's own, internal/budget, or one shared
// beyond the process, Shared), its adaptive throttling (internal/adaptive),
// and, per ClientConn, its closing and the Google API its calls serve
// (internal/cloudclients). In the engine's layers it sits above one
// attempt's facts (internal/attempt) and below the call (internal/loop),
// which asks it to pay for retries.
package targets

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/adaptive"
	"github.com/platformkit/grpcbackoff/internal/budget"
	"github.com/platformkit/grpcbackoff/internal/cloudclients"
	"github.com/platformkit/grpcbackoff/internal/decide"
)

// Shared is a target's retry budget shared beyond the process, as the
// engine uses it: interceptor.SharedBudget without State, which only
// interceptor's States reads.
type Shared interface {
	Started()
	Succeeded()
	Allow(now time.Time) bool
	AllowLongRun(now time.Time) bool
}

// Deferred is a Shared budget that pays for a retry when it is due, after
// its backoff: interceptor.DeferredBudget without State.
type Deferred interface {
	Shared
	Want(now, due time.Time, longRun bool) bool
}

// State is the state that every ClientConn with one canonical target
// shares: its retry budget and its adaptive throttling.
type State struct {
	name     string
	budget   *budget.Budget  // nil: no throttle, or a shared budget
	shared   Shared          // the Registry's Shared budget for it; nil: none
	adaptive *adaptive.Limiter // nil: no adaptive throttling
	conns    int             // ClientConns registered for it; guarded by Registry.mu
	idle     time.Time       // when its last ClientConn shut down; zero while it has one; guarded by Registry.mu
}

// Name is the target's canonical name (cc.CanonicalTarget()), "" for calls
// made without a ClientConn.
func (t *State) Name() string { return t.name }

// Tokens returns the retries the target's own budget could pay for at now,
// and false when it has none (no throttle, or a Shared budget).
func (t *State) Tokens(now time.Time) (float64, bool) {
	if t.budget == nil {
		return 0, false
	}
	return t.budget.Tokens(now), true
}

// Shared returns the target's Shared budget, nil if it has none.
func (t *State) Shared() Shared { return t.shared }

// Adaptive returns the target's adaptive throttling, nil if it has none.
func (t *State) Adaptive() *adaptive.Limiter { return t.adaptive }

// Conn is what a call needs of its ClientConn: its target's state, and a
// channel closed when the ClientConn shuts down (nil for calls without a
// ClientConn: it never closes).
type Conn struct {
	t      *State
	cc     *grpc.ClientConn // nil for calls without a ClientConn
	closed chan struct{}
	// API is the Google API the ClientConn's calls serve, once a call told
	// (cloudclients.APIOf).
	API atomic.Pointer[cloudclients.API]
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
	Throttle *grpcbackoff.Throttle                            // each target's budget; nil: no throttle
	Shared   func(name string, t grpcbackoff.Throttle) Shared // returns a target's Shared budget, or nil; nil: none
	Adaptive *grpcbackoff.AdaptiveThrottle                    // each target's adaptive throttling; nil: none
	Max      int                                              // targets past which the idle ones are dropped; a target's state weighs under a kilobyte

	conns sync.Map // *grpc.ClientConn -> *Conn

	mu      sync.Mutex
	byName  map[string]*State
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
func (r *Registry) newState(name string) *State {
	t := &State{name: name}
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
	return t
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
			r.byName = make(map[string]*State)
		}
		r.byName[name] = t
	}
	t.conns++
	t.idle = time.Time{}
	cs := &Conn{t: t, cc: cc, closed: make(chan struct{})}
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
	var idle []*State
	for _, t := range r.byName {
		if t.conns == 0 {
			idle = append(idle, t)
		}
	}
	slices.SortFunc(idle, func(a, b *State) int { return a.idle.Compare(b.idle) })
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
func (r *Registry) All() []*State {
	r.mu.Lock()
	defer r.mu.Unlock()
	all := make([]*State, 0, len(r.byName)+1)
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

// Started tells the budget of cs's target that a call started.
func (cs *Conn) Started() {
	if b := cs.t.budget; b != nil {
		b.Started()
	} else if s := cs.t.shared; s != nil {
		s.Started()
	}
}

// Succeeded tells the budget of cs's target that an attempt succeeded,
// which feeds its reserve.
func (cs *Conn) Succeeded() { cs.SucceededOn(0) }

// SucceededOn is Succeeded, counted on stripe i of the budget's counters.
func (cs *Conn) SucceededOn(i int) {
	if b := cs.t.budget; b != nil {
		b.SucceededOn(i)
	} else if s := cs.t.shared; s != nil {
		s.Succeeded()
	}
}

// Budget returns the budget of cs's target, nil (an interface) if it has
// none.
func (cs *Conn) Budget() decide.Budget {
	if b := cs.t.budget; b != nil {
		return b
	}
	if s := cs.t.shared; s != nil {
		return s
	}
	return nil
}

// Deferred returns cs's target's budget if it is a Deferred one.
func (cs *Conn) Deferred() Deferred {
	if cs.t.budget == nil {
		if b, ok := cs.t.shared.(Deferred); ok {
			return b
		}
	}
	return nil
}

// Adaptive returns the adaptive throttling of cs's target, nil if it has
// none.
func (cs *Conn) Adaptive() *adaptive.Limiter { return cs.t.adaptive }

// Record counts, for the adaptive throttling of cs's target, an attempt of
// a call with context ctx that ended with err (see
// interceptor.WithAdaptiveThrottle). An attempt the caller canceled, or
// that the closing of the ClientConn ended, is not counted: the backend
// refused nothing. A deadline's end is counted as not accepted, whichever
// deadline it was.
func (cs *Conn) Record(ctx context.Context, err error) {
	if cs.t.adaptive != nil {
		cs.recordAdaptive(ctx, err)
	}
}

func (cs *Conn) recordAdaptive(ctx context.Context, err error) {
	a := cs.t.adaptive
	if ctx.Err() == context.Canceled || status.Code(err) == codes.Canceled && cs.Closed() {
		return
	}
	code := status.Code(err)
	if ctx.Err() == context.DeadlineExceeded {
		code = codes.DeadlineExceeded // not the CANCELED of a context grpc-go saw end
	}
	a.Record(time.Now(), adaptive.Accepted(code))
}
