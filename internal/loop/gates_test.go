package loop_test

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
	"github.com/platformkit/grpcbackoff/internal/gate"
	"github.com/platformkit/grpcbackoff/internal/loop"
)

// The seam of the gates: a gate of the tests' own (breaker_test.go), given
// to every target through the same interface as the built-in ones, is
// obeyed by the unary, stream and hedging interceptors alike.

// withBreaker makes the Retriers built during the test give every target
// b, after its built-in gates.
func withBreaker(t *testing.T, b *breaker) {
	restore := loop.SetExtraGates(func(string) []gate.Gate { return []gate.Gate{b} })
	t.Cleanup(restore)
}

// shortPolicy retries UNAVAILABLE 5 times, 10 ms apart, without jitter.
func shortPolicy() grpcbackoff.Policy {
	p := grpcbackoff.DefaultPolicy()
	p.Initial, p.Multiplier, p.Jitter, p.MaxAttempts = 10*time.Millisecond, 1, 0, 5
	return p
}

// retries records the Retry events of a Retrier.
type retries struct {
	mu     sync.Mutex
	events []interceptor.Retry
}

func (r *retries) OnRetry(_ context.Context, x interceptor.Retry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, x)
}

func (*retries) OnEnd(context.Context, interceptor.End) {}

func (r *retries) throttled() (n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.Throttled {
			n++
		}
	}
	return n
}

var errDown = status.Error(codes.Unavailable, "down")

// testService states the test service idempotent: its descriptor says
// nothing, and a method nothing marks is treated as a write.
var testService = interceptor.WithSafety("/grpc.testing.TestService/", interceptor.Idempotent)

// named returns ctx naming its call id for the Server.
func named(ctx context.Context, id string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, bufconntest.StreamKey, id)
}

func checkThrottled(t *testing.T, what string, err error, attempts int) {
	t.Helper()
	var e *grpcbackoff.Error
	if !errors.As(err, &e) || e.Reason != grpcbackoff.ReasonThrottled || e.Attempts != attempts || status.Code(err) != codes.Unavailable {
		t.Errorf("%s: err = %v, want UNAVAILABLE after %d attempts, ReasonThrottled", what, err, attempts)
	}
}

// TestGateRefusesUnaryRetries: the breaker opens after 3 failures. The
// first call retries twice, and its third failure's retry is refused; the
// next call makes its one attempt, whose retry is refused. The loop told
// the breaker of every call, retry and attempt.
func TestGateRefusesUnaryRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &breaker{limit: 3}
		withBreaker(t, b)
		rec := &retries{}
		s := bufconntest.NewServer(t, bufconntest.Steps(bufconntest.Fail(errDown)))
		c := s.Client(t, interceptor.DialOptions(shortPolicy(), testService, interceptor.WithObserver(rec))...)

		_, err := c.UnaryCall(named(t.Context(), "a"), &testgrpc.SimpleRequest{})
		checkThrottled(t, "call a", err, 3)
		_, err = c.UnaryCall(named(t.Context(), "b"), &testgrpc.SimpleRequest{})
		checkThrottled(t, "call b", err, 1)
		if got := len(s.Attempts("a")) + len(s.Attempts("b")); got != 4 {
			t.Errorf("the server saw %d attempts, want 4 (3, then 1)", got)
		}
		if got := rec.throttled(); got != 2 {
			t.Errorf("%d throttled Retry events, want 2", got)
		}
		if a, r, e := b.admitted.Load(), b.reserved.Load(), b.retriesEnded.Load(); a != 2 || r != 4 || e != 2 {
			t.Errorf("the breaker admitted %d calls, reserved %d retries, heard of %d retries' ends; want 2, 4 (2 refused), 2", a, r, e)
		}
	})
}

// TestGateRefusesStreamRetries: the same breaker, for a server stream
// whose attempts fail before any response.
func TestGateRefusesStreamRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &breaker{limit: 3}
		withBreaker(t, b)
		s := bufconntest.NewServer(t, bufconntest.Steps(bufconntest.Fail(errDown)))
		c := s.Client(t, interceptor.DialOptions(shortPolicy(), testService)...)
		for _, call := range []struct {
			id       string
			attempts int
		}{{"a", 3}, {"b", 1}} {
			st, err := c.StreamingOutputCall(named(t.Context(), call.id), &testgrpc.StreamingOutputCallRequest{})
			if err == nil {
				_, err = st.Recv()
			}
			if err == io.EOF {
				t.Fatalf("call %s succeeded", call.id)
			}
			checkThrottled(t, "call "+call.id, err, call.attempts)
			if got := len(s.Attempts(call.id)); got != call.attempts {
				t.Errorf("call %s: the server saw %d attempts, want %d", call.id, got, call.attempts)
			}
		}
	})
}

// TestGateRefusesHedges: once the breaker is open (a call of another
// method failed three times), a hedged call sends no hedge: its one
// attempt, slow, answers. With the breaker closed, the same call sends its
// hedge.
func TestGateRefusesHedges(t *testing.T) {
	const hedged = "/grpc.testing.TestService/UnaryCall"
	for _, tc := range []struct {
		name     string
		limit    int64
		attempts int
	}{{"open", 3, 1}, {"closed", 100, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := &breaker{limit: tc.limit}
				withBreaker(t, b)
				rec := &retries{}
				s := bufconntest.NewServer(t, func(id string, n int) bufconntest.Step {
					if id == "slow" {
						return bufconntest.Step{Pause: 50 * time.Millisecond}
					}
					return bufconntest.Fail(errDown)
				})
				p := shortPolicy()
				p.MaxAttempts = 3
				cc := s.Conn(t, interceptor.DialOptions(p, testService, interceptor.WithObserver(rec),
					interceptor.WithHedging(hedged, grpcbackoff.Hedging{MaxAttempts: 2, Delay: 10 * time.Millisecond}))...)
				err := cc.Invoke(named(t.Context(), "fail"), "/pkg.Svc/Get", &testgrpc.Empty{}, &testgrpc.Empty{})
				if status.Code(err) != codes.Unavailable {
					t.Fatalf("the failing call: err = %v, want UNAVAILABLE", err)
				}
				if _, err := testgrpc.NewTestServiceClient(cc).UnaryCall(named(t.Context(), "slow"), &testgrpc.SimpleRequest{}); err != nil {
					t.Fatalf("the hedged call: err = %v, want nil", err)
				}
				if got := len(s.Attempts("slow")); got != tc.attempts {
					t.Errorf("the hedged call made %d attempts, want %d", got, tc.attempts)
				}
				if got := b.hedges.Load(); got != 1 {
					t.Errorf("the breaker was asked to pay for %d hedges, want 1", got)
				}
			})
		})
	}
}
