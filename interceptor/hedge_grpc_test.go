package interceptor_test

import (
	"context"
	"fmt"
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
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// newHedgeBackend is a scripted server whose attempt n of a call answers
// after latency[n] with body "a<n>" (and the header and trailer AttemptKey:
// n), its headers sent first if early; it returns a client hedged as h.
// Calls made at once must each carry their own StreamKey (callNamed).
func newHedgeBackend(t *testing.T, latency []time.Duration, early bool, h grpcbackoff.Hedging) (*bufconntest.Server, testgrpc.TestServiceClient) {
	t.Helper()
	s := bufconntest.NewServer(t, func(_ string, n int) bufconntest.Step {
		return bufconntest.Step{Header: early, Pause: latency[n], Body: "a" + strconv.Itoa(n)}
	})
	r, err := interceptor.New(bufconntest.Exact(), interceptor.WithHedging("/grpc.testing.TestService/UnaryCall", h))
	if err != nil {
		t.Fatal(err)
	}
	return s, s.Client(t, r.DialOptions()...)
}

// callNamed returns ctx naming its call id for the server (StreamKey).
func callNamed(ctx context.Context, id string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, bufconntest.StreamKey, id)
}

// ended returns how each attempt of call id ended at the server: its
// context's error, nil if answered.
func ended(s *bufconntest.Server, id string) []error {
	var out []error
	for _, a := range s.Attempts(id) {
		out = append(out, a.Canceled)
	}
	return out
}

// TestHedgeOverGRPC runs hedged calls through grpc-go over bufconn: the
// winner's reply, header, trailer and peer reach the caller, a new proto
// reply each time, and the server sees the losers' contexts canceled.
func TestHedgeOverGRPC(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c := newHedgeBackend(t, []time.Duration{time.Second, 10 * msec, time.Second}, false, hedging(3, 100*msec))
		var header, trailer metadata.MD
		var p peer.Peer
		start := time.Now()
		resp, err := c.UnaryCall(t.Context(), &testgrpc.SimpleRequest{ResponseType: testgrpc.PayloadType_COMPRESSABLE},
			grpc.Header(&header), grpc.Trailer(&trailer), grpc.Peer(&p))
		if err != nil {
			t.Fatal(err)
		}
		if got := time.Since(start); got != 110*msec {
			t.Errorf("call took %v, want 110ms", got)
		}
		if body := string(resp.GetPayload().GetBody()); body != "a1" || resp.GetPayload().GetType() != testgrpc.PayloadType_COMPRESSABLE {
			t.Errorf("response = %v, want attempt 1's", resp)
		}
		if header.Get(bufconntest.AttemptKey)[0] != "1" || trailer.Get(bufconntest.AttemptKey)[0] != "1" {
			t.Errorf("header %v, trailer %v; want attempt 1's", header, trailer)
		}
		if p.Addr == nil {
			t.Errorf("peer not set")
		}
		synctest.Wait() // the server's handlers of the losers return
		if e := ended(s, ""); len(e) != 2 || e[0] != context.Canceled || e[1] != nil {
			t.Errorf("server saw attempts end with %v, want attempt 0 canceled and 1 answered, no attempt 2", e)
		}
	})
}

// TestHedgeRaceFree runs many hedged calls at once whose attempts answer
// at the same instant, with the caller's Header, Trailer and Peer options:
// under -race, no attempt writes to what the caller reads.
func TestHedgeRaceFree(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, c := newHedgeBackend(t, []time.Duration{20 * msec, 10 * msec, 0}, false, hedging(3, 10*msec))
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				var header, trailer metadata.MD
				var p peer.Peer
				resp, err := c.UnaryCall(callNamed(t.Context(), strconv.Itoa(i)), &testgrpc.SimpleRequest{}, grpc.Header(&header), grpc.Trailer(&trailer), grpc.Peer(&p))
				if err != nil {
					t.Error(err)
					return
				}
				body := string(resp.GetPayload().GetBody())
				if h, tr := header.Get(bufconntest.AttemptKey), trailer.Get(bufconntest.AttemptKey); len(h) != 1 || len(tr) != 1 || "a"+h[0] != body || "a"+tr[0] != body {
					t.Errorf("response %q with header %v and trailer %v: not all from one attempt", body, header, trailer)
				}
			})
		}
		wg.Wait()
	})
}

// TestHedgeDeadlineOverGRPC checks that the caller's deadline cuts every
// attempt and that the call returns DEADLINE_EXCEEDED at the deadline.
func TestHedgeDeadlineOverGRPC(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, c := newHedgeBackend(t, []time.Duration{time.Hour, time.Hour, time.Hour}, false, hedging(3, 100*msec))
		ctx, cancel := context.WithTimeout(t.Context(), 150*msec)
		defer cancel()
		start := time.Now()
		_, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		if status.Code(err) != codes.DeadlineExceeded || time.Since(start) != 150*msec {
			t.Errorf("err = %v after %v, want DEADLINE_EXCEEDED after 150ms", err, time.Since(start))
		}
	})
}

// TestHedgeNoHedgeAfterHeaders: an attempt whose server sends its headers at
// once and answers 200 ms later, hedged every 50 ms. Its headers commit the
// call to it: no hedge is sent, and its reply and header are the caller's.
// Before issue 20 a hedge went out at 50 ms, answered first, and the caller
// got the hedge's reply instead of the committed attempt's.
func TestHedgeNoHedgeAfterHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c := newHedgeBackend(t, []time.Duration{200 * msec, 0, 0}, true, hedging(3, 50*msec))
		var header metadata.MD
		start := time.Now()
		resp, err := c.UnaryCall(t.Context(), &testgrpc.SimpleRequest{}, grpc.Header(&header))
		if err != nil {
			t.Fatal(err)
		}
		if got := time.Since(start); got != 200*msec {
			t.Errorf("call took %v, want 200ms", got)
		}
		if body := string(resp.GetPayload().GetBody()); body != "a0" || header.Get(bufconntest.AttemptKey)[0] != "0" {
			t.Errorf("response %q with header %v, want attempt 0's", body, header)
		}
		synctest.Wait()
		if e := ended(s, ""); len(e) != 1 {
			t.Errorf("the server saw attempts %v, want attempt 0 alone", e)
		}
	})
}

// TestHedgeLoadShedding: 30 hedged calls (the README's hedging) against a
// server shedding load for 2 s, RESOURCE_EXHAUSTED with a 200 ms pushback.
// Failures answer to the Policy, so every call succeeds, as the same calls
// unhedged do. Before issue 20 the code, fatal to the hedging, ended all 30.
// The budget is out of the way: its floor alone (no call before) pays 55
// RESOURCE_EXHAUSTED retries, where the 30 calls want 60 (what a budget
// pays in a throttling storm is TestThrottledStorm's).
func TestHedgeLoadShedding(t *testing.T) {
	for _, hedged := range []bool{false, true} {
		t.Run(fmt.Sprintf("hedged %v", hedged), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				shed := func(ctx context.Context, _ int) error {
					if time.Since(start) < 2*time.Second {
						grpc.SetTrailer(ctx, metadata.Pairs(grpcbackoff.PushbackKey, "200"))
						return status.Error(codes.ResourceExhausted, "shedding load")
					}
					return nil
				}
				srv := newFaultyServer(t, shed, respSize(1))
				opts := []interceptor.Option{interceptor.WithoutThrottle()}
				if hedged {
					opts = append(opts, interceptor.WithHedging("/grpc.testing.TestService/UnaryCall", grpcbackoff.Hedging{MaxAttempts: 2, Delay: 50 * msec}))
				}
				r, err := interceptor.New(grpcbackoff.DefaultPolicy(), opts...)
				if err != nil {
					t.Fatal(err)
				}
				c := srv.Client(t, r.DialOptions()...)
				var wg sync.WaitGroup
				var failed atomic.Int64
				for range 30 {
					wg.Go(func() {
						if _, err := c.UnaryCall(t.Context(), &testgrpc.SimpleRequest{}); err != nil {
							failed.Add(1)
							t.Logf("call failed: %v", err)
						}
					})
				}
				wg.Wait()
				if n := failed.Load(); n != 0 {
					t.Errorf("%d of 30 calls failed, want none", n)
				}
			})
		})
	}
}
