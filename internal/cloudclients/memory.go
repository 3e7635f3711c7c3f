package cloudclients

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
)

// A Google Cloud client retries a call with one context and request, by
// which the interceptors know its attempts: their own retries of one call
// stay within MaxAttempts across them. That Memory never answers for the
// wire: every call is sent, and an attempt of a call its client resends
// only gets fewer retries of the Retrier's.

// remembered is how many retries the Retrier made across its client's
// attempts of one call, for the client's next attempt of it.
type remembered struct {
	retries int                // retries the Retrier made
	exact   context.Context    // non-nil: only an attempt with this very context is a resend of it (see Record)
	ended   time.Time          // when the last attempt of it ended
	within  time.Duration      // how long after ended the client may send it again
	busy    bool               // a resend of it is under way: a call that finds it then is another call
	stop    func() bool        // stops the context.AfterFunc that forgets it; nil: none
	err     *grpcbackoff.Error // the error it ended with, for Decline; nil: not declinable
	memory  *Memory            // its memory, and
	key     slot               // its key there, for Decline
}

// declinable maps the error an adopted call ended with (gaxretry.Adopt), a
// *grpcbackoff.Error the Retrier made for that call alone, to its entry:
// Adopt's Retryer, which sees that error, forgets the call when it does not
// send it again (Decline), so that the caller's next call with the same
// request and context (a poller's) is a call of its own. A per-call
// gax.WithRetry, which replaces that Retryer and may resend the call,
// leaves the entry to bound its retries. The entries are held weakly: a
// Memory dropped with its Retrier is not kept by this map, and the errors
// of entries gone are swept as the map grows.
var declinable struct {
	mu    sync.Mutex
	m     map[*grpcbackoff.Error]weak.Pointer[remembered]
	sweep int // the size at which entries gone are swept
}

// Decline forgets the call that ended with err (the Retrier's error, or one
// that wraps it), if it is an adopted call's that is remembered: its
// client's Retryer will not send it again.
func Decline(err error) {
	var ge *grpcbackoff.Error
	if !errors.As(err, &ge) {
		return
	}
	declinable.mu.Lock()
	wp, ok := declinable.m[ge]
	delete(declinable.m, ge)
	declinable.mu.Unlock()
	if e := wp.Value(); ok && e != nil {
		e.memory.forget(e.key, e)
	}
}

// declinableSet makes e, the entry of k in l, declinable by err, in place
// of the error it was declinable by; a nil err: by none.
func declinableSet(e *remembered, err *grpcbackoff.Error) {
	declinable.mu.Lock()
	defer declinable.mu.Unlock()
	if e.err != nil && declinable.m[e.err] == weak.Make(e) {
		delete(declinable.m, e.err)
	}
	e.err = err
	if err == nil {
		return
	}
	if declinable.m == nil {
		declinable.m = make(map[*grpcbackoff.Error]weak.Pointer[remembered])
	}
	declinable.m[err] = weak.Make(e)
	if len(declinable.m) >= declinable.sweep {
		for ge, wp := range declinable.m {
			if wp.Value() == nil {
				delete(declinable.m, ge)
			}
		}
		declinable.sweep = 2*len(declinable.m) + 64
	}
}

// maxLogical bounds the calls remembered at once: past it, calls are not
// remembered, and their client's attempts count afresh.
const maxLogical = 10000

// ResendGrace is added to the longest pause of a client's retry: the time
// between the end of an attempt and the client's next, beside its pause
// (its Retryer, a goroutine's scheduling).
const ResendGrace = time.Second

// Key tells a client's call from every other across the client's
// attempts of it: its connection's target, its context, its method and
// its request. gax.Invoke sends every attempt with the same request message
// and a context with the same Done channel: the context itself is the
// same, except with gax's tracing on, where each attempt's carries its
// resend count over the call's. (Each call of a generated client has a
// context of its own, made by gax.InsertMetadataIntoOutgoingContext, with
// its caller's Done channel.)
type Key struct {
	slot
	caller context.Context // the attempt's context itself, for an entry that asks for it (exact)
}

// slot is what the Memory's map is keyed by: a Key but its caller.
type slot struct {
	target string          // cc.Target(); "" without a ClientConn
	done   <-chan struct{} // the context's Done channel; nil for one that never ends
	ctx    context.Context // a context that never ends, itself
	method string
	req    any
}

// KeyOf returns the key of the call of method with req on ctx, to target,
// or false for a call no key can tell apart: its request is not a pointer
// (a client sends one message in all its attempts), or its context never
// ends and is not a pointer, as context.Background is not.
func KeyOf(ctx context.Context, target, method string, req any) (Key, bool) {
	if req == nil || reflect.TypeOf(req).Kind() != reflect.Pointer {
		return Key{}, false
	}
	if d := ctx.Done(); d != nil {
		return Key{slot{target: target, done: d, method: method, req: req}, ctx}, true
	}
	if reflect.TypeOf(ctx).Kind() == reflect.Pointer {
		return Key{slot{target: target, ctx: ctx, method: method, req: req}, ctx}, true
	}
	return Key{}, false
}

// Memory is the Retrier's memory of the unary calls of Google Cloud
// clients, by Key, so that its retries of one call, across its
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
// afresh. A call that ended with a code its client's CallOptions do not
// retry is kept for an attempt with its very context alone (a per-call
// gax.WithRetry's resend; see Record).
type Memory struct {
	n       atomic.Int32 // len(m), read by every call: 0 skips the lookup
	mu      sync.Mutex
	m       map[slot]*remembered
	sweepAt int       // the size of m at which entries past their time are dropped
	swept   time.Time // when they last were
}

// Len returns the number of calls remembered: a call finds nothing when it
// is 0, without a lookup.
func (l *Memory) Len() int { return int(l.n.Load()) }

// Take returns the retries remembered of the call with key k at now, and
// marks its entry as taken by this attempt of it; ok is false for a call
// not remembered, past its time (forgotten then), or taken by another.
func (l *Memory) Take(k Key, now time.Time) (retries int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.m[k.slot]
	switch {
	case e == nil:
		return 0, false
	case now.Sub(e.ended) > e.within:
		l.drop(k.slot, e)
		return 0, false
	case e.busy, e.exact != nil && !sameContext(e.exact, k.caller):
		return 0, false
	}
	e.busy = true
	return e.retries, true
}

// End records the end at now, with retries made in all, of an attempt of
// the call with key k, whose context is ctx: forgotten if !again (its
// client does not send it again), kept for within otherwise, or until
// Decline(err) with a non-nil err. taken says the attempt took the entry.
func (l *Memory) End(ctx context.Context, k Key, taken, again bool, retries int, now time.Time, within time.Duration, err error) {
	l.end(ctx, k, taken, again, retries, now, within, err, false)
}

// end is End; exact says only an attempt with k's very context is a resend
// of the call (see Record).
func (l *Memory) end(ctx context.Context, k Key, taken, again bool, retries int, now time.Time, within time.Duration, err error, exact bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.m[k.slot]
	if e != nil && e.busy && !taken {
		return // another call's resend holds it
	}
	if e != nil && !taken && (e.exact != nil || exact) && !sameContext(e.exact, k.caller) {
		l.drop(k.slot, e) // another call of the client: it replaces the call it does not resend
		e = nil
	}
	if !again || retries == 0 && e == nil {
		if e != nil {
			l.drop(k.slot, e)
		}
		return
	}
	if e == nil {
		// Entries past their time are dropped as the memory grows (when it
		// doubled since the last sweep) and, when it is full, at most once
		// a second: a full memory of live entries is not walked on every
		// call.
		if len(l.m) >= l.sweepAt || len(l.m) >= maxLogical && now.Sub(l.swept) >= time.Second {
			l.sweep(now)
			l.sweepAt, l.swept = max(2*len(l.m), 64), now
		}
		if len(l.m) >= maxLogical {
			return
		}
		if l.m == nil {
			l.m = make(map[slot]*remembered)
		}
		e = &remembered{memory: l, key: k.slot}
		if k.done != nil {
			e.stop = context.AfterFunc(ctx, func() { l.forget(k.slot, e) })
		}
		l.m[k.slot] = e
		l.n.Store(int32(len(l.m)))
	}
	e.retries, e.ended, e.within, e.busy = max(e.retries, retries), now, within, false
	if exact {
		e.exact = k.caller
	} else {
		e.exact = nil
	}
	var ge *grpcbackoff.Error
	if err == nil || !errors.As(err, &ge) {
		ge = nil
	}
	if ge != e.err {
		declinableSet(e, ge)
	}
}

// forget drops e, the entry of k, if it is still there.
func (l *Memory) forget(k slot, e *remembered) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m[k] == e {
		l.drop(k, e)
	}
}

// drop removes e, the entry of k. l.mu is held.
func (l *Memory) drop(k slot, e *remembered) {
	if e.stop != nil {
		e.stop()
	}
	if e.err != nil {
		declinableSet(e, nil)
	}
	delete(l.m, k)
	l.n.Store(int32(len(l.m)))
}

// sweep drops the entries past their time. l.mu is held.
func (l *Memory) sweep(now time.Time) {
	for k, e := range l.m {
		if now.Sub(e.ended) > e.within {
			l.drop(k, e)
		}
	}
}

// Record records the end at now, with retries made in all, of an attempt
// of the unary call with key k of the Google Cloud client c, whose context
// is ctx, which ended with err (nil: a success); taken says the attempt
// took the call's entry (Take). The call is kept, and its next attempt gets
// what is left of MaxAttempts, when the client may send it again:
//
//   - after a code the client retries for the method (c.Resends), within
//     its longest pause, an attempt with the call's Done channel (and, for
//     an adopted call, until its Retryer declines it);
//   - after any other code of a Google Cloud client's call, within gax's
//     longest pause, an attempt with the call's very context: a per-call
//     gax.WithRetry, which the interceptors cannot see, resends the call
//     with the context gax.Invoke was given, while the client's next call
//     (a poller's, with the same request) has a context of its own.
//
// Otherwise (a success, the context ended, not a Google client's call) it
// is forgotten.
func (l *Memory) Record(ctx context.Context, k Key, taken bool, c Client, err error, retries int, now time.Time) {
	alive := err != nil && ctx.Err() == nil
	code := status.Code(err)
	var declinable error
	if c.HandedOver {
		declinable = err // Adopt's Retryer forgets it if it does not resend it
	}
	switch {
	case alive && c.Resends.Has(code):
		l.end(ctx, k, taken, true, retries, now, c.Pause+ResendGrace, declinable, false)
	case alive && c.Google:
		l.end(ctx, k, taken, true, retries, now, gaxMaxPause+ResendGrace, declinable, true)
	default:
		l.end(ctx, k, taken, false, retries, now, 0, nil, false)
	}
}

// sameContext reports whether a and b are one context; contexts of types
// that cannot be compared are not.
func sameContext(a, b context.Context) bool {
	t := reflect.TypeOf(a)
	return t != nil && t == reflect.TypeOf(b) && t.Comparable() && a == b
}
