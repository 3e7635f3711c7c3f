package guard_test

import (
	"context"
	"fmt"
	"maps"
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

	"github.com/platformkit/grpcbackoff/guard"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// TestFloodOfMethodNames is red team round 6's gateway: behind an
// unknown-service handler, a flood of 5 000 method names, each called
// once with a forged retry that fails; then a registered method's only
// call fails 4 times and is served at its 5th attempt, through grpc-go's
// built-in retry. The flood never shares the method's counts: its call is
// never refused (a quiet method keeps its retries, MinRetries), and the
// table keeps at most 1 000 names, the idlest given up.
func TestFloodOfMethodNames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGuard(t, guard.Options{})
		srv := bufconntest.NewServer(t, func(id string, n int) bufconntest.Step {
			if id == "flood" || n < 4 {
				return bufconntest.Fail(status.Error(codes.Unavailable, "down"))
			}
			return bufconntest.Succeed(1)
		}, g.ServerOptions()...)
		conn := srv.Conn(t)
		for i := range 5000 {
			ctx := metadata.AppendToOutgoingContext(t.Context(), bufconntest.StreamKey, "flood", interceptor.PreviousAttemptsKey, "3")
			err := conn.Invoke(ctx, fmt.Sprintf("/flood.Service%d/Method", i), &testgrpc.SimpleRequest{}, &testgrpc.SimpleResponse{})
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("flood call %d: %v", i, err)
			}
			time.Sleep(time.Millisecond)
		}
		client := srv.Client(t, grpc.WithDefaultServiceConfig(grpcRetry))
		if _, err := client.UnaryCall(callID(t.Context(), "only"), &testgrpc.SimpleRequest{}); err != nil {
			t.Errorf("the registered method's only call: %v after %d attempts", err, len(srv.Attempts("only")))
		}
		kept := 0
		for i := range 5000 {
			if g.State(fmt.Sprintf("/flood.Service%d/Method", i)).Retries > 0 {
				kept++
			}
		}
		if kept == 0 || kept > 1000 {
			t.Errorf("%d flood names counted, want some and at most 1000", kept)
		}
	})
}

// TestGatewayPairs: 5 000 clients of one method (a gateway's), each with
// its own connection, and 50 of them noisy (retrying 10 times a second,
// ignoring pushback), past the 4 096 cells of a row: an honest client that
// fails once keeps its retry, where one table with a shared count past
// 4 096 pairs refused most. It is refused only if both its cells hold a
// noisy client, (50/4096)² ≈ 0.015% of the time: at most 5 of the 950
// failures (0.5%) are allowed, against 0.14 expected.
func TestGatewayPairs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGuard(t, guard.Options{})
		addr := func(i int) string { return fmt.Sprintf("10.%d.%d.%d:%d", i/65536, i/256%256, i%256, 10000+i%50000) }
		noisy := func(i int) bool { return i%100 == 0 }
		var refusedHonest, honestFailures, noisyRefused int
		for round := range 10 { // 10 s: each client calls once a second
			for i := range 5000 {
				switch {
				case noisy(i):
					for k := range 10 {
						if slices.Equal(attempt(t, g, addr(i), round*10+k+1, errUnavailable), stop) {
							noisyRefused++
						}
					}
				case (i+round)%50 == 0: // fails once in 50 calls, then is served
					honestFailures++
					if slices.Equal(attempt(t, g, addr(i), 0, errUnavailable), stop) {
						refusedHonest++
					}
					attempt(t, g, addr(i), 1, nil)
				default:
					attempt(t, g, addr(i), 0, nil)
				}
			}
			time.Sleep(time.Second)
		}
		t.Logf("honest failures refused: %d of %d; noisy failures refused: %d of 5000", refusedHonest, honestFailures, noisyRefused)
		if refusedHonest > 5 {
			t.Errorf("%d of %d honest clients' single failures refused, want at most 5", refusedHonest, honestFailures)
		}
		if noisyRefused < 4000 {
			t.Errorf("%d of the noisy clients' 5000 failures refused, want most", noisyRefused)
		}
	})
}

// TestUnknownServiceIsNotRegistered: OnMark tells a registered method from
// one served by an unknown-service handler.
func TestUnknownServiceIsNotRegistered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		registered := map[string]bool{}
		g := newGuard(t, guard.Options{MinRetries: 1, OnMark: func(_ context.Context, m guard.Mark) { registered[m.Method] = m.Registered }})
		srv := bufconntest.NewServer(t, bufconntest.Steps(bufconntest.Fail(status.Error(codes.Unavailable, "down"))), g.ServerOptions()...)
		conn := srv.Conn(t)
		for range 3 {
			conn.Invoke(t.Context(), "/grpc.testing.TestService/UnaryCall", &testgrpc.SimpleRequest{}, &testgrpc.SimpleResponse{})
			conn.Invoke(t.Context(), "/other.Service/Call", &testgrpc.SimpleRequest{}, &testgrpc.SimpleResponse{})
		}
		if want := map[string]bool{"/grpc.testing.TestService/UnaryCall": true, "/other.Service/Call": false}; !maps.Equal(registered, want) {
			t.Errorf("marks' Registered = %v, want %v", registered, want)
		}
	})
}

// TestLongMethodNamesCountedApart: the table keeps at most 1 KiB of a name
// (guard.doc: a longer one is counted by its SHA-256 digest), yet every
// name is counted apart, State exact for each: a name of 1 KiB and names
// past it that share its first 1 KiB, or all but their last byte. A mark
// of a long name gives its first 1 KiB.
func TestLongMethodNamesCountedApart(t *testing.T) {
	var marked []string
	g := newGuard(t, guard.Options{MinRetries: 1, OnMark: func(_ context.Context, m guard.Mark) { marked = append(marked, m.Method) }})
	prefix := "/flood.S/" + strings.Repeat("m", 1024-len("/flood.S/"))
	names := []string{prefix, prefix + "a", prefix + "b", prefix + strings.Repeat("m", 4096) + "a", prefix + strings.Repeat("m", 4096) + "b"}
	for i, name := range names {
		for range i + 1 { // name i: i+1 retries, failing
			ctx := attemptContext("10.0.0.1:5000", 1, &transportStream{})
			g.Unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: name}, func(context.Context, any) (any, error) { return nil, errUnavailable })
		}
	}
	for i, name := range names {
		if got := g.State(name).Retries; got != int64(i+1) {
			t.Errorf("name %d (%d bytes): State().Retries = %d, want %d: counted apart", i, len(name), got, i+1)
		}
	}
	if s := g.State(prefix + "c"); s != (guard.State{}) {
		t.Errorf("a long name never called: State = %+v, want the zero State", s)
	}
	for _, m := range marked {
		if m != prefix {
			t.Errorf("a mark's Method is %d bytes, want the name's first 1024", len(m))
		}
	}
	if len(marked) == 0 {
		t.Error("no failure marked: the test marks nothing")
	}
}
