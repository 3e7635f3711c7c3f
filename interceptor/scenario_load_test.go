package interceptor_test

// Load: thousands of unary calls and hundreds of streams through one set of
// interceptors (one Retrier, one ClientConn, the default policy and
// throttle) during an outage and the recovery. The run is in a synctest
// bubble, so the 60 s outage costs no real time and a goroutine left behind
// fails the test.

import (
	"context"
	"errors"
	"io"
	"math"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// callKey is the request metadata that names a call, so that the server
// and the client can count the attempts of each call.
const callKey = bufconntest.StreamKey

// newLoadServer is a scripted server whose attempts answer after latency,
// failing with UNAVAILABLE while down; a unary call's response carries its
// request's body, a server stream's three responses the request's and /0,
// /1, /2, and a bidi stream echoes every message.
func newLoadServer(tb testing.TB, latency time.Duration, down *atomic.Bool) *bufconntest.Server {
	return bufconntest.NewServer(tb, func(string, int) bufconntest.Step {
		return bufconntest.Step{
			Before: func(ctx context.Context) error {
				if err := bufconntest.Pause(ctx, latency); err != nil {
					return err
				}
				if down.Load() {
					return status.Error(codes.Unavailable, "load: server is down")
				}
				return nil
			},
			Recv: bufconntest.UntilHalfClose, Echo: true, Mirror: true, Send: 3,
		}
	})
}

// attemptCounter is a client interceptor, installed inside the retrying ones,
// that counts the attempts of each call.
type attemptCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (a *attemptCounter) record(ctx context.Context) {
	md, _ := metadata.FromOutgoingContext(ctx)
	id := ""
	if v := md.Get(callKey); len(v) > 0 {
		id = v[0]
	}
	a.mu.Lock()
	a.n[id]++
	a.mu.Unlock()
}

func (a *attemptCounter) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			a.record(ctx)
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			a.record(ctx)
			return streamer(ctx, desc, cc, method, opts...)
		}),
	}
}

// loadCall is what one call did.
type loadCall struct {
	id         string
	stream     bool
	start, end time.Time
	err        error
	got        []string
	want       []string
}

// runLoadCall makes call c: a unary call, a server stream (even streams) or a
// bidi stream (odd ones), each with the caller's deadline.
func runLoadCall(ctx context.Context, client testgrpc.TestServiceClient, c *loadCall, n int) {
	ctx = metadata.AppendToOutgoingContext(ctx, callKey, c.id)
	payload := func(s string) *testgrpc.Payload { return &testgrpc.Payload{Body: []byte(s)} }
	switch {
	case !c.stream:
		c.want = []string{c.id}
		resp, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{Payload: payload(c.id)})
		if err != nil {
			c.err = err
			return
		}
		c.got = []string{string(resp.GetPayload().GetBody())}
	case n%2 == 0:
		c.want = []string{c.id + "/0", c.id + "/1", c.id + "/2"}
		st, err := client.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{Payload: payload(c.id)})
		if err != nil {
			c.err = err
			return
		}
		c.recvAll(st)
	default:
		c.want = []string{c.id + "/a", c.id + "/b", c.id + "/c"}
		st, err := client.FullDuplexCall(ctx)
		if err != nil {
			c.err = err
			return
		}
		// Send on another goroutine while receiving, as bidi callers do:
		// retries and commits then race with sends.
		sent := make(chan struct{})
		go func() {
			defer close(sent)
			for _, m := range c.want {
				if st.Send(&testgrpc.StreamingOutputCallRequest{Payload: payload(m)}) != nil {
					break // io.EOF: Recv says why
				}
			}
			st.CloseSend()
		}()
		defer func() { <-sent }()
		c.recvAll(st)
	}
}

// recvAll receives until the stream ends, keeping the bodies and the error
// other than io.EOF.
func (c *loadCall) recvAll(st interface {
	Recv() (*testgrpc.StreamingOutputCallResponse, error)
}) {
	for {
		m, err := st.Recv()
		if err != nil {
			if err != io.EOF {
				c.err = err
			}
			return
		}
		c.got = append(c.got, string(m.GetPayload().GetBody()))
	}
}

// peakUsage samples the process's goroutines and memory.
type peakUsage struct {
	samples    int
	goroutines int
	heapInuse  uint64
	sys        uint64
	inFlight   int64
}

func (p *peakUsage) sample(inFlight int64) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	p.samples++
	p.goroutines = max(p.goroutines, runtime.NumGoroutine())
	p.heapInuse = max(p.heapInuse, ms.HeapInuse)
	p.sys = max(p.sys, ms.Sys)
	p.inFlight = max(p.inFlight, inFlight)
}

// TestLoadOutageAndRecovery runs the storm twice: with the default
// throttle, which must hold the retries to its budget, and without one, where
// every call retries as its Policy says and the streams replay concurrently.
func TestLoadOutageAndRecovery(t *testing.T) {
	if raceEnabled {
		t.Skip("a storm's statistics over thousands of calls: run without -race (the README's test command)")
	}
	nUnary, nStreams := 2000, 200
	if testing.Short() {
		nUnary, nStreams = 200, 20
	}
	t.Run("default throttle", func(t *testing.T) {
		throttle := grpcbackoff.DefaultThrottle()
		storm(t, nUnary, nStreams, &throttle)
	})
	t.Run("no throttle", func(t *testing.T) { storm(t, nUnary, nStreams, nil) })
}

// storm makes nUnary unary calls and nStreams streams through one Retrier
// with the default policy and throttle (none if nil), half of them at once
// when an outage of 60 s starts, the others spread over 90 s, and checks
// that every call ended within its deadline, that the attempts add up with
// what the server saw, and that the throttle held.
func storm(t *testing.T, nUnary, nStreams int, throttle *grpcbackoff.Throttle) {
	const (
		outage   = 60 * time.Second       // the server is down from the start for this long
		span     = 90 * time.Second       // the spread-out half of the calls start within this
		deadline = 30 * time.Second       // every call's deadline
		latency  = 250 * time.Millisecond // every attempt's time at the server
		every    = 100 * time.Millisecond // sampling period
	)
	wall := time.Now()
	synctest.Test(t, func(t *testing.T) {
		var down atomic.Bool
		down.Store(true)
		srv := newLoadServer(t, latency, &down)

		type retryEvent struct {
			at        time.Time
			throttled bool
		}
		var (
			mu      sync.Mutex
			retries []retryEvent
		)
		policy := grpcbackoff.DefaultPolicy()
		opts := []interceptor.Option{testService, interceptor.WithOnRetry(func(rt interceptor.Retry) {
			mu.Lock()
			retries = append(retries, retryEvent{time.Now(), rt.Throttled})
			mu.Unlock()
		})}
		if throttle != nil {
			opts = append(opts, interceptor.WithThrottle(*throttle))
		} else {
			opts = append(opts, interceptor.WithoutThrottle())
		}
		r, err := interceptor.New(policy, opts...)
		if err != nil {
			t.Fatal(err)
		}
		counted := &attemptCounter{n: make(map[string]int)}
		client := srv.Client(t, append(r.DialOptions(), counted.dialOptions()...)...)

		t0 := time.Now()
		time.AfterFunc(outage, func() { down.Store(false) })

		// Half of each kind start at once at t0 (a burst of over a
		// thousand concurrent calls); the others spread over span.
		n := nUnary + nStreams
		calls := make([]loadCall, n)
		var wg sync.WaitGroup
		var inFlight atomic.Int64
		for i := range calls {
			c := &calls[i]
			c.stream = i >= nUnary
			k := i
			if c.stream {
				k = i - nUnary
				c.id = "s" + strconv.Itoa(k)
			} else {
				c.id = "u" + strconv.Itoa(k)
			}
			total := nUnary
			if c.stream {
				total = nStreams
			}
			var at time.Duration
			if k >= total/2 {
				at = span * time.Duration(k-total/2) / time.Duration(total-total/2)
			}
			wg.Add(1)
			time.AfterFunc(at, func() {
				defer wg.Done()
				inFlight.Add(1)
				defer inFlight.Add(-1)
				ctx, cancel := context.WithTimeout(t.Context(), deadline)
				defer cancel()
				c.start = time.Now()
				runLoadCall(ctx, client, c, k)
				c.end = time.Now()
			})
		}

		var peak peakUsage
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				peak.sample(inFlight.Load())
				select {
				case <-tick.C:
				case <-stop:
					return
				}
			}
		}()
		wg.Wait()
		close(stop)
		<-sampled
		peak.sample(inFlight.Load())
		ended := time.Since(t0)

		// Every call ended, within its deadline, as a success or an
		// UNAVAILABLE (or DEADLINE_EXCEEDED, if the deadline came
		// during an attempt) with its attempts counted.
		var ok, failed int
		reasons := map[grpcbackoff.Reason]int{}
		for i := range calls {
			c := &calls[i]
			if c.end.IsZero() {
				t.Fatalf("call %s did not end", c.id)
			}
			if d := c.end.Sub(c.start); d > deadline {
				t.Errorf("call %s took %v, longer than its deadline (%v)", c.id, d, deadline)
			}
			counted.mu.Lock()
			attempts := counted.n[c.id]
			counted.mu.Unlock()
			seen := len(srv.Attempts(c.id))
			if seen != attempts || attempts < 1 || attempts > policy.MaxAttempts {
				t.Errorf("call %s: server saw %d attempts, client made %d, want equal and within 1..%d", c.id, seen, attempts, policy.MaxAttempts)
			}
			if c.err == nil {
				ok++
				if !slices.Equal(c.got, c.want) {
					t.Errorf("call %s received %q, want %q", c.id, c.got, c.want)
				}
				if !c.start.Before(t0.Add(outage)) && attempts != 1 {
					t.Errorf("call %s started after the recovery and made %d attempts, want 1", c.id, attempts)
				}
				continue
			}
			failed++
			if code := status.Code(c.err); code != codes.Unavailable && code != codes.DeadlineExceeded {
				t.Errorf("call %s: status.Code(err) = %v, want Unavailable or DeadlineExceeded (%v)", c.id, code, c.err)
			}
			if !c.start.Before(t0.Add(outage)) {
				t.Errorf("call %s started after the recovery and failed: %v", c.id, c.err)
			}
			var e *grpcbackoff.Error
			if errors.As(c.err, &e) {
				reasons[e.Reason]++
				if e.Attempts != attempts {
					t.Errorf("call %s: Error.Attempts = %d, want the %d attempts made", c.id, e.Attempts, attempts)
				}
			} else if attempts != 1 {
				t.Errorf("call %s: err = %v after %d attempts, want a *grpcbackoff.Error", c.id, c.err, attempts)
			}
		}
		if ok+failed != n {
			t.Errorf("successes + failures = %d + %d, want %d calls", ok, failed, n)
		}

		// The attempts add up: the server saw one per call and one per
		// retry granted, and nothing else.
		granted, throttled := 0, 0
		for _, ev := range retries {
			if ev.throttled {
				throttled++
			} else {
				granted++
			}
		}
		serverTotal := srv.Count()
		if serverTotal != n+granted {
			t.Errorf("attempts the server saw = %d, want %d calls + %d retries = %d", serverTotal, n, granted, n+granted)
		}

		// The throttle held: at every instant, the retries granted so far
		// are within Burst + Ratio·(calls started so far) + PerSecond·(time).
		tr := grpcbackoff.Throttle{Burst: math.MaxInt32, Ratio: 1} // no throttle: no bound
		if throttle != nil {
			tr = *throttle
		}
		starts := make([]time.Time, n)
		for i := range calls {
			starts[i] = calls[i].start
		}
		slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
		slices.SortStableFunc(retries, func(a, b retryEvent) int { return a.at.Compare(b.at) })
		bound := func(at time.Time) float64 {
			started, _ := slices.BinarySearchFunc(starts, at, func(s, at time.Time) int {
				if s.After(at) {
					return 1
				}
				return -1
			})
			return float64(tr.Burst) + tr.Ratio*float64(started) + tr.PerSecond*at.Sub(t0).Seconds()
		}
		sofar, duringOutage := 0, 0
		for i, ev := range retries {
			if !ev.throttled {
				sofar++
				if ev.at.Before(t0.Add(outage)) {
					duringOutage++
				}
			}
			if i+1 < len(retries) && retries[i+1].at.Equal(ev.at) {
				continue // check at the end of each instant
			}
			if b := bound(ev.at); float64(sofar) > b+1e-9 {
				t.Errorf("at %v, %d retries granted, want at most %.1f (Burst + Ratio·started + PerSecond·t)", ev.at.Sub(t0), sofar, b)
				break
			}
		}
		outageBound := bound(t0.Add(outage).Add(-time.Nanosecond))
		switch {
		case throttle != nil && throttled == 0:
			t.Errorf("no retry was throttled, want the throttle to hold the storm back")
		case throttle == nil && throttled != 0:
			t.Errorf("%d retries throttled without a throttle, want 0", throttled)
		}

		t.Logf("%d unary calls + %d streams, outage %v, deadline %v: %d succeeded, %d failed %v; ended after %v of fake time",
			nUnary, nStreams, outage, deadline, ok, failed, reasons, ended)
		if throttle != nil {
			t.Logf("retries: %d granted (%d during the outage, bound %.1f), %d throttled; server attempts %d",
				granted, duringOutage, outageBound, throttled, serverTotal)
		} else {
			t.Logf("retries: %d granted (%d during the outage), none throttled; server attempts %d",
				granted, duringOutage, serverTotal)
		}
		t.Logf("peak over %d samples: %d goroutines, %d calls in flight, HeapInuse %.1f MiB, Sys %.1f MiB",
			peak.samples, peak.goroutines, peak.inFlight, float64(peak.heapInuse)/(1<<20), float64(peak.sys)/(1<<20))
	})
	t.Logf("real time: %v", time.Since(wall).Round(time.Millisecond))
}
