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

// learnClient learns, once, whether the call p plans, with ctx and opts, is
// a Google Cloud client's, and which codes its client retries. A call
// marked by gaxretry.Adopt is the Retrier's for every code.
func (p *plan) learnClient(ctx context.Context, opts []grpc.CallOption) {
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
			out = append(out, ClientRetries{Client: rl.Source, Codes: codeSet(rl.Codes).list(), OpeningOnly: rl.Opening})
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

// logicalCalls is the Retrier's memory of the calls of Google Cloud
// clients, by context: a client retries a call with the context of its
// first attempt (gax.Invoke does), so that the Retrier's retries of one
// call, across the client's attempts, stay within MaxAttempts. Only calls
// that failed and retried, or gave up, are remembered, until their context
// ends.
type logicalCalls struct {
	n  atomic.Int32 // len(m), read by every call: 0 skips the lookup
	mu sync.Mutex
	m  map[context.Context]*logical
}

// rememberable reports whether ctx can be a key: its dynamic type is a
// pointer, as every context of package context is (a context of another
// type may not be comparable).
func rememberable(ctx context.Context) bool {
	return reflect.TypeOf(ctx).Kind() == reflect.Pointer
}

// get returns what is remembered of the call with ctx: the retries made, and
// the error the Retrier gave up with, if it did.
func (l *logicalCalls) get(ctx context.Context) (retries int, final error) {
	if l.n.Load() == 0 || !rememberable(ctx) {
		return 0, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.m[ctx]; e != nil {
		return e.retries, e.final
	}
	return 0, nil
}

// put remembers the call with ctx, or forgets it for retries 0 and a nil
// final.
func (l *logicalCalls) put(ctx context.Context, retries int, final error) {
	if !rememberable(ctx) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.m[ctx]
	if retries == 0 && final == nil {
		if e != nil {
			l.drop(ctx, e)
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
			l.m = make(map[context.Context]*logical)
		}
		e = &logical{}
		if ctx.Done() != nil {
			e.stop = context.AfterFunc(ctx, func() { l.forget(ctx, e) })
		}
		l.m[ctx] = e
		l.n.Store(int32(len(l.m)))
	}
	e.retries, e.final, e.expires = retries, final, now.Add(forgetAfter)
}

// forget drops e, the entry of ctx, if it is still there.
func (l *logicalCalls) forget(ctx context.Context, e *logical) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m[ctx] == e {
		l.drop(ctx, e)
	}
}

// drop removes e, the entry of ctx. l.mu is held.
func (l *logicalCalls) drop(ctx context.Context, e *logical) {
	if e.stop != nil {
		e.stop()
	}
	delete(l.m, ctx)
	l.n.Store(int32(len(l.m)))
}

// sweep drops the entries past their time. l.mu is held.
func (l *logicalCalls) sweep(now time.Time) {
	for ctx, e := range l.m {
		if now.After(e.expires) {
			l.drop(ctx, e)
		}
	}
}
