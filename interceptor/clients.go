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

	"github.com/platformkit/grpcbackoff/internal/googleclients"
)

// The Google Cloud clients retry their calls by themselves: in their
// CallOptions (per method and code) or in their own code. One retry layer
// per method and code, never two, never none: for a code the client
// retries for the method, the Retrier makes one attempt and hands the error
// back (ReasonClientRetries); it retries every other code of its Policy
// itself. This file holds that rule (what each client retries is in
// internal/googleclients), the mark that keeps a Retrier installed twice on
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
}

// learnClient learns, once, whether the call p plans, with ctx, opts and
// req (nil for a stream), is a Google Cloud client's, and which codes its
// client retries. A call marked by gaxretry.Adopt is the Retrier's for
// every code.
func (p *plan) learnClient(ctx context.Context, opts []grpc.CallOption, req any) {
	if p.client.learnt {
		return
	}
	p.client.learnt = true
	for _, o := range opts {
		if _, ok := o.(googleclients.HandedOver); ok {
			p.client.google = true
			return
		}
	}
	var header string
	if vs := metadata.ValueFromOutgoingContext(ctx, googleclients.Header); len(vs) > 0 {
		header = vs[0]
	}
	if rl := googleclients.Lookup(p.method, header); rl.Client {
		p.client = client{learnt: true, google: true, codes: codeSet(rl.Codes), hinted: codeSet(rl.Hinted), opening: rl.Opening}
		if rl.ExactlyOnce != 0 && googleclients.ExactlyOnce(req) {
			p.client.codes |= codeSet(rl.ExactlyOnce)
		}
	}
}

// leaves reports whether a failure with st is the client's to retry: its
// code is one the client retries (or, with RetryInfo, one it retries then),
// at a stream's opening (atOpening), or anywhere for a unary call or a
// stream the client retries whole.
func (c client) leaves(st *status.Status, atOpening bool) bool {
	code := st.Code()
	left := c.codes.has(code) || c.hinted.has(code) && hasRetryInfo(st)
	return left && (atOpening || !c.opening)
}

// clientRetries returns what the Google Cloud clients that call method
// retry by themselves, for Explain.
func clientRetries(method string) []ClientRetries {
	var out []ClientRetries
	for _, rl := range googleclients.Explain(method) {
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

// logical remembers what the Retrier did across its client's attempts of
// one call.
type logical struct {
	retries int   // retries the Retrier made
	final   error // the Retrier gave up with it; nil: it did not
	expires time.Time
	stop    func() bool // stops the context.AfterFunc that forgets it; nil: none
}

// maxLogical bounds the calls remembered at once: past it, calls are not
// remembered, and their client's attempts count afresh.
const maxLogical = 10000

// forgetAfter is how long a call whose context never ends is remembered.
const forgetAfter = 10 * time.Minute

// callKey tells a client's call from every other across the client's
// attempts of it. gax.Invoke sends every attempt with the same request
// message and a context with the same Done channel: the context itself is
// the same, except with gax's tracing on, where each attempt's carries its
// resend count over the call's. Calls on one context are told apart by
// their method and request.
type callKey struct {
	done   <-chan struct{} // the context's Done channel; nil for one that never ends
	ctx    context.Context // a context that never ends, itself
	method string
	req    any
}

// keyOf returns the key of the call of method with req on ctx, or false
// for a call no key can tell apart: its request is not a pointer (a client
// sends one message in all its attempts), or its context never ends and is
// not a pointer, as context.Background is not.
func keyOf(ctx context.Context, method string, req any) (callKey, bool) {
	if req == nil || reflect.TypeOf(req).Kind() != reflect.Pointer {
		return callKey{}, false
	}
	if d := ctx.Done(); d != nil {
		return callKey{done: d, method: method, req: req}, true
	}
	if reflect.TypeOf(ctx).Kind() == reflect.Pointer {
		return callKey{ctx: ctx, method: method, req: req}, true
	}
	return callKey{}, false
}

// logicalCalls is the Retrier's memory of the unary calls of Google Cloud
// clients, by callKey, so that the Retrier's retries of one call, across
// its client's attempts, stay within MaxAttempts, and so that once it gave
// up on a call, every later attempt of the client fails at once with the
// error it gave up with.
// Only calls that failed and were retried, or given up on, are
// remembered, until their context ends.
type logicalCalls struct {
	n  atomic.Int32 // len(m), read by every call: 0 skips the lookup
	mu sync.Mutex
	m  map[callKey]*logical
}

// get returns what is remembered of the call with key k: the retries made,
// and the error the Retrier gave up with, if it did; ok is false for a
// call not remembered.
func (l *logicalCalls) get(k callKey) (retries int, final error, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.m[k]; e != nil {
		return e.retries, e.final, true
	}
	return 0, nil, false
}

// put remembers the call with key k, whose context is ctx, or forgets it
// for retries 0 and a nil final.
func (l *logicalCalls) put(ctx context.Context, k callKey, retries int, final error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.m[k]
	if retries == 0 && final == nil {
		if e != nil {
			l.drop(k, e)
		}
		return
	}
	now := time.Now()
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
	e.retries, e.final, e.expires = retries, final, now.Add(forgetAfter)
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
		if now.After(e.expires) {
			l.drop(k, e)
		}
	}
}
