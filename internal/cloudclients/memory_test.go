package cloudclients

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
)

// held reports whether the declinable map holds err.
func held(err *grpcbackoff.Error) bool {
	declinable.mu.Lock()
	defer declinable.mu.Unlock()
	_, ok := declinable.m[err]
	return ok
}

// TestMemoryDecline: an adopted call's entry is forgotten when its client's
// Retryer declines the error it ended with, wrapped or not; an entry with
// no error to decline, or another error, is kept; an entry dropped leaves
// nothing to decline; two calls that end with equal errors (one wrapped
// error shared by an interceptor after the Retrier) are told apart, as the
// Retrier makes an Error of each call's own.
func TestMemoryDecline(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	now := time.Now()
	var m Memory
	req, other := new(int), new(int)
	k, _ := KeyOf(ctx, "t", "/s/M", req)
	k2, _ := KeyOf(ctx, "t", "/s/M", other)
	shared := fmt.Errorf("circuit open")
	errA := &grpcbackoff.Error{Err: shared, Reason: grpcbackoff.ReasonExhausted}
	errB := &grpcbackoff.Error{Err: shared, Reason: grpcbackoff.ReasonExhausted}
	m.End(ctx, k, false, true, 3, now, time.Minute, errA)
	m.End(ctx, k2, false, true, 2, now, time.Minute, errB)

	Decline(shared) // not the Retrier's error: nothing
	Decline(&grpcbackoff.Error{Err: shared})
	if m.Len() != 2 {
		t.Fatalf("after declining other errors: %d calls remembered, want 2", m.Len())
	}
	Decline(fmt.Errorf("wrapped by the client: %w", errA))
	if _, ok := m.Take(k, now); ok {
		t.Errorf("the declined call is still remembered")
	}
	if n, ok := m.Take(k2, now); !ok || n != 2 {
		t.Errorf("the other call: %d, %v; want 2 retries remembered", n, ok)
	}
	if held(errA) {
		t.Errorf("a declined error is still held")
	}

	m.End(ctx, k, false, true, 1, now, time.Minute, errA)
	m.End(ctx, k, true, false, 1, now, time.Minute, nil) // the call succeeded, say: dropped
	if held(errA) {
		t.Errorf("a dropped entry's error is still held")
	}
	m.End(ctx, k, false, true, 1, now, time.Minute, fmt.Errorf("not the Retrier's"))
	if _, ok := m.Take(k, now); !ok {
		t.Errorf("a call that ended with an error not the Retrier's is not remembered")
	}
}

// TestMemoryDeclinableWeak: the declinable map does not keep a Memory
// dropped with its Retrier, nor the requests it remembers, for calls that
// were never declined and whose context never ends; the map's own entries
// for them are swept as it grows.
func TestMemoryDeclinableWeak(t *testing.T) {
	const memories = 100
	collected := make(chan struct{}, memories)
	func() {
		for i := range memories {
			m := new(Memory)
			req := new([1 << 10]byte)
			runtime.AddCleanup(req, func(c chan struct{}) { c <- struct{}{} }, collected)
			ctx := context.WithValue(context.Background(), collected, i) // a context that never ends
			k, ok := KeyOf(ctx, "t", "/s/M", req)
			if !ok {
				t.Fatal("no key")
			}
			m.End(ctx, k, false, true, 1, time.Now(), time.Hour, &grpcbackoff.Error{Reason: grpcbackoff.ReasonExhausted})
		}
	}()
	for i := 0; i < 10 && len(collected) < memories; i++ {
		runtime.GC()
		runtime.Gosched()
	}
	// Cleanups run on their own goroutine: wait for them, boundedly.
	deadline := time.After(10 * time.Second)
	for n := 0; n < memories; n++ {
		select {
		case <-collected:
		case <-deadline:
			t.Fatalf("%d of %d remembered requests collected once their Memory was dropped; want all", n, memories)
		}
		if n%10 == 0 {
			runtime.GC()
		}
	}
	// The next registration sweeps the entries gone.
	var m Memory
	ctx := context.WithValue(context.Background(), collected, -1)
	declinable.mu.Lock()
	declinable.sweep = 0
	declinable.mu.Unlock()
	k, ok := KeyOf(ctx, "t", "/s/M", new(int))
	if !ok {
		t.Fatal("no key")
	}
	m.End(ctx, k, false, true, 1, time.Now(), time.Hour, &grpcbackoff.Error{})
	declinable.mu.Lock()
	n := len(declinable.m)
	declinable.mu.Unlock()
	if n > 1 {
		t.Errorf("after a sweep the declinable map holds %d errors, want only the live entry's", n)
	}
	runtime.KeepAlive(&m)
}

// TestMemorySweepsAsItGrows: entries past their time are dropped as the
// memory grows, not only when it is full, so that a memory whose calls'
// contexts live on does not keep them (and their requests) until it holds
// 10 000.
func TestMemorySweepsAsItGrows(t *testing.T) {
	ctx := context.WithValue(context.Background(), t, 0) // never ends
	var m Memory
	now := time.Now()
	for range 100 {
		k, _ := KeyOf(ctx, "t", "/s/M", new(int))
		m.End(ctx, k, false, true, 1, now, time.Second, nil)
	}
	later := now.Add(time.Hour)
	for range 100 {
		k, _ := KeyOf(ctx, "t", "/s/M", new(int))
		m.End(ctx, k, false, true, 1, later, time.Second, nil)
	}
	if n := m.Len(); n != 100 {
		t.Errorf("%d calls remembered, want the 100 still within their time", n)
	}
}

// TestMemoryRecordPerCall: a Google client's call that ended with a code
// its client does not retry is kept for the attempt with its very context
// (a per-call gax.WithRetry's resend), not for another call with the same
// Done channel and request (a poller's next call, whose context the client
// made anew), which replaces it; one that ended with a code its client
// retries is kept for any attempt with its Done channel (gax's tracing
// gives each resend a context of its own); nothing is kept of a call that
// is not a Google client's.
func TestMemoryRecordPerCall(t *testing.T) {
	base, cancel := context.WithCancel(t.Context())
	defer cancel()
	type marker struct{}
	call := func() context.Context { return context.WithValue(base, marker{}, new(int)) } // a client's call's own context
	now := time.Now()
	req := new(int)
	google := Client{Learnt: true, Google: true, Resends: 1 << 14, Pause: time.Second} // the client resends UNAVAILABLE only
	unavailable, exhausted := errOf(14), errOf(8)

	var m Memory
	first := call()
	k, _ := KeyOf(first, "t", "/s/M", req)
	m.Record(first, k, false, google, exhausted, 4, now)
	if n, ok := m.Take(k, now); !ok || n != 4 {
		t.Errorf("a resend with the call's context: %d, %v; want its 4 retries", n, ok)
	}
	m.Record(first, k, true, google, exhausted, 5, now)
	next := call()
	kn, _ := KeyOf(next, "t", "/s/M", req)
	if _, ok := m.Take(kn, now); ok {
		t.Errorf("the client's next call, a context of its own: took the first call's retries")
	}
	m.Record(next, kn, false, google, exhausted, 2, now)
	if n, ok := m.Take(kn, now); !ok || n != 2 {
		t.Errorf("the next call's own resend: %d, %v; want its own 2 retries, not the first's", n, ok)
	}
	if _, ok := m.Take(k, now.Add(gaxMaxPause+ResendGrace+time.Second)); ok {
		t.Errorf("kept past gax's longest pause")
	}

	var d Memory
	m1 := call()
	k1, _ := KeyOf(m1, "t", "/s/M", req)
	d.Record(m1, k1, false, google, unavailable, 3, now)
	traced := call()
	kt, _ := KeyOf(traced, "t", "/s/M", req)
	if n, ok := d.Take(kt, now); !ok || n != 3 {
		t.Errorf("after a code the client retries, a resend with another context of the Done channel: %d, %v; want 3", n, ok)
	}

	var o Memory
	o.Record(m1, k1, false, Client{Learnt: true}, exhausted, 3, now)
	if o.Len() != 0 {
		t.Errorf("a call that is not a Google client's is remembered")
	}
}

func errOf(code int) error { return status.Error(codes.Code(code), "x") }
