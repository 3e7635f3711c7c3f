package interceptor_test

import (
	"context"
	"io"
	"slices"
	"strconv"
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

// wireCall is a call of the test service whose attempts the server sees:
// a unary call retried, a server stream retried, a hedged unary call.
type wireCall struct {
	name     string
	opts     []interceptor.Option
	attempts int
	run      func(ctx context.Context, c testgrpc.TestServiceClient, opts ...grpc.CallOption) error
}

// wireCalls fail twice with UNAVAILABLE (the hedged one: its first two
// attempts, the third wins), so that each makes 3 attempts.
var wireCalls = []wireCall{
	{"unary", nil, 3, func(ctx context.Context, c testgrpc.TestServiceClient, opts ...grpc.CallOption) error {
		_, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, opts...)
		return err
	}},
	{"server stream", nil, 3, func(ctx context.Context, c testgrpc.TestServiceClient, opts ...grpc.CallOption) error {
		st, err := c.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{}, opts...)
		if err != nil {
			return err
		}
		for {
			if _, err := st.Recv(); err != nil {
				if err == io.EOF {
					return nil
				}
				return err
			}
		}
	}},
	{"hedged", []interceptor.Option{interceptor.WithHedging("/grpc.testing.TestService/UnaryCall", grpcbackoff.Hedging{MaxAttempts: 3, Delay: 100 * time.Millisecond})}, 3,
		func(ctx context.Context, c testgrpc.TestServiceClient, opts ...grpc.CallOption) error {
			_, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, opts...)
			return err
		}},
}

// wireAttempts makes call w with the call options opts on ctx through a
// Retrier of the default Policy, against a real grpc-go server over
// bufconn, and returns the request metadata of each attempt, in order.
func wireAttempts(t *testing.T, w wireCall, ctx context.Context, opts ...grpc.CallOption) []metadata.MD {
	t.Helper()
	srv := bufconntest.NewServer(t, func(_ string, n int) bufconntest.Step {
		if n < 2 {
			return bufconntest.Step{Before: func(ctx context.Context) error {
				if w.name == "hedged" {
					return bufconntest.Pause(ctx, time.Hour) // outlived by the third, which wins
				}
				return status.Error(codes.Unavailable, "down")
			}}
		}
		return bufconntest.Succeed(1)
	})
	r, err := interceptor.New(grpcbackoff.DefaultPolicy(), append(w.opts, testService)...)
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Client(t, r.DialOptions()...)
	ctx = metadata.AppendToOutgoingContext(ctx, bufconntest.StreamKey, w.name)
	if err := w.run(ctx, c, opts...); err != nil {
		t.Fatalf("%s: %v", w.name, err)
	}
	synctest.Wait()
	var mds []metadata.MD
	for _, a := range srv.Attempts(w.name) {
		mds = append(mds, a.MD)
	}
	if len(mds) != w.attempts {
		t.Fatalf("%s: the server saw %d attempts, want %d", w.name, len(mds), w.attempts)
	}
	return mds
}

// TestCriticalityOnTheWire: Critical and Sheddable say so on every attempt
// of a call, its first, its retries and its hedges, in
// grpcbackoff.CriticalityKey: CRITICAL_PLUS and SHEDDABLE, once; a value the
// caller's metadata has for the key is kept, alone; a call with neither
// sends no key.
func TestCriticalityOnTheWire(t *testing.T) {
	for _, w := range wireCalls {
		for _, c := range []struct {
			name   string
			opts   []grpc.CallOption
			caller string // the caller's own value, if any
			want   []string
		}{
			{"no option", nil, "", nil},
			{"Critical", opt(interceptor.Critical()), "", []string{grpcbackoff.CriticalityCriticalPlus}},
			{"Sheddable", opt(interceptor.Sheddable()), "", []string{grpcbackoff.CriticalitySheddable}},
			{"Critical then Sheddable", opt(interceptor.Critical(), interceptor.Sheddable()), "", []string{grpcbackoff.CriticalitySheddable}},
			{"Critical, the caller's SHEDDABLE_PLUS", opt(interceptor.Critical()), grpcbackoff.CriticalitySheddablePlus, []string{grpcbackoff.CriticalitySheddablePlus}},
			{"no option, the caller's CRITICAL", nil, grpcbackoff.CriticalityCritical, []string{grpcbackoff.CriticalityCritical}},
		} {
			t.Run(w.name+"/"+c.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					ctx := t.Context()
					if c.caller != "" {
						ctx = metadata.AppendToOutgoingContext(ctx, "X-Request-Criticality", c.caller)
					}
					for i, md := range wireAttempts(t, w, ctx, c.opts...) {
						if got := md.Get(grpcbackoff.CriticalityKey); !slices.Equal(got, c.want) {
							t.Errorf("attempt %d: %s = %q, want %q", i+1, grpcbackoff.CriticalityKey, got, c.want)
						}
					}
				})
			})
		}
	}
}

// TestPreviousAttemptsSet: a caller whose outgoing metadata carries
// grpc-previous-rpc-attempts (a mid-tier that forwards its incoming
// metadata: 4 attempts before it) sends it on a call's first attempt as it
// is, as grpc-go does, and on each retried attempt the call's own count
// in its place, alone: 1, then 2 (before issue 44 the count was appended:
// ["4", "1"], and a server reads the first).
func TestPreviousAttemptsSet(t *testing.T) {
	for _, w := range wireCalls {
		t.Run(w.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := metadata.NewOutgoingContext(t.Context(), metadata.Pairs(interceptor.PreviousAttemptsKey, "4", "x-caller", "kept"))
				for i, md := range wireAttempts(t, w, ctx) {
					want := []string{"4"}
					if i > 0 {
						want = []string{strconv.Itoa(i)}
					}
					if got := md.Get(interceptor.PreviousAttemptsKey); !slices.Equal(got, want) {
						t.Errorf("attempt %d: %s = %q, want %q", i+1, interceptor.PreviousAttemptsKey, got, want)
					}
					if got := md.Get("x-caller"); !slices.Equal(got, []string{"kept"}) {
						t.Errorf("attempt %d: the caller's metadata x-caller = %q, want [kept]", i+1, got)
					}
				}
			})
		})
	}
}

// TestCriticalityAllocatesNothingWithout: a successful call without
// Critical or Sheddable allocates nothing, its outgoing metadata read or
// not; one with Critical allocates only to add the key (grpc-go's
// metadata.AppendToOutgoingContext: 5 today).
func TestCriticalityAllocatesNothingWithout(t *testing.T) {
	invoke := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	ic := interceptor.Unary(grpcbackoff.DefaultPolicy())
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-caller", "a")
	if n := testing.AllocsPerRun(1000, func() { ic(ctx, "/pkg.Svc/Get", nil, nil, nil, invoke) }); n != 0 {
		t.Errorf("a successful call with outgoing metadata allocates %v times, want 0", n)
	}
	if n := testing.AllocsPerRun(1000, func() { ic(ctx, "/pkg.Svc/Get", nil, nil, nil, invoke, interceptor.Critical()) }); n == 0 || n > 5 {
		t.Errorf("a successful Critical call allocates %v times, want 1 to 5 (the key added to its metadata)", n)
	}
}
