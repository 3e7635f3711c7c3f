package guard_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/guard"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// Clients that read pushback, against a server in an outage (every attempt
// fails with UNAVAILABLE at once), with five attempts per call. The guard's
// default options: it marks failures once a method's retries, those it has
// seen and those it expects, are at least 10 and more than 10% of its
// attempts (one client here: its share is the method's). So the first two
// calls make 5 attempts each (8 retries seen; each failure let through is
// expected to be retried until its retry comes, the last of each call's too,
// as the guard cannot know the client's maxAttempts: 2 expected), and every
// later call stops after its first attempt.
var (
	guardedAttempts   = []int{5, 5, 1, 1, 1, 1}
	unguardedAttempts = []int{5, 5, 5, 5, 5, 5}
)

// grpcRetry is grpc-go's built-in retry: a service config's retryPolicy.
const grpcRetry = `{"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}],
	"retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2,
		"retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]}}]}`

// fivePolicy is this library's Policy for the same five attempts.
func fivePolicy() grpcbackoff.Policy {
	p := grpcbackoff.DefaultPolicy()
	p.Initial, p.Max, p.Jitter, p.MaxAttempts = 100*time.Millisecond, time.Second, 0, 5
	return p
}

// outageServer starts a TestService whose every attempt fails with
// UNAVAILABLE, guarded by g if g is not nil.
func outageServer(t *testing.T, g *guard.Guard) *bufconntest.Server {
	var opts []grpc.ServerOption
	if g != nil {
		opts = g.ServerOptions()
	}
	return bufconntest.NewServer(t, bufconntest.Steps(bufconntest.Fail(status.Error(codes.Unavailable, "outage"))), opts...)
}

// callID returns the context of call i, which the server numbers the
// attempts of.
func callID(ctx context.Context, i int) context.Context {
	return metadata.AppendToOutgoingContext(ctx, bufconntest.StreamKey, fmt.Sprint(i))
}

// attemptsPerCall returns the number of attempts of calls 0 to n−1.
func attemptsPerCall(srv *bufconntest.Server, n int) []int {
	var got []int
	for i := range n {
		got = append(got, len(srv.Attempts(fmt.Sprint(i))))
	}
	return got
}

func TestGrpcGoRetryObeysGuard(t *testing.T) {
	for _, guarded := range []bool{false, true} {
		t.Run(fmt.Sprintf("guarded=%v", guarded), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var g *guard.Guard
				want := unguardedAttempts
				if guarded {
					g, want = newGuard(t, guard.Options{}), guardedAttempts
				}
				srv := outageServer(t, g)
				client := srv.Client(t, grpc.WithDefaultServiceConfig(grpcRetry))
				for i := range want {
					_, err := client.UnaryCall(callID(t.Context(), i), &testgrpc.SimpleRequest{})
					if status.Code(err) != codes.Unavailable {
						t.Fatalf("call %d: %v, want UNAVAILABLE", i, err)
					}
				}
				if got := attemptsPerCall(srv, len(want)); !slices.Equal(got, want) {
					t.Errorf("attempts per call = %v, want %v", got, want)
				}
			})
		})
	}
}

// TestLibraryObeysGuard checks that this library's unary calls and streams
// stop retrying at the guard's pushback with ReasonServerRefused, and that
// WithoutPushback makes unary calls ignore it (streams read it still).
func TestLibraryObeysGuard(t *testing.T) {
	refused, exhausted := grpcbackoff.ReasonServerRefused, grpcbackoff.ReasonExhausted
	for _, tc := range []struct {
		name       string
		stream     bool
		opts       []interceptor.Option
		want       []int
		wantReason []grpcbackoff.Reason
	}{
		{"unary", false, nil, guardedAttempts, []grpcbackoff.Reason{exhausted, exhausted, refused, refused, refused, refused}},
		{"stream", true, nil, guardedAttempts, []grpcbackoff.Reason{exhausted, exhausted, refused, refused, refused, refused}},
		{"unary WithoutPushback", false, []interceptor.Option{interceptor.WithoutPushback()}, unguardedAttempts, slices.Repeat([]grpcbackoff.Reason{exhausted}, 6)},
		{"stream WithoutPushback", true, []interceptor.Option{interceptor.WithoutPushback()}, guardedAttempts, []grpcbackoff.Reason{exhausted, exhausted, refused, refused, refused, refused}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := outageServer(t, newGuard(t, guard.Options{}))
				r, err := interceptor.New(fivePolicy(), append(tc.opts, interceptor.WithoutThrottle(), interceptor.WithSafety("/grpc.testing.TestService/", interceptor.Idempotent))...)
				if err != nil {
					t.Fatal(err)
				}
				client := srv.Client(t, r.DialOptions()...)
				for i, wantReason := range tc.wantReason {
					ctx := callID(t.Context(), i)
					if tc.stream {
						err = serverStream(ctx, client)
					} else {
						_, err = client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
					}
					var e *grpcbackoff.Error
					if !errors.As(err, &e) || e.Reason != wantReason || status.Code(err) != codes.Unavailable {
						t.Errorf("call %d: %v, want UNAVAILABLE with Reason %v", i, err, wantReason)
					}
				}
				if got := attemptsPerCall(srv, len(tc.want)); !slices.Equal(got, tc.want) {
					t.Errorf("attempts per call = %v, want %v", got, tc.want)
				}
			})
		})
	}
}

// serverStream makes a server-streaming call and reads it to its end.
func serverStream(ctx context.Context, client testgrpc.TestServiceClient) error {
	s, err := client.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
	if err != nil {
		return err
	}
	for {
		if _, err := s.Recv(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// TestExplainTellsServerFromBudget checks that Explain says what ends the
// retries of a call besides its Policy: the server's pushback (unless
// WithoutPushback) and the budget (unless WithoutThrottle).
func TestExplainTellsServerFromBudget(t *testing.T) {
	const m = "/grpc.testing.TestService/UnaryCall"
	for _, tc := range []struct {
		name             string
		opts             []interceptor.Option
		pushback, budget bool
		tail             string
	}{
		{"defaults", nil, true, true, "[the Retrier's Policy]; not idempotent: treated as a write, resent only when its request carries a request_id (AIP-155): neither idempotency_level nor google.api.http, and its name is no standard read (Get, List, BatchGet, Search)"},
		{"WithoutPushback", []interceptor.Option{interceptor.WithoutPushback()}, false, true,
			"; unary calls ignore the server's pushback, a retry guard's included (WithoutPushback)"},
		{"WithoutThrottle", []interceptor.Option{interceptor.WithoutThrottle()}, true, false, "; no retry budget (WithoutThrottle)"},
	} {
		r, err := interceptor.New(fivePolicy(), tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		d := r.Explain(m)
		if d.Pushback != tc.pushback || d.Budget != tc.budget || !strings.HasSuffix(d.String(), tc.tail) {
			t.Errorf("%s: Explain = %q (Pushback %v, Budget %v); want Pushback %v, Budget %v, ending %q",
				tc.name, d, d.Pushback, d.Budget, tc.pushback, tc.budget, tc.tail)
		}
	}
}
