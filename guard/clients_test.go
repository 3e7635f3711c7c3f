package guard_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
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
	"github.com/platformkit/grpcbackoff/guard"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// grpcRetry is grpc-go's built-in retry: a service config's retryPolicy.
const grpcRetry = `{"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}],
	"retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2,
		"retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]}}]}`

// fivePolicy is this library's Policy for the same five attempts, without
// jitter.
func fivePolicy() grpcbackoff.Policy {
	p := grpcbackoff.DefaultPolicy()
	p.Initial, p.Max, p.Jitter, p.MaxAttempts = 100*time.Millisecond, time.Second, 0, 5
	return p
}

// callID returns the context of call id, which the server numbers the
// attempts of.
func callID(ctx context.Context, id string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, bufconntest.StreamKey, id)
}

// marks records what the guard told OnMark, by call and attempt.
type marks struct {
	mu  sync.Mutex
	m   map[string]guard.Mark // "id/n": attempt n (from 0) of call id
	all []guard.Mark
}

func (ms *marks) onMark(ctx context.Context, m guard.Mark) {
	md, _ := metadata.FromIncomingContext(ctx)
	prev := 0
	if v := md.Get(interceptor.PreviousAttemptsKey); len(v) > 0 {
		prev, _ = strconv.Atoi(v[0])
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.m == nil {
		ms.m = map[string]guard.Mark{}
	}
	ms.m[fmt.Sprintf("%s/%d", strings.Join(md.Get(bufconntest.StreamKey), ""), prev)] = m
	ms.all = append(ms.all, m)
}

func (ms *marks) get(id string, n int) (guard.Mark, bool) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	m, ok := ms.m[fmt.Sprintf("%s/%d", id, n)]
	return m, ok
}

// outage starts a guarded TestService whose calls named "down/…" fail
// with UNAVAILABLE and others succeed, and warms it: 100 calls over 10 s
// from a client without retries, the traffic the guard's share is of.
func outage(t *testing.T, ms *marks) *bufconntest.Server {
	g := newGuard(t, guard.Options{OnMark: ms.onMark})
	srv := bufconntest.NewServer(t, func(id string, _ int) bufconntest.Step {
		if strings.HasPrefix(id, "down/") {
			return bufconntest.Fail(status.Error(codes.Unavailable, "outage"))
		}
		return bufconntest.Succeed(1)
	}, g.ServerOptions()...)
	plain := srv.Client(t)
	for i := range 100 {
		if _, err := plain.UnaryCall(callID(t.Context(), fmt.Sprint("warm/", i)), &testgrpc.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return srv
}

// checkWaits checks the attempts of calls "down/0" to "down/n−1" against
// what the guard asked: after a failure paced, the next attempt comes
// after wait(backoff, pushback) (its backoff being the Policy's for that
// retry), after a failure refused none comes, and a call ends at its
// attempts or its deadline. It returns the failures refused before a
// call's 5th attempt (one refused at its last attempt is out of attempts
// anyway), those paced, and the attempts.
func checkWaits(t *testing.T, srv *bufconntest.Server, ms *marks, n int, obeys bool, wait func(backoff, pushback time.Duration) time.Duration) (refused, paced, attempts int) {
	t.Helper()
	for c := range n {
		id := fmt.Sprint("down/", c)
		as := srv.Attempts(id)
		attempts += len(as)
		for k := range as {
			m, marked := ms.get(id, k)
			switch {
			case marked && m.Refused:
				if k < 4 {
					refused++
				}
				if obeys && k != len(as)-1 {
					t.Errorf("%s: attempt %d refused, yet %d attempts came", id, k, len(as))
				}
			case marked && k+1 < len(as):
				paced++
				backoff := min(100*time.Millisecond<<k, time.Second)
				ms := m.Wait.Round(time.Millisecond)
				if ms < m.Wait {
					ms += time.Millisecond
				}
				if gap, want := as[k+1].At.Sub(as[k].At), wait(backoff, ms); gap != want {
					t.Errorf("%s: attempt %d paced %v; the next came %v later, want %v", id, k, m.Wait, gap, want)
				}
			}
		}
	}
	return refused, paced, attempts
}

// calls makes n calls "down/0" to "down/n−1" at once, each with a 5 s
// deadline, and returns their errors, each UNAVAILABLE or DEADLINE_EXCEEDED.
func calls(t *testing.T, n int, call func(ctx context.Context) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for c := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(callID(t.Context(), fmt.Sprint("down/", c)), 5*time.Second)
			defer cancel()
			errs[c] = call(ctx)
		})
	}
	wg.Wait()
	for c, err := range errs {
		if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
			t.Fatalf("call %d: %v", c, err)
		}
	}
	return errs
}

// TestGrpcGoRetryWaitsThePushback: grpc-go's built-in retry, in an outage
// of a guarded server, waits exactly each pushback the guard paces a
// failure with, and stops at −1.
func TestGrpcGoRetryWaitsThePushback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ms marks
		srv := outage(t, &ms)
		client := srv.Client(t, grpc.WithDefaultServiceConfig(grpcRetry))
		calls(t, 12, func(ctx context.Context) error {
			_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
			return err
		})
		refused, paced, attempts := checkWaits(t, srv, &ms, 12, true, func(_, pushback time.Duration) time.Duration { return pushback })
		t.Logf("%d attempts, %d paced, %d refused", attempts, paced, refused)
		if paced < 3 || refused < 3 {
			t.Errorf("%d failures paced, %d refused; want the guard to do both", paced, refused)
		}
	})
}

// TestLibraryWaitsThePushback: this library's unary calls and streams wait
// at least each pushback, their own backoff if longer, and stop at −1 with
// ReasonServerRefused; WithoutPushback makes unary calls ignore both.
func TestLibraryWaitsThePushback(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream bool
		opts   []interceptor.Option
		obeys  bool
	}{
		{"unary", false, nil, true},
		{"stream", true, nil, true},
		{"unary WithoutPushback", false, []interceptor.Option{interceptor.WithoutPushback()}, false},
		{"stream WithoutPushback", true, []interceptor.Option{interceptor.WithoutPushback()}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var ms marks
				srv := outage(t, &ms)
				r, err := interceptor.New(fivePolicy(), append(tc.opts, interceptor.WithoutThrottle(), interceptor.WithSafety("/grpc.testing.TestService/", interceptor.Idempotent))...)
				if err != nil {
					t.Fatal(err)
				}
				client := srv.Client(t, r.DialOptions()...)
				serverRefused := 0
				for _, err := range calls(t, 12, func(ctx context.Context) error {
					if tc.stream {
						return serverStream(ctx, client)
					}
					_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
					return err
				}) {
					var e *grpcbackoff.Error
					if errors.As(err, &e) && e.Reason == grpcbackoff.ReasonServerRefused {
						serverRefused++
					}
				}
				wait := func(backoff, pushback time.Duration) time.Duration { return max(backoff, pushback) }
				if !tc.obeys {
					wait = func(backoff, _ time.Duration) time.Duration { return backoff }
				}
				refused, paced, attempts := checkWaits(t, srv, &ms, 12, tc.obeys, wait)
				t.Logf("%d attempts, %d paced, %d refused, %d calls ended ReasonServerRefused", attempts, paced, refused, serverRefused)
				if paced < 3 || tc.obeys && serverRefused != refused || !tc.obeys && serverRefused != 0 {
					t.Errorf("%d failures paced, %d refused, %d calls ended ReasonServerRefused; want some paced, and the calls to stop at −1: %v",
						paced, refused, serverRefused, tc.obeys)
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

// TestPatientCallsServed is the patient callers: while 20 clients
// make 100 calls a second with 2 s deadlines, a 5 s outage begins, and 8
// calls with 30 s deadlines start in it, of grpc-go's built-in retry (5
// attempts) and of this library's (the same five). The guard paces their
// retries past the outage, where it refuses the calls that cannot wait:
// all 8 are served once it ends.
func TestPatientCallsServed(t *testing.T) {
	if raceEnabled {
		t.Skip("a load's statistics over thousands of calls: run without -race (the README's test command)")
	}
	for _, lib := range []bool{false, true} {
		t.Run(fmt.Sprint("library=", lib), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := newGuard(t, guard.Options{})
				var down atomic.Bool
				srv := bufconntest.NewServer(t, func(string, int) bufconntest.Step {
					return bufconntest.Step{Before: func(context.Context) error {
						if down.Load() {
							return status.Error(codes.Unavailable, "outage")
						}
						return nil
					}, Recv: bufconntest.UntilHalfClose, Send: 1}
				}, g.ServerOptions()...)
				opts := []grpc.DialOption{grpc.WithDefaultServiceConfig(grpcRetry)}
				if lib {
					r, err := interceptor.New(fivePolicy(), interceptor.WithoutThrottle(), interceptor.WithSafety("/grpc.testing.TestService/", interceptor.Idempotent))
					if err != nil {
						t.Fatal(err)
					}
					opts = r.DialOptions()
				}
				var background sync.WaitGroup
				for c := range 20 {
					client := srv.Client(t, opts...)
					background.Go(func() {
						for i := range 150 { // 15 s, a call every 200 ms from each
							time.Sleep(time.Duration(190+c) * time.Millisecond)
							ctx, cancel := context.WithTimeout(callID(t.Context(), fmt.Sprintf("bg/%d/%d", c, i)), 2*time.Second)
							client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
							cancel()
						}
					})
				}
				time.Sleep(5 * time.Second)
				down.Store(true)
				time.AfterFunc(5*time.Second, func() { down.Store(false) })
				patient := srv.Client(t, opts...)
				errs := make([]error, 8)
				var wg sync.WaitGroup
				for i := range errs {
					wg.Go(func() {
						time.Sleep(time.Duration(500*(i+1)) * time.Millisecond)
						ctx, cancel := context.WithTimeout(callID(t.Context(), fmt.Sprint("patient/", i)), 30*time.Second)
						defer cancel()
						_, errs[i] = patient.UnaryCall(ctx, &testgrpc.SimpleRequest{})
					})
				}
				wg.Wait()
				background.Wait()
				for i, err := range errs {
					if err != nil {
						t.Errorf("patient call %d (%d attempts): %v", i, len(srv.Attempts(fmt.Sprint("patient/", i))), err)
					}
				}
				s := g.State("/grpc.testing.TestService/UnaryCall")
				t.Logf("State %+v", s)
				if s.Refused == 0 || s.Paced == 0 {
					t.Errorf("State %+v: want failures paced and refused", s)
				}
			})
		})
	}
}

// TestRegistrar: a service registered through Registrar is guarded as
// through ServerOptions: grpc-go's retry waits the pushback the guard paces
// its failures with, unary calls and streams.
func TestRegistrar(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ms marks
		g := newGuard(t, guard.Options{OnMark: ms.onMark})
		lis := bufconntest.Listen()
		srv := grpc.NewServer()
		testgrpc.RegisterTestServiceServer(g.Registrar(srv), downService{})
		bufconntest.Serve(t, srv, lis)
		client := testgrpc.NewTestServiceClient(bufconntest.Dial(t, lis.DialContext, grpc.WithDefaultServiceConfig(grpcRetry)))
		for range 100 { // warm: 10 calls a second that fail once, served by their retry
			client.UnaryCall(t.Context(), &testgrpc.SimpleRequest{})
			time.Sleep(100 * time.Millisecond)
		}
		calls(t, 12, func(ctx context.Context) error {
			_, err := client.UnaryCall(metadata.AppendToOutgoingContext(ctx, "down", "1"), &testgrpc.SimpleRequest{})
			return err
		})
		calls(t, 4, func(ctx context.Context) error {
			return serverStream(metadata.AppendToOutgoingContext(ctx, "down", "1"), client)
		})
		ms.mu.Lock()
		defer ms.mu.Unlock()
		var paced, streams int
		for _, m := range ms.all {
			if !m.Refused {
				paced++
			}
			if m.Method == "/grpc.testing.TestService/StreamingOutputCall" {
				streams++
			}
		}
		if paced < 3 || streams == 0 {
			t.Errorf("%d failures paced, %d of streams marked; want some of both", paced, streams)
		}
		if s := g.State("/grpc.testing.TestService/UnaryCall"); s.FirstTries == 0 || s.Refunded == 0 {
			t.Errorf("State %+v: want the warm calls counted, their retries refunded", s)
		}
	})
}

// downService fails a call whose metadata says "down", and the first
// attempt of any other, with UNAVAILABLE.
type downService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (downService) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get("down")) > 0 || len(md.Get(interceptor.PreviousAttemptsKey)) == 0 {
		return nil, status.Error(codes.Unavailable, "down")
	}
	return &testgrpc.SimpleResponse{}, nil
}

func (downService) StreamingOutputCall(*testgrpc.StreamingOutputCallRequest, testgrpc.TestService_StreamingOutputCallServer) error {
	return status.Error(codes.Unavailable, "down")
}
