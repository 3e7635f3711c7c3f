package grpcbackoff_test

// End to end over bufconn: the Memorystore recipe carried out by
// interceptor.DialOptions, the common set-up, against a real grpc-go server
// (grpc's own interop TestService) inside a synctest bubble, so every delay
// is exact and free and a goroutine left behind fails the test.
//
// The same scenarios run against the real Cloud Redis client and its fake
// in the redistest module (client_test.go). They live there because this
// package's tests are downloaded by every module that imports the library:
// the Cloud Redis stubs would add 47 MB of google.golang.org/genproto to each.

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// flaky is a TestService whose calls fail with code while down, or for the
// next failures calls, and records when each attempt arrived.
type flaky struct {
	testgrpc.UnimplementedTestServiceServer

	mu       sync.Mutex
	down     bool
	failures int
	code     codes.Code
	attempts []time.Time
}

func (f *flaky) attempt() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts = append(f.attempts, time.Now())
	if f.down || f.failures > 0 {
		f.failures--
		return status.Error(f.code, "scripted failure")
	}
	return nil
}

func (f *flaky) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if err := f.attempt(); err != nil {
		return nil, err
	}
	return &testgrpc.SimpleResponse{}, nil
}

func (f *flaky) StreamingOutputCall(_ *testgrpc.StreamingOutputCallRequest, ss grpc.ServerStreamingServer[testgrpc.StreamingOutputCallResponse]) error {
	if err := f.attempt(); err != nil {
		return err
	}
	return ss.Send(&testgrpc.StreamingOutputCallResponse{})
}

// gaps returns the times between the attempts the server saw.
func (f *flaky) gaps() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	var g []time.Duration
	for i := 1; i < len(f.attempts); i++ {
		g = append(g, f.attempts[i].Sub(f.attempts[i-1]))
	}
	return g
}

// recipe is DefaultPolicy without jitter, so that every delay is exact.
func recipe() grpcbackoff.Policy {
	p := grpcbackoff.DefaultPolicy()
	p.Jitter = 0
	return p
}

// newFlaky serves a flaky server over bufconn and returns it with a client
// set up as the README says, closed when the test ends.
func newFlaky(t *testing.T, p grpcbackoff.Policy) (*flaky, testgrpc.TestServiceClient) {
	t.Helper()
	f := &flaky{code: codes.Unavailable}
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, f)
	lis := bufconntest.Listen()
	bufconntest.Serve(t, srv, lis)
	cc := bufconntest.Dial(t, lis.DialContext, interceptor.DialOptions(p)...)
	return f, testgrpc.NewTestServiceClient(cc)
}

func seconds(s ...float64) []time.Duration {
	d := make([]time.Duration, len(s))
	for i, v := range s {
		d[i] = time.Duration(v * float64(time.Second))
	}
	return d
}

func TestRecipeOverBufconn(t *testing.T) {
	cases := []struct {
		name     string
		failures int
		code     codes.Code
		wantCode codes.Code
		wantGaps []time.Duration
	}{
		{"no failure", 0, codes.Unavailable, codes.OK, nil},
		{"three UNAVAILABLE", 3, codes.Unavailable, codes.OK, seconds(1, 2, 4)},
		{"RESOURCE_EXHAUSTED", 2, codes.ResourceExhausted, codes.OK, seconds(1, 2)},
		{"seven: the cap, then at the cap", 7, codes.Unavailable, codes.OK, seconds(1, 2, 4, 8, 16, 32, 32)},
		{"NOT_FOUND is not retried", 1, codes.NotFound, codes.NotFound, nil},
		{"INTERNAL is not retried", 1, codes.Internal, codes.Internal, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f, c := newFlaky(t, recipe())
				f.failures, f.code = tc.failures, tc.code
				_, err := c.UnaryCall(t.Context(), &testgrpc.SimpleRequest{})
				if status.Code(err) != tc.wantCode {
					t.Errorf("UnaryCall: code %v (%v), want %v", status.Code(err), err, tc.wantCode)
				}
				if got := f.gaps(); !slices.Equal(got, tc.wantGaps) {
					t.Errorf("gaps between attempts = %v, want %v", got, tc.wantGaps)
				}
			})
		})
	}
}

func TestRecipeGivesUpAfterMaxAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, c := newFlaky(t, recipe())
		f.down = true
		start := time.Now()
		_, err := c.UnaryCall(t.Context(), &testgrpc.SimpleRequest{})
		// 1+2+4+8+16+32+32 s between 8 attempts.
		if got := time.Since(start); got != 95*time.Second {
			t.Errorf("gave up after %v, want 95s", got)
		}
		var e *grpcbackoff.Error
		if !errors.As(err, &e) || e.Attempts != 8 || e.Reason != grpcbackoff.ReasonExhausted || status.Code(err) != codes.Unavailable {
			t.Errorf("UnaryCall = %v, want UNAVAILABLE after 8 attempts, exhausted", err)
		}
	})
}

func TestRecipeNeverSleepsPastTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, c := newFlaky(t, recipe())
		f.down = true
		// Attempts at 0, 1, 3 and 7 s; the next wait (8 s) would end past
		// the deadline, so the call returns at 7 s with the last real error.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		start := time.Now()
		_, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		var e *grpcbackoff.Error
		if got := time.Since(start); got != 7*time.Second {
			t.Errorf("returned after %v, want 7s", got)
		}
		if !errors.As(err, &e) || e.Attempts != 4 || e.Reason != grpcbackoff.ReasonDeadline || status.Code(err) != codes.Unavailable {
			t.Errorf("UnaryCall = %v, want UNAVAILABLE after 4 attempts, Reason Deadline", err)
		}
	})
}

func TestRecipeCancelEndsTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, c := newFlaky(t, recipe())
		f.down = true
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(2500*time.Millisecond, cancel)
		start := time.Now()
		_, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		if got := time.Since(start); got != 2500*time.Millisecond || status.Code(err) != codes.Canceled {
			t.Errorf("UnaryCall = %v after %v, want CANCELED at 2.5s", err, got)
		}
	})
}

func TestRecipeRetriesServerStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, c := newFlaky(t, recipe())
		f.failures = 2
		s, err := c.StreamingOutputCall(t.Context(), &testgrpc.StreamingOutputCallRequest{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			_, err = s.Recv()
			if err != nil {
				break
			}
			n++
		}
		if err != io.EOF || n != 1 {
			t.Errorf("stream ended with %v after %d messages, want io.EOF after 1", err, n)
		}
		if got, want := f.gaps(), seconds(1, 2); !slices.Equal(got, want) {
			t.Errorf("gaps between attempts = %v, want %v", got, want)
		}
	})
}
