package bench

// TestPeers checks, for each retry layer set up as in production (the
// mechanisms of the benchmarks with their default settings), the behaviours
// the README's comparison table claims. It runs inside testing/synctest, so
// every backoff is free and every time exact. If a peer's behaviour changes,
// this test fails and the table must change with it.

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/googleapis/gax-go/v2"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// peerMech connects mechanism name, with its production settings, to a new
// scripted server whose attempt n fails with fail(n), or succeeds when it is
// nil (a server stream sends r0 and r1). With sendFirst a failing server
// stream sends r0 first.
func peerMech(t *testing.T, name string, fail func(int) error, sendFirst bool) (*mech, *bufconntest.Server) {
	s := bufconntest.NewServer(t, func(_ string, n int) bufconntest.Step {
		err := fail(n)
		switch {
		case err == nil:
			return bufconntest.Succeed(2)
		case err == pushbackError{}:
			return bufconntest.Step{Err: status.Error(codes.Unavailable, "pushback"),
				Trailer: metadata.Pairs(grpcbackoff.PushbackKey, "20000")}
		case sendFirst:
			return bufconntest.Step{Send: 1, Err: err}
		}
		return bufconntest.Fail(err)
	})
	m := &mech{name: name, retries: new(atomic.Int64)}
	m.cc = s.Conn(t, dialOptions(name, defaults, m.retries)...)
	m.client = testgrpc.NewTestServiceClient(m.cc)
	if name == gaxInvoke {
		m.gax = []gax.CallOption{gaxRetry(defaults, m.retries)}
	}
	return m, s
}

var peerNames = []string{ours, grpcRetry, middleware, gaxInvoke}

func unavailable(attempt int) error { return status.Error(codes.Unavailable, "down") }

func TestPeers(t *testing.T) {
	// What each mechanism does, as the README's table says.
	type behaviour struct {
		retryInfo, pushback, earlyAtDeadline, noDuplicates, clientStreams, throttles bool
	}
	want := map[string]behaviour{
		ours:       {retryInfo: true, pushback: true, earlyAtDeadline: true, noDuplicates: true, clientStreams: true, throttles: true},
		grpcRetry:  {retryInfo: false, pushback: true, earlyAtDeadline: false, noDuplicates: true, clientStreams: true, throttles: true},
		middleware: {retryInfo: false, pushback: false, earlyAtDeadline: false, noDuplicates: false, clientStreams: false, throttles: false},
		gaxInvoke:  {retryInfo: false, pushback: false, earlyAtDeadline: false, noDuplicates: true, clientStreams: true, throttles: false},
	}
	for _, name := range peerNames {
		t.Run(name, func(t *testing.T) {
			var got behaviour
			got.retryInfo = waitsForHint(t, name, func(attempt int) error {
				if attempt > 0 {
					return nil
				}
				st, _ := status.New(codes.Unavailable, "busy").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(20 * time.Second)})
				return st.Err()
			})
			got.pushback = waitsForHint(t, name, func(attempt int) error {
				if attempt > 0 {
					return nil
				}
				return pushbackError{}
			})
			got.earlyAtDeadline = returnsEarlyAtDeadline(t, name)
			got.noDuplicates = noDuplicatesAfterData(t, name)
			got.clientStreams = clientStreamsWork(t, name)
			got.throttles = throttlesAStorm(t, name)
			t.Logf("%s: %+v", name, got)
			if got != want[name] {
				t.Errorf("%s behaves as %+v, the README says %+v", name, got, want[name])
			}
		})
	}
}

// pushbackError makes UnaryCall fail with UNAVAILABLE and a pushback
// trailer of 20 s.
type pushbackError struct{}

func (pushbackError) Error() string { return "pushback" }

// waitsForHint reports whether the first retry waited for the 20 s that the
// server asked for (every policy's own first wait is at most 2 s).
func waitsForHint(t *testing.T, name string, fail func(int) error) bool {
	var waited time.Duration
	synctest.Test(t, func(t *testing.T) {
		m, s := peerMech(t, name, fail, false)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if err := m.unary(ctx, &testgrpc.SimpleRequest{}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		as := s.All()
		waited = as[1].At.Sub(as[0].At)
	})
	return waited >= 20*time.Second
}

// returnsEarlyAtDeadline makes 20 calls, each with a 2.5 s deadline, to a
// server that is down. A mechanism that returns the last real error when
// the next retry could not start in time never reports DEADLINE_EXCEEDED;
// one that sleeps into the deadline does, for some of the calls.
func returnsEarlyAtDeadline(t *testing.T, name string) bool {
	early := true
	synctest.Test(t, func(t *testing.T) {
		m, _ := peerMech(t, name, unavailable, false)
		for range 20 {
			ctx, cancel := context.WithTimeout(t.Context(), 2500*time.Millisecond)
			start := time.Now()
			err := m.unary(ctx, &testgrpc.SimpleRequest{})
			cancel()
			if code := status.Code(err); code == codes.DeadlineExceeded || time.Since(start) >= 2500*time.Millisecond {
				early = false
			} else if code != codes.Unavailable {
				t.Errorf("%s: %v, want UNAVAILABLE or DEADLINE_EXCEEDED", name, err)
			}
		}
	})
	return early
}

// noDuplicatesAfterData opens a server stream whose first attempt sends r0
// and fails: a mechanism that replays it hands the caller r0 twice.
func noDuplicatesAfterData(t *testing.T, name string) bool {
	var got []string
	synctest.Test(t, func(t *testing.T) {
		m, _ := peerMech(t, name, func(n int) error {
			if n == 0 {
				return status.Error(codes.Unavailable, "after r0")
			}
			return nil
		}, true)
		st, err := m.serverStream(t.Context(), &testgrpc.StreamingOutputCallRequest{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for {
			r, err := st.Recv()
			if err != nil {
				break
			}
			got = append(got, string(r.GetPayload().GetBody()))
		}
	})
	seen := map[string]bool{}
	for _, r := range got {
		if seen[r] {
			return false
		}
		seen[r] = true
	}
	return true
}

// clientStreamsWork reports whether a client stream works through the
// mechanism at all.
func clientStreamsWork(t *testing.T, name string) bool {
	ok := false
	synctest.Test(t, func(t *testing.T) {
		m, _ := peerMech(t, name, func(int) error { return nil }, false)
		st, err := m.clientStream(t.Context())
		if err != nil {
			return
		}
		if err := st.Send(&testgrpc.StreamingInputCallRequest{}); err != nil {
			return
		}
		_, err = st.CloseAndRecv()
		ok = err == nil
	})
	return ok
}

// throttlesAStorm makes 10 waves of 100 concurrent calls, 1 s apart, to a
// server that is down for good, each call with a 60 s deadline, and reports
// whether the mechanism sent fewer than 1.5 attempts per call: a throttle
// cuts the storm short, where the policy alone would send 8 per call.
func throttlesAStorm(t *testing.T, name string) bool {
	const waves, calls = 10, 100
	var attempts int
	synctest.Test(t, func(t *testing.T) {
		m, s := peerMech(t, name, unavailable, false)
		var wg sync.WaitGroup
		for range waves {
			for range calls {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
					defer cancel()
					m.unary(ctx, &testgrpc.SimpleRequest{})
				})
			}
			time.Sleep(time.Second)
		}
		wg.Wait()
		attempts = s.Count()
	})
	return float64(attempts) < 1.5*waves*calls
}
