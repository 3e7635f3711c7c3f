package interceptor

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/platformkit/grpcbackoff"
)

// hedgeSet is the hedging configuration of a Retrier; nil when no method is
// hedged.
type hedgeSet struct {
	// methods maps names, as WithMethod matches them ("" for the default
	// entry of a service config), to their hedging policy.
	methods map[string]*hedgePolicy
	// unsafe, when set, reports whether a method (or every method of a
	// service, for a name "/pkg.Service/") is known not to be safe to send
	// twice. It is the seam for the idempotency classifier.
	unsafe func(name string) bool
}

// hedgePolicy is a validated Hedging with its non-fatal codes as a bit set
// and, for an adaptive delay, a latency tracker per method.
type hedgePolicy struct {
	grpcbackoff.Hedging
	nonFatal uint32
	minCount uint64   // calls the window must hold before the quantile is used
	trackers sync.Map // method name -> *latencyTracker
}

func compileHedging(h grpcbackoff.Hedging) (*hedgePolicy, error) {
	if err := h.Validate(); err != nil {
		return nil, err
	}
	hp := &hedgePolicy{Hedging: h}
	hp.NonFatalCodes = slices.Clone(h.NonFatalCodes) // the caller keeps its slice
	for _, c := range h.NonFatalCodes {
		hp.nonFatal |= 1 << c
	}
	if h.Adaptive() {
		hp.minCount = uint64(math.Ceil(10 / (1 - h.Quantile)))
	}
	return hp, nil
}

func (hp *hedgePolicy) isNonFatal(c codes.Code) bool {
	return c < 32 && hp.nonFatal&(1<<c) != 0
}

func (hp *hedgePolicy) tracker(method string) *latencyTracker {
	if t, ok := hp.trackers.Load(method); ok {
		return t.(*latencyTracker)
	}
	t, _ := hp.trackers.LoadOrStore(method, newLatencyTracker(hp.Window))
	return t.(*latencyTracker)
}

// delayFor returns the hedging delay of a call of method starting at now.
func (hp *hedgePolicy) delayFor(method string, now time.Time) time.Duration {
	if !hp.Adaptive() {
		return hp.Delay
	}
	if q, ok := hp.tracker(method).quantile(now, hp.Quantile, hp.minCount); ok {
		return min(max(q, hp.MinDelay), hp.MaxDelay)
	}
	return hp.Delay
}

// WithHedging hedges the unary calls of the methods that name matches
// (matched as in WithMethod) as h says (gRFC A6): the first attempt is sent
// at once, another every h.Delay while no response has come, up to
// h.MaxAttempts in flight; the first response, or the first error with a
// code not in h.NonFatalCodes, ends the call and cancels the other
// attempts, and an error with a non-fatal code sends the next attempt at
// once.
//
// A name has either a retry policy or a hedging policy: a later WithMethod or
// WithoutRetryFor for the same name replaces WithHedging, and WithHedging
// replaces an earlier one. As with policies, a method's own entry wins over
// its service's. CallPolicy and NoRetry turn hedging off for one call;
// CallMaxAttempts replaces h.MaxAttempts (1: a single attempt).
//
// Hedging is for unary calls only. A stream of a hedged name is retried by
// the Policy that would apply without the hedging entry (its service's, or
// the default): a stream's messages are not all known when it starts, so
// hedging it would mean buffering and replaying every message to every
// attempt and racing their responses.
//
// Only hedge methods that are safe to send twice: New refuses hedging for a
// name known not to be (see the idempotency classifier), with an error
// naming it.
//
// Each hedge is a retry for the retry budget: a hedge the budget refuses is
// not sent (the attempts in flight go on), and observers are told as of a
// throttled retry. A hedge carries PreviousAttemptsKey. No hedge starts that
// could not start before the caller's deadline. The server's pushback (or
// RetryInfo) delays the next hedge, and a pushback that asks not to retry
// stops hedging; WithoutPushback leaves RetryInfo alone here too.
//
// Every attempt gets its own reply message, Header, Trailer and Peer
// targets; when the call ends, after every attempt has returned, the
// caller's reply and its grpc.Header, grpc.Trailer and grpc.Peer options get
// those of the attempt that ended the call. Other call options with effects
// per attempt (such as grpc.OnFinish) act on every attempt. A reply that is
// neither a proto.Message nor a pointer cannot be copied, and such a call
// is not hedged.
//
// A call that ends with an error returns the server's error unchanged if it
// sent a single attempt that failed with a fatal code or with the caller's
// context; otherwise a *grpcbackoff.Error whose Attempts counts the attempts
// sent, whose Elapsed runs from the start of the call, and whose Reason says
// why no further hedge was sent. Observers' End has Attempts and Hedges
// (Attempts − 1) set; its Delay is 0.
func WithHedging(name string, h grpcbackoff.Hedging) Option {
	return func(r *Retrier) error {
		if err := checkMethodName(name); err != nil {
			return err
		}
		hp, err := compileHedging(h)
		if err != nil {
			return fmt.Errorf("interceptor: WithHedging(%q): %w", name, err)
		}
		r.setHedging(name, hp)
		return nil
	}
}

// setHedging gives name the hedging policy hp; a name has a retry policy or a
// hedging policy, not both.
func (r *Retrier) setHedging(name string, hp *hedgePolicy) {
	if r.hedge == nil {
		r.hedge = &hedgeSet{}
	}
	if r.hedge.methods == nil {
		r.hedge.methods = make(map[string]*hedgePolicy)
	}
	r.hedge.methods[name] = hp
	if name != "" {
		delete(r.methods, name)
	}
}

// unsetHedging removes the hedging policy of name, if any (WithMethod and
// WithoutRetryFor call it).
func (r *Retrier) unsetHedging(name string) {
	if r.hedge != nil {
		delete(r.hedge.methods, name)
	}
}

// setKnownUnsafe installs the idempotency classifier: f reports whether
// name, a method "/pkg.Service/Method" or a service "/pkg.Service/" (true if
// any of its methods is), is known not to be safe to send twice. New calls
// it once per hedged name, after every option, and refuses those it
// reports; a call hedged by its service's entry or the default one calls it
// with the method's name, and is not hedged if it reports true. f must be
// safe for concurrent use and fast (a map lookup): it runs on such calls.
func (r *Retrier) setKnownUnsafe(f func(name string) bool) {
	if r.hedge == nil {
		r.hedge = &hedgeSet{}
	}
	r.hedge.unsafe = f
}

// knownUnsafe reports whether name, a method "/pkg.Service/Method" or a
// service "/pkg.Service/", is known not to be safe to send twice. It is
// false unless a classifier is installed in r.hedge.unsafe.
func (r *Retrier) knownUnsafe(name string) bool {
	return r.hedge != nil && r.hedge.unsafe != nil && r.hedge.unsafe(name)
}

// checkHedging returns an error naming every hedged name known not to be
// safe to send twice. New calls it once every option has been applied.
func (r *Retrier) checkHedging() error {
	if r.hedge == nil {
		return nil
	}
	var bad []string
	for name := range r.hedge.methods {
		if name != "" && r.knownUnsafe(name) {
			bad = append(bad, name)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	return fmt.Errorf("interceptor: hedging is configured for %s, known not to be safe to send twice (not idempotent): use a retry policy there",
		strings.Join(quoteAll(bad), ", "))
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

// hedgingFor returns the hedging policy of a call of method with opts and
// its number of attempts, or nil when the call is not hedged.
func (r *Retrier) hedgingFor(method string, opts []grpc.CallOption) (*hedgePolicy, int) {
	hs := r.hedge
	if hs == nil || len(hs.methods) == 0 {
		return nil, 0
	}
	hp, exact := r.hedgeLookup(method)
	if hp == nil || !exact && r.knownUnsafe(method) {
		return nil, 0
	}
	n := hp.MaxAttempts
	for _, o := range opts {
		if so, ok := o.(*safetyOption); ok && so.s == NotIdempotent {
			return nil, 0 // never sent twice: policyFor retries it as Safety says
		}
		co, ok := o.(*callOption)
		if !ok {
			continue
		}
		switch {
		case co.err != nil, co.noRetry, co.policy != nil:
			return nil, 0 // policyFor handles them
		case co.maxAttempts > 0:
			n = co.maxAttempts
		}
	}
	if n < 2 {
		return nil, 0
	}
	return hp, n
}

// hedgeLookup finds the entry that applies to method: its own (hedging or
// retry), then its service's, then the default; exact is true for the
// method's own entry.
func (r *Retrier) hedgeLookup(method string) (hp *hedgePolicy, exact bool) {
	hs := r.hedge.methods
	if hp, ok := hs[method]; ok {
		return hp, true
	}
	if _, ok := r.methods[method]; ok {
		return nil, false
	}
	if i := strings.LastIndexByte(method, '/'); i > 0 {
		service := method[:i+1]
		if hp, ok := hs[service]; ok {
			return hp, false
		}
		if _, ok := r.methods[service]; ok {
			return nil, false
		}
	}
	return hs[""], false
}

// hedgeAttempt is one attempt of a hedged call, with its own outputs.
type hedgeAttempt struct {
	n       int // from 1
	reply   any
	header  metadata.MD
	trailer metadata.MD
	peer    peer.Peer
	opts    []grpc.CallOption
	err     error
}

// hedgeTargets are the caller's Header, Trailer and Peer targets.
type hedgeTargets struct {
	headers  []*metadata.MD
	trailers []*metadata.MD
	peers    []*peer.Peer
}

// attemptOptions returns opts with the caller's Header, Trailer and Peer
// options pointed at a's own, and a Trailer option added (for pushback);
// buf, when large enough, holds them.
func (a *hedgeAttempt) attemptOptions(opts []grpc.CallOption, tg *hedgeTargets, buf []grpc.CallOption) {
	if cap(buf) >= len(opts)+2 {
		a.opts = buf[:0]
	} else {
		a.opts = make([]grpc.CallOption, 0, len(opts)+2)
	}
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			if a.n == 1 {
				tg.headers = append(tg.headers, o.HeaderAddr)
			}
		case grpc.TrailerCallOption:
			if a.n == 1 {
				tg.trailers = append(tg.trailers, o.TrailerAddr)
			}
		case grpc.PeerCallOption:
			if a.n == 1 {
				tg.peers = append(tg.peers, o.PeerAddr)
			}
			a.opts = append(a.opts, grpc.Peer(&a.peer))
		default:
			a.opts = append(a.opts, o)
		}
	}
	// Every attempt reads its headers, to know whether it committed the
	// call (gRFC A6), and its trailer, for pushback.
	a.opts = append(a.opts, grpc.Header(&a.header), grpc.Trailer(&a.trailer))
}

// replyType is the type of a caller's reply, taken before the first attempt
// writes to it, from which the other attempts get their own replies.
type replyType struct {
	msg  protoreflect.MessageType // for a proto.Message
	elem reflect.Type             // else, the pointed-to type of a pointer
}

// replyTypeOf returns the type of reply, and false if reply is neither a
// proto.Message nor a non-nil pointer (copyReply cannot copy it).
func replyTypeOf(reply any) (replyType, bool) {
	if m, ok := reply.(proto.Message); ok {
		if v := reflect.ValueOf(m); v.Kind() == reflect.Pointer && v.IsNil() {
			return replyType{}, false
		}
		return replyType{msg: m.ProtoReflect().Type()}, true
	}
	if v := reflect.ValueOf(reply); v.Kind() == reflect.Pointer && !v.IsNil() {
		return replyType{elem: v.Type().Elem()}, true
	}
	return replyType{}, false
}

// new returns a new, empty reply of type t.
func (t replyType) new() any {
	if t.msg != nil {
		return t.msg.New().Interface()
	}
	return reflect.New(t.elem).Interface()
}

// copyReply makes dst, the caller's reply, a copy of src, a reply from
// replyTypeOf(dst).new().
func copyReply(dst, src any) {
	if m, ok := dst.(proto.Message); ok {
		proto.Reset(m)
		proto.Merge(m, src.(proto.Message))
		return
	}
	reflect.ValueOf(dst).Elem().Set(reflect.ValueOf(src).Elem())
}

// hedgeUnary carries out a hedged unary call of up to n attempts (n ≥ 2).
// The first attempt uses the caller's reply; the others get their own. It
// returns once every attempt has returned.
func (r *Retrier) hedgeUnary(ctx context.Context, conn *connState, hp *hedgePolicy, n int, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
	rt, ok := replyTypeOf(reply)
	if !ok {
		err := invoker(ctx, method, req, reply, cc, opts...)
		conn.record(err)
		return err
	}
	h := &hedgeCall{
		call: call{r: r, max: n, method: method, static: staticMethod(opts), cc: cc, target: target(cc),
			conn: conn, opts: opts, start: time.Now(), hedged: true, adaptive: r.adaptiveFor(conn, opts)},
		hp:      hp,
		ctx:     ctx,
		req:     req,
		reply:   reply,
		rt:      rt,
		invoker: invoker,
		results: make(chan *hedgeAttempt),
	}
	h.dl, h.hasDeadline = ctx.Deadline()
	h.actx, h.cancel = context.WithCancel(ctx)
	defer h.cancel()
	return h.run()
}

// hedgeCall is the state of one hedged call. Its methods run on one
// goroutine at a time: the caller's, or, once the delay has passed with the
// first attempt in flight, the timer's (coordinate) while the caller waits.
// The first attempt runs on the caller's goroutine (with a delay) and every
// other on its own; each hands its result back on results.
type hedgeCall struct {
	call
	hp          *hedgePolicy
	ctx         context.Context // the caller's
	actx        context.Context // the attempts', canceled when the call ends
	cancel      context.CancelFunc
	dl          time.Time
	hasDeadline bool
	req, reply  any
	rt          replyType // reply's
	sent        time.Time // when the last attempt was sent
	invoker     grpc.UnaryInvoker
	tg          hedgeTargets
	results     chan *hedgeAttempt // unbuffered: every attempt sent is received
	pending     *hedgeAttempt      // an attempt that returned, for wait to take in first

	delay    time.Duration // between hedges
	inFlight int
	stopped  bool               // no further hedge will be sent
	why      grpcbackoff.Reason // why, once stopped
	last     *hedgeAttempt      // the last attempt that failed with a non-fatal code
	timer    *time.Timer        // the next hedge's, made when first needed
	timerC   <-chan time.Time   // timer.C while the timer is set, else nil

	// first is the first attempt, made on the caller's goroutine when the
	// delay is not 0 (see runFirst); firstOpts holds its call options.
	first     hedgeAttempt
	firstOpts [5]grpc.CallOption
	// coordinating is done once the goroutine that took over the call when
	// the delay passed (see coordinate) has finished it.
	coordinating sync.WaitGroup
	coordEnd     *hedgeAttempt // the attempt that ended the call, set by coordinate
	coordWaited  bool          // as wait returns it, set by coordinate
}

// send sends the next attempt.
func (h *hedgeCall) send() {
	a := &hedgeAttempt{n: h.attempts + 1, reply: h.reply}
	a.attemptOptions(h.opts, &h.tg, nil)
	actx := h.actx
	if a.n > 1 {
		a.reply = h.rt.new()
		actx = h.retryContext(actx) // h.attempts attempts came before
	}
	h.attempts = a.n
	h.inFlight++
	h.sent = time.Now()
	go func() {
		a.err = h.invoker(actx, h.method, h.req, a.reply, h.cc, a.opts...)
		h.record(a)
		h.results <- a
	}()
}

// record counts a for adaptive throttling, unless a is a loser canceled by
// the call itself.
func (h *hedgeCall) record(a *hedgeAttempt) {
	if a.err == nil || h.actx.Err() == nil || h.ctx.Err() != nil {
		h.conn.record(a.err)
	}
}

func (h *hedgeCall) stop(why grpcbackoff.Reason) {
	h.stopped, h.why, h.timerC = true, why, nil
}

// trySend sends the next hedge now, if one is left and the deadline and the
// budget allow it.
func (h *hedgeCall) trySend() bool {
	if h.stopped || h.attempts >= h.max {
		return false
	}
	now := time.Now()
	if h.hasDeadline && !now.Before(h.dl) {
		h.stop(grpcbackoff.ReasonDeadline)
		return false
	}
	var code codes.Code
	var err error
	if h.last != nil {
		err = h.last.err
		code = status.Code(err)
	}
	// A hedge goes to a server that has not answered yet, like the retry of
	// an attempt cut by its timeout: it draws on the budget's long-run
	// allowance alone, not on the reserve kept for failures the server
	// answered (see grpcbackoff.Throttle).
	if a := h.adaptive; a != nil && !a.Allow(now, rand.Float64()) {
		h.stop(grpcbackoff.ReasonRejectedLocally) // as a retry would be
		return false
	}
	if b := h.conn.t.budget; b != nil && !b.AllowLongRun(now) {
		h.observe(h.ctx, code, err, grpcbackoff.Hint{}, 0, true)
		h.stop(grpcbackoff.ReasonThrottled)
		return false
	}
	if len(h.r.observers) > 0 {
		h.observe(h.ctx, code, err, grpcbackoff.Hint{}, now.Sub(h.sent), false)
	}
	h.send()
	return true
}

// arm sets the timer of the next hedge to d from now, if one is left and it
// could start before the deadline.
func (h *hedgeCall) arm(d time.Duration) {
	h.timerC = nil
	if h.stopped || h.attempts >= h.max {
		return
	}
	if h.hasDeadline && !time.Now().Add(d).Before(h.dl) {
		h.stop(grpcbackoff.ReasonDeadline)
		return
	}
	if h.timer == nil {
		h.timer = time.NewTimer(d)
	} else {
		h.timer.Reset(d)
	}
	h.timerC = h.timer.C
}

// run sends the attempts, waits for the one that ends the call, cancels the
// others and waits for them, and hands the winner's outputs to the caller.
func (h *hedgeCall) run() error {
	h.delay = h.hp.delayFor(h.method, h.start)
	h.sent = h.start
	var end *hedgeAttempt
	var waited bool
	if h.delay > 0 {
		end, waited = h.runFirst()
	} else {
		h.send()
		h.arm(h.delay)
		end, waited = h.finish()
	}
	if h.timer != nil {
		h.timer.Stop()
	}
	now := time.Now()
	if end.err == nil {
		h.conn.succeeded() // a success feeds the budget's reserve
		if end.n != 1 {
			copyReply(h.reply, end.reply)
		}
		if h.hp.Adaptive() {
			h.hp.tracker(h.method).record(now, now.Sub(h.start))
		}
	}
	for _, p := range h.tg.headers {
		*p = end.header
	}
	for _, p := range h.tg.trailers {
		*p = end.trailer
	}
	for _, p := range h.tg.peers {
		*p = end.peer
	}

	err, why := end.err, h.why
	if err != nil && (h.attempts > 1 || waited || why != grpcbackoff.ReasonNotRetryable && why != grpcbackoff.ReasonDeadline && why != grpcbackoff.ReasonCanceled) {
		h.reason = why
		err = &grpcbackoff.Error{Err: err, Attempts: h.attempts, Elapsed: now.Sub(h.start), Reason: why}
	}
	return h.end(h.ctx, err)
}

// finish waits for the attempt that ends the call, cancels the others and
// waits for them.
func (h *hedgeCall) finish() (end *hedgeAttempt, waited bool) {
	end, waited = h.wait()
	h.cancel()
	for ; h.inFlight > 0; h.inFlight-- {
		<-h.results
	}
	return end, waited
}

// runFirst makes the first attempt on the caller's goroutine, so that a call
// answered within the delay costs no goroutine and no timer channel. If the
// delay passes first, coordinate takes the call over on the timer's
// goroutine: it sends the hedges and waits for the end, and the first
// attempt's result reaches it on results like any other.
func (h *hedgeCall) runFirst() (end *hedgeAttempt, waited bool) {
	a := &h.first
	a.n, a.reply = 1, h.reply
	a.attemptOptions(h.opts, &h.tg, h.firstOpts[:])
	h.attempts, h.inFlight = 1, 1
	var t *time.Timer
	if h.attempts < h.max {
		if h.hasDeadline && !time.Now().Add(h.delay).Before(h.dl) {
			h.stop(grpcbackoff.ReasonDeadline)
		} else {
			h.coordinating.Add(1)
			t = time.AfterFunc(h.delay, h.coordinate)
		}
	}
	a.err = h.invoker(h.actx, h.method, h.req, a.reply, h.cc, a.opts...)
	h.record(a)
	if t != nil && !t.Stop() { // coordinate has the call
		h.results <- a
		h.coordinating.Wait()
		return h.coordEnd, h.coordWaited
	}
	if t != nil {
		h.coordinating.Done()
	}
	h.inFlight = 0
	if a.err == nil {
		return a, false
	}
	// The first attempt failed within the delay: go on as if it had been
	// sent on its own goroutine and had just returned.
	h.inFlight, h.pending = 1, a
	return h.finish()
}

// coordinate runs on the timer's goroutine once the delay has passed with
// the first attempt in flight: it sends the first hedge and finishes the
// call.
func (h *hedgeCall) coordinate() {
	defer h.coordinating.Done()
	if h.trySend() {
		h.arm(h.delay)
	}
	h.coordEnd, h.coordWaited = h.finish()
}

// wait returns the attempt that ends the call, with h.why set for an error,
// and whether the call ended while waiting for a pushback delay with no
// attempt in flight.
func (h *hedgeCall) wait() (end *hedgeAttempt, waited bool) {
	for {
		if a := h.pending; a != nil {
			h.pending = nil
			if end, done := h.result(a); done {
				return end, false
			}
			continue
		}
		var ctxDone, closed <-chan struct{}
		if h.inFlight == 0 { // waiting for a pushback delay
			ctxDone, closed = h.ctx.Done(), h.conn.closed
		}
		select {
		case <-h.timerC:
			h.timerC = nil
			if h.trySend() {
				h.arm(h.delay)
			}
		case <-ctxDone:
			h.why = grpcbackoff.ReasonDeadline
			if h.ctx.Err() == context.Canceled {
				h.why = grpcbackoff.ReasonCanceled
				h.last.err = status.FromContextError(h.ctx.Err()).Err()
			}
			return h.last, true
		case <-closed:
			h.why, h.last.err = grpcbackoff.ReasonCanceled, errConnClosing
			return h.last, true
		case a := <-h.results:
			if end, done := h.result(a); done {
				return end, false
			}
		}
	}
}

// result takes in a, an attempt that returned, and returns the attempt that
// ends the call and true if the call ends.
func (h *hedgeCall) result(a *hedgeAttempt) (end *hedgeAttempt, done bool) {
	h.inFlight--
	if a.err == nil {
		h.why = 0
		return a, true
	}
	if cerr := h.ctx.Err(); cerr != nil || h.hasDeadline && !time.Now().Before(h.dl) {
		h.why = grpcbackoff.ReasonDeadline
		if cerr == context.Canceled {
			h.why = grpcbackoff.ReasonCanceled
		}
		return a, true
	}
	st := status.Convert(a.err)
	// A fatal code, or response headers before the failure: the attempt
	// committed the call (gRFC A6), and the others are canceled.
	if !h.hp.isNonFatal(st.Code()) || a.header != nil {
		h.why = grpcbackoff.ReasonNotRetryable
		return a, true
	}
	h.last = a
	trailer := a.trailer
	if h.r.noPushback {
		trailer = nil // RetryInfo only, as WithoutPushback says
	}
	switch hint := grpcbackoff.ServerHint(st, trailer); {
	case hint.Stop:
		h.stop(grpcbackoff.ReasonServerRefused)
	case hint.Delay > 0:
		h.arm(hint.Delay)
	default:
		if h.trySend() {
			h.arm(h.delay)
		}
	}
	if h.inFlight == 0 && h.timerC == nil {
		if !h.stopped {
			h.why = grpcbackoff.ReasonExhausted
		}
		return a, true
	}
	return nil, false
}
