package interceptor

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff/internal/attempt"
	"github.com/platformkit/grpcbackoff/internal/cloudclients"
)

// The Google Cloud clients retry their calls by themselves: in their
// CallOptions (per method and code) or in their own code. One retry layer
// per method and code, never two, never none: for a code the client
// retries for the method, the Retrier makes one attempt and hands the error
// back (ReasonClientRetries); it retries every other code of its Policy
// itself. This file holds that rule (what each client retries is in
// internal/cloudclients), the mark that keeps a Retrier installed twice on
// one connection to one layer, and the memory of a client's attempts of one
// call.

// ClientRetries is what a Google Cloud client retries by itself for a
// method, as Explain tells it.
type ClientRetries struct {
	// Client names the client and where its retries are stated, such as
	// "cloud.google.com/go/pubsub/v2/apiv1 v2.8.1 (its CallOptions)".
	Client string
	// Codes are the codes the client retries by itself, or refuses to retry
	// on purpose: for them the Retrier makes one attempt and returns the
	// error to the client. Empty: the client retries nothing, and the
	// Retrier retries every code of its Policy.
	Codes []codes.Code
	// OpeningOnly says, for a stream, that the client retries only its
	// opening: once open, the stream is the Retrier's to retry, on every
	// code of its Policy, until it commits.
	OpeningOnly bool
	// Hinted are the codes the client retries only when the error carries
	// RetryInfo (the server's delay): such an error is left to it; without
	// RetryInfo the code is the Retrier's.
	Hinted []codes.Code
	// ExactlyOnce are the codes the client also retries for a Pub/Sub
	// subscription with exactly-once delivery (the subscriber's acks and
	// modacks): the Retrier learns which subscriptions have it from their
	// StreamingPull's responses, as the subscriber does.
	ExactlyOnce []codes.Code
}

// codeSet is a set of codes, bit 1<<code.
type codeSet uint32

func (s codeSet) has(c codes.Code) bool { return c < 32 && s&(1<<c) != 0 }

func (s codeSet) list() []codes.Code {
	var cs []codes.Code
	for c := codes.Code(0); c < 32; c++ {
		if s.has(c) {
			cs = append(cs, c)
		}
	}
	return cs
}

// client is what a call's plan knows of the Google Cloud client that makes
// it, learnt at the first failure (a call that succeeds never asks).
type client struct {
	learnt  bool
	google  bool    // the call is a Google Cloud client's (or an adopted one's)
	codes   codeSet // the codes left to the client
	hinted  codeSet // the codes left to the client when the error carries RetryInfo
	opening bool    // the client retries only a stream's opening
	// resends are the codes after which the client may send the call again
	// (those it retries; every code when the data does not know the
	// method), and pause the longest it waits before it does: what the
	// memory of its call needs (see logicalCalls).
	resends codeSet
	pause   time.Duration
}

// everyCode is every code but OK.
const everyCode codeSet = 1<<17 - 2

// gaxMaxPause is gax.Backoff's default Max: the longest pause of a gax
// Retryer whose backoff is not known.
const gaxMaxPause = 30 * time.Second

// learnClient learns, once, whether the call p plans, with ctx, opts and
// req (nil for a stream) on the ClientConn of conn, is a Google Cloud
// client's, and which codes its client retries. A call marked by
// gaxretry.Adopt is the Retrier's for every code; one marked by
// gaxretry.CallOption leaves to its gax Retryer the codes it retries.
func (p *plan) learnClient(ctx context.Context, conn *connState, opts []grpc.CallOption, req any) {
	if p.client.learnt {
		return
	}
	p.client.learnt = true
	var handedOver bool
	var marked *cloudclients.ClientRetry
	for _, o := range opts {
		switch o := o.(type) {
		case cloudclients.HandedOver:
			handedOver = true
		case *cloudclients.ClientRetry:
			marked = o
		}
	}
	c := cloudclients.Call{Method: p.method, Stream: req == nil}
	if vs := metadata.ValueFromOutgoingContext(ctx, cloudclients.Header); len(vs) > 0 {
		c.Header = vs[0]
	}
	if conn != nil {
		if api := conn.api.Load(); api != nil {
			c.API, c.APIGapic = api.service, api.gapic
		}
	}
	rl := cloudclients.Lookup(c)
	if rl.Client {
		p.client = client{learnt: true, google: true, codes: codeSet(rl.Codes), hinted: codeSet(rl.Hinted), opening: rl.Opening,
			resends: codeSet(rl.Codes | rl.Hinted | rl.ExactlyOnce), pause: rl.Pause}
		if !rl.Known {
			p.client.resends = everyCode
		}
		if rl.ExactlyOnce != 0 && cloudclients.ExactlyOnce(req) {
			p.client.codes |= codeSet(rl.ExactlyOnce)
		}
	}
	if marked != nil {
		p.client.google = true
		p.client.codes |= codeSet(marked.Codes)
		p.client.resends |= codeSet(marked.Codes)
		p.client.pause = max(p.client.pause, marked.MaxPause)
	}
	if handedOver {
		// The client's Retryer hands the call back after the Retrier gave
		// up on it, but a per-call gax.WithRetry replaces that one and may
		// resend it after any code, with gax's pauses (30 s at most by
		// default).
		p.client.google = true
		p.client.codes, p.client.hinted, p.client.opening = 0, 0, false
		p.client.resends, p.client.pause = everyCode, max(p.client.pause, gaxMaxPause)
	}
}

// connAPI is what the calls on one ClientConn tell of the Google API its
// client serves: the service of its first call that was not a mixin's, and
// that call's gapic/ version. A mixin's call (GetOperation, ListLocations,
// GetIamPolicy) gets what that API's file says (internal/cloudclients).
type connAPI struct {
	service string
	gapic   string
}

// noteAPI records, once per ClientConn, the API that a call of method on
// ctx tells, unless it is a mixin's. It allocates once per ClientConn.
func noteAPI(ctx context.Context, conn *connState, method string) {
	if conn.api.Load() != nil || cloudclients.IsMixin(method) {
		return
	}
	service, _, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	a := &connAPI{service: service}
	if vs := metadata.ValueFromOutgoingContext(ctx, cloudclients.Header); len(vs) > 0 {
		for f := range strings.FieldsSeq(vs[0]) {
			if v, ok := strings.CutPrefix(f, "gapic/"); ok {
				a.gapic = v
				break
			}
		}
	}
	conn.api.CompareAndSwap(nil, a)
}

// leaves reports whether a failure with st is the client's to retry: its
// code is one the client retries (or, with RetryInfo, one it retries then),
// at a stream's opening (atOpening), or anywhere for a unary call or a
// stream the client retries whole.
func (c client) leaves(st *status.Status, atOpening bool) bool {
	code := st.Code()
	left := c.codes.has(code) || c.hinted.has(code) && attempt.HasRetryInfo(st)
	return left && (atOpening || !c.opening)
}

// clientRetries returns what the Google Cloud clients that call method
// retry by themselves, for Explain; stream says the method is a stream.
func clientRetries(method string, stream bool) []ClientRetries {
	var out []ClientRetries
	for _, rl := range cloudclients.Explain(method, stream) {
		if rl.Known || strings.HasPrefix(method, "/google.") {
			out = append(out, ClientRetries{Client: rl.Source, Codes: codeSet(rl.Codes).list(), OpeningOnly: rl.Opening,
				Hinted: codeSet(rl.Hinted &^ rl.Codes).list(), ExactlyOnce: codeSet(rl.ExactlyOnce).list()})
		}
	}
	return out
}

// layerMark is the call option by which the Retrier that takes a call tells
// the Retriers installed after it on the same connection (the same dial
// options given twice, two slices, ClientOptions beside DialOptions) that it
// does: they pass every attempt of it through, so that attempts never
// multiply. gRPC ignores it.
type layerMark struct{ grpc.EmptyCallOption }

var mark grpc.CallOption = &layerMark{}

// logical remembers how many retries the Retrier made across its client's
// attempts of one call, for the client's next attempt of it.
type logical struct {
	retries int           // retries the Retrier made
	ended   time.Time     // when the last attempt of it ended
	within  time.Duration // how long after ended the client may send it again
	busy    bool          // a resend of it is under way: a call that finds it then is another call
	stop    func() bool   // stops the context.AfterFunc that forgets it; nil: none
}

// maxLogical bounds the calls remembered at once: past it, calls are not
// remembered, and their client's attempts count afresh.
const maxLogical = 10000

// resendGrace is added to the longest pause of a client's retry: the time
// between the end of an attempt and the client's next, beside its pause
// (its Retryer, a goroutine's scheduling).
const resendGrace = time.Second

// callKey tells a client's call from every other across the client's
// attempts of it: its connection's target, its context, its method and
// its request. gax.Invoke sends every attempt with the same request message
// and a context with the same Done channel: the context itself is the
// same, except with gax's tracing on, where each attempt's carries its
// resend count over the call's.
type callKey struct {
	target string          // cc.Target(); "" without a ClientConn
	done   <-chan struct{} // the context's Done channel; nil for one that never ends
	ctx    context.Context // a context that never ends, itself
	method string
	req    any
}

// keyOf returns the key of the call of method with req on ctx, to target,
// or false for a call no key can tell apart: its request is not a pointer
// (a client sends one message in all its attempts), or its context never
// ends and is not a pointer, as context.Background is not.
func keyOf(ctx context.Context, target, method string, req any) (callKey, bool) {
	if req == nil || reflect.TypeOf(req).Kind() != reflect.Pointer {
		return callKey{}, false
	}
	if d := ctx.Done(); d != nil {
		return callKey{target: target, done: d, method: method, req: req}, true
	}
	if reflect.TypeOf(ctx).Kind() == reflect.Pointer {
		return callKey{target: target, ctx: ctx, method: method, req: req}, true
	}
	return callKey{}, false
}

// logicalCalls is the Retrier's memory of the unary calls of Google Cloud
// clients, by callKey, so that its retries of one call, across its
// client's attempts of it, stay within MaxAttempts: with the client's own,
// at most the client's attempts + MaxAttempts − 1 reach the server.
//
// It cannot answer for the wire: every call is sent, and what it knows only
// lowers the retries the Retrier makes of a call its client resends. A
// call is remembered only when it ended with an error its client may send
// it again after, and only as long as the client's retry may pause before
// it does (checked at every lookup): it is forgotten at its success, at a
// code its client does not retry, when the longest pause has passed, or
// when its context ends. A call that finds its entry while another resend
// holds it is another call, with the same request and context: it counts
// afresh.
type logicalCalls struct {
	n  atomic.Int32 // len(m), read by every call: 0 skips the lookup
	mu sync.Mutex
	m  map[callKey]*logical
}

// take returns the retries remembered of the call with key k at now, and
// marks its entry as taken by this attempt of it; ok is false for a call
// not remembered, past its time (forgotten then), or taken by another.
func (l *logicalCalls) take(k callKey, now time.Time) (retries int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.m[k]
	switch {
	case e == nil:
		return 0, false
	case now.Sub(e.ended) > e.within:
		l.drop(k, e)
		return 0, false
	case e.busy:
		return 0, false
	}
	e.busy = true
	return e.retries, true
}

// end records the end at now, with retries made in all, of an attempt of
// the call with key k, whose context is ctx: forgotten if !again (its
// client does not send it again), kept for within otherwise. taken says
// the attempt took the entry.
func (l *logicalCalls) end(ctx context.Context, k callKey, taken, again bool, retries int, now time.Time, within time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.m[k]
	if e != nil && e.busy && !taken {
		return // another call's resend holds it
	}
	if !again || retries == 0 && e == nil {
		if e != nil {
			l.drop(k, e)
		}
		return
	}
	if e == nil {
		if len(l.m) >= maxLogical {
			l.sweep(now)
			if len(l.m) >= maxLogical {
				return
			}
		}
		if l.m == nil {
			l.m = make(map[callKey]*logical)
		}
		e = &logical{}
		if k.done != nil {
			e.stop = context.AfterFunc(ctx, func() { l.forget(k, e) })
		}
		l.m[k] = e
		l.n.Store(int32(len(l.m)))
	}
	e.retries, e.ended, e.within, e.busy = max(e.retries, retries), now, within, false
}

// forget drops e, the entry of k, if it is still there.
func (l *logicalCalls) forget(k callKey, e *logical) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m[k] == e {
		l.drop(k, e)
	}
}

// drop removes e, the entry of k. l.mu is held.
func (l *logicalCalls) drop(k callKey, e *logical) {
	if e.stop != nil {
		e.stop()
	}
	delete(l.m, k)
	l.n.Store(int32(len(l.m)))
}

// sweep drops the entries past their time. l.mu is held.
func (l *logicalCalls) sweep(now time.Time) {
	for k, e := range l.m {
		if now.Sub(e.ended) > e.within {
			l.drop(k, e)
		}
	}
}
