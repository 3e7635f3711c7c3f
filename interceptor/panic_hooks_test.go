package interceptor_test

// Issue 34, item 2: a hook, an observer, a shared budget or an interceptor
// chained after the library's that panics, on every path a call takes
// (retried, cut, hedged, streamed, replayed, reopened): the panic reaches
// the caller's goroutine once, every goroutine the call started ends, and
// the budget is left as if the call had ended there.

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/budget"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// tripwire goes off at the at-th time it is hit: it panics with boom{name},
// or, for the twin run that shows what ending the call there leaves,
// cancels the call's context.
type tripwire struct {
	name   string
	at     int32
	panics bool
	cancel context.CancelFunc

	armed atomic.Bool // hits count from then on
	hits  atomic.Int32
	fired atomic.Bool
}

// hit counts a hit and reports whether the wire went off (in the twin run:
// it did not panic).
func (w *tripwire) hit() bool {
	if !w.armed.Load() || w.hits.Add(1) != w.at {
		return false
	}
	w.fired.Store(true)
	if w.panics {
		panic(boom{w.name})
	}
	w.cancel()
	return true
}

// trippedBudget is a SharedBudget that keeps a real budget of the
// Retrier's Throttle and trips its wire in one of its methods: Started and
// Succeeded after counting, Allow and AllowLongRun before paying (a twin's
// refuses).
type trippedBudget struct {
	b      *budget.Budget
	method string
	w      *tripwire
}

func (s *trippedBudget) Started() {
	s.b.Started()
	if s.method == "Started" {
		s.w.hit()
	}
}

func (s *trippedBudget) Succeeded() {
	s.b.Succeeded()
	if s.method == "Succeeded" {
		s.w.hit()
	}
}

func (s *trippedBudget) Allow(now time.Time) bool {
	if s.method == "Allow" && s.w.hit() {
		return false
	}
	return s.b.Allow(now)
}

func (s *trippedBudget) AllowLongRun(now time.Time) bool {
	if s.method == "AllowLongRun" && s.w.hit() {
		return false
	}
	return s.b.AllowLongRun(now)
}

func (s *trippedBudget) State(now time.Time) interceptor.SharedBudgetState {
	return interceptor.SharedBudgetState{Name: "tripped", Retries: s.b.Tokens(now)}
}

// trippedObserver trips its wire in OnRetry or OnEnd.
type trippedObserver struct {
	onEnd bool
	w     *tripwire
}

func (o trippedObserver) OnRetry(context.Context, interceptor.Retry) {
	if !o.onEnd {
		o.w.hit()
	}
}

func (o trippedObserver) OnEnd(context.Context, interceptor.End) {
	if o.onEnd {
		o.w.hit()
	}
}

// A hook is where the wire is: hits are counted per call.
type panicHook struct {
	name string
	at   int32 // the hit that trips
	opts func(w *tripwire) []interceptor.Option
	// chained: the wire is in an interceptor chained after the library's,
	// in its second attempt (a stream's: in its SendMsg, which the replay
	// calls on a goroutine of the library's); opening: in a stream's second
	// opening, once the stream under it is made.
	chained, opening bool
}

func sharedHook(method string, at int32) panicHook {
	return panicHook{name: "SharedBudget." + method, at: at, opts: func(w *tripwire) []interceptor.Option {
		return []interceptor.Option{interceptor.WithSharedBudget(func(string, grpcbackoff.Throttle) interceptor.SharedBudget {
			b, err := budget.New(grpcbackoff.DefaultThrottle(), time.Now())
			if err != nil {
				panic(err)
			}
			return &trippedBudget{b: b, method: method, w: w}
		})}
	}}
}

var panicHooks = []panicHook{
	{name: "WithOnRetry", at: 1, opts: func(w *tripwire) []interceptor.Option {
		return []interceptor.Option{interceptor.WithOnRetry(func(interceptor.Retry) { w.hit() })}
	}},
	{name: "Observer.OnRetry", at: 1, opts: func(w *tripwire) []interceptor.Option {
		return []interceptor.Option{interceptor.WithObserver(trippedObserver{w: w})}
	}},
	{name: "Observer.OnRetry, second", at: 2, opts: func(w *tripwire) []interceptor.Option {
		return []interceptor.Option{interceptor.WithObserver(trippedObserver{w: w})}
	}},
	{name: "Observer.OnEnd", at: 1, opts: func(w *tripwire) []interceptor.Option {
		return []interceptor.Option{interceptor.WithObserver(trippedObserver{onEnd: true, w: w})}
	}},
	sharedHook("Started", 1),
	sharedHook("Succeeded", 1),
	sharedHook("Allow", 1),
	sharedHook("AllowLongRun", 1),
	{name: "chained interceptor", at: 1, chained: true},
	{name: "chained interceptor, opening", at: 1, opening: true},
}

// A panicPath is a call that reaches every hook on its way, or some.
type panicPath struct {
	name    string
	kind    callKind
	steps   []bufconntest.Step
	timeout time.Duration // Policy.AttemptTimeout
	hedged  bool
	// reopen: an interceptor chained after the library's fails the
	// stream's first opening, before anything is sent.
	reopen bool
	// hooks are the hooks the path reaches.
	hooks []string
}

var panicPaths = []panicPath{
	{name: "unary, retried", kind: unary, steps: []bufconntest.Step{failWith(codes.Unavailable), bufconntest.Succeed(1)},
		hooks: []string{"WithOnRetry", "Observer.OnRetry", "Observer.OnEnd", "SharedBudget.Started", "SharedBudget.Succeeded", "SharedBudget.Allow", "chained interceptor"}},
	{name: "unary, cut", kind: unary, timeout: time.Second, steps: []bufconntest.Step{{Hang: true}, bufconntest.Succeed(1)},
		hooks: []string{"WithOnRetry", "Observer.OnRetry", "Observer.OnEnd", "SharedBudget.Started", "SharedBudget.Succeeded", "SharedBudget.AllowLongRun", "chained interceptor"}},
	// The first attempt hangs; a hedge goes at 100 ms and fails; its retry
	// goes after the backoff and succeeds: the first attempt is in flight
	// at every hook but the last two.
	{name: "unary, hedged", kind: unary, hedged: true, steps: []bufconntest.Step{{Pause: time.Hour, Send: 1}, failWith(codes.Unavailable), bufconntest.Succeed(1)},
		hooks: []string{"WithOnRetry", "Observer.OnRetry", "Observer.OnRetry, second", "Observer.OnEnd", "SharedBudget.Started", "SharedBudget.Succeeded", "SharedBudget.Allow", "SharedBudget.AllowLongRun", "chained interceptor"}},
	{name: "server stream, retried", kind: serverStream, timeout: time.Minute, steps: []bufconntest.Step{failWith(codes.Unavailable), bufconntest.Succeed(2)},
		hooks: []string{"WithOnRetry", "Observer.OnRetry", "Observer.OnEnd", "SharedBudget.Started", "SharedBudget.Succeeded", "SharedBudget.Allow", "chained interceptor", "chained interceptor, opening"}},
	{name: "server stream, cut", kind: serverStream, timeout: time.Second, steps: []bufconntest.Step{{Hang: true}, bufconntest.Succeed(2)},
		hooks: []string{"WithOnRetry", "Observer.OnRetry", "Observer.OnEnd", "SharedBudget.Started", "SharedBudget.Succeeded", "SharedBudget.AllowLongRun", "chained interceptor", "chained interceptor, opening"}},
	{name: "bidi stream, replayed", kind: bidi, timeout: time.Minute, steps: []bufconntest.Step{{Recv: bufconntest.UntilHalfClose, Err: status.Error(codes.Unavailable, "down")}, {Recv: bufconntest.UntilHalfClose, Echo: true}},
		hooks: []string{"WithOnRetry", "Observer.OnRetry", "Observer.OnEnd", "SharedBudget.Started", "SharedBudget.Succeeded", "SharedBudget.Allow", "chained interceptor", "chained interceptor, opening"}},
	{name: "server stream, reopened", kind: serverStream, reopen: true, steps: []bufconntest.Step{bufconntest.Succeed(2)},
		hooks: []string{"WithOnRetry", "Observer.OnRetry", "Observer.OnEnd", "SharedBudget.Started", "SharedBudget.Succeeded", "SharedBudget.Allow"}},
}

// chainedTrips returns the interceptors chained after the library's for
// path p: with hook.chained, the second attempt trips w; with p.reopen,
// the first opening fails.
func chainedTrips(p panicPath, hook panicHook, w *tripwire) []grpc.DialOption {
	var unaries, streams atomic.Int32
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if hook.chained && w.armed.Load() && unaries.Add(1) == 2 {
				w.hit()
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			n := streams.Add(1)
			if p.reopen && n == 1 {
				return nil, status.Error(codes.Unavailable, "no connection")
			}
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil || n != 2 {
				return cs, err
			}
			if hook.opening {
				w.hit()
			}
			if hook.chained {
				return trippedSend{cs, w}, nil
			}
			return cs, nil
		}),
	}
}

// trippedSend is a stream whose SendMsg trips a wire.
type trippedSend struct {
	grpc.ClientStream
	w *tripwire
}

func (s trippedSend) SendMsg(m any) error {
	s.w.hit()
	return s.ClientStream.SendMsg(m)
}

// bubbleGoroutines returns the stacks of the other goroutines of the
// caller's synctest bubble, by their headers' goroutine IDs.
func bubbleGoroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	gs := strings.Split(string(buf), "\n\n")
	bubble := func(g string) string {
		header, _, _ := strings.Cut(g, "\n")
		_, b, _ := strings.Cut(header, "synctest bubble ")
		return b
	}
	mine := bubble(gs[0]) // the caller's own stack comes first
	out := make(map[string]string)
	for _, g := range gs[1:] {
		if bubble(g) == mine {
			id, _, _ := strings.Cut(strings.TrimPrefix(g, "goroutine "), " ")
			out[id] = g
		}
	}
	return out
}

// panicRun is what one run of a path with a wire showed.
type panicRun struct {
	raised  any
	fired   bool
	left    []string
	retries float64
}

// runPanicPath makes one call of p with the wire of hook, which panics or,
// in the twin run, ends the call by canceling its context.
func runPanicPath(t *testing.T, p panicPath, hook panicHook, panics bool) panicRun {
	srv := bufconntest.NewServer(t, bufconntest.Steps(p.steps...))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w := &tripwire{name: hook.name, at: hook.at, panics: panics, cancel: cancel}
	pol := bufconntest.Exact()
	pol.AttemptTimeout = p.timeout
	var opts []interceptor.Option
	if hook.opts != nil {
		opts = hook.opts(w)
	}
	if p.hedged {
		opts = append(opts, interceptor.WithHedging("/grpc.testing.TestService/UnaryCall", grpcbackoff.Hedging{MaxAttempts: 3, Delay: 100 * time.Millisecond}))
	}
	r, err := interceptor.New(pol, append(opts, testService)...)
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Client(t, append(r.DialOptions(), chainedTrips(p, hook, w)...)...)
	// A first call makes the connection and its goroutines; the call of p
	// is then numbered apart by the server, and must leave no goroutine
	// beside them.
	if res := runCall(ctx, c, unary, nil, howToRun{}); res.Err != nil {
		t.Fatal(res.Err)
	}
	synctest.Wait()
	before := bubbleGoroutines()
	w.armed.Store(true)
	var run panicRun
	callCtx := metadata.AppendToOutgoingContext(ctx, bufconntest.StreamKey, "probe")
	run.raised = raised(func() { runCall(callCtx, c, p.kind, hostileMessages, howToRun{}) })
	synctest.Wait()
	for id, g := range bubbleGoroutines() {
		if _, ok := before[id]; !ok {
			run.left = append(run.left, g)
		}
	}
	run.fired = w.fired.Load()
	for _, st := range r.States() {
		run.retries += st.Retries
	}
	return run
}

// TestPanicsLeaveNothing: for each path and each hook it reaches, a panic
// at the hook is raised on the caller's goroutine, once, with its value;
// once the caller has it, the call has left no goroutine behind, the
// library's or gRPC's, its context still live (the issue found 20 hedged
// attempts blocked for good after a hook panicked at a hedge); and the budget holds what it holds when the hook ends the call
// instead (its twin run cancels the call's context there).
func TestPanicsLeaveNothing(t *testing.T) {
	for _, p := range panicPaths {
		for _, hook := range panicHooks {
			reached := false
			for _, h := range p.hooks {
				reached = reached || h == hook.name
			}
			if !reached {
				continue
			}
			t.Run(p.name+"/"+hook.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					got := runPanicPath(t, p, hook, true)
					if !got.fired {
						t.Fatalf("the call never reached %s", hook.name)
					}
					if got.raised != (boom{hook.name}) {
						t.Errorf("the caller got the panic %v, want %v", got.raised, boom{hook.name})
					}
					for _, g := range got.left {
						t.Errorf("a goroutine of the call is left:\n%s", g)
					}
					twin := runPanicPath(t, p, hook, false)
					if !twin.fired || twin.raised != nil || len(twin.left) > 0 {
						t.Fatalf("the twin run: reached %v, raised %v, %d goroutines left", twin.fired, twin.raised, len(twin.left))
					}
					if got.retries != twin.retries {
						t.Errorf("the budget holds %v retries after the panic, %v when the call ends there instead", got.retries, twin.retries)
					}
				})
			})
		}
	}
}
