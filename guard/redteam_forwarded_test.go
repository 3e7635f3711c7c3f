package guard_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff/guard"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// TestRedteamForwardedPreviousAttempts (red team, issue 44 / 43): a
// mid-tier forwards its incoming metadata to a guarded backend (as proxies
// do: metadata.NewOutgoingContext(ctx, incoming)), and the incoming
// request was its caller's third attempt: grpc-previous-rpc-attempts "2"
// is forwarded. The backend fails the mid-tier's first two attempts
// UNAVAILABLE. The guard reads the first value of the key
// (guard/metadata.go), because grpc-go's retry writes its own count before
// any forwarded metadata: with grpc-go's built-in retry the guard reads
// 2 (the forwarded one, on the first attempt), 1, 2. The library appends
// its count after the forwarded one, so the guard reads the forwarded
// value on every attempt and never the library's count.
func TestRedteamForwardedPreviousAttempts(t *testing.T) {
	run := func(t *testing.T, opts ...grpc.DialOption) []string {
		g := newGuard(t, guard.Options{})
		var mu sync.Mutex
		var seen []string // the first value the guard reads, per attempt
		record := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			v := metadata.ValueFromIncomingContext(ctx, interceptor.PreviousAttemptsKey)
			first := ""
			if len(v) > 0 {
				first = v[0]
			}
			mu.Lock()
			seen = append(seen, first)
			mu.Unlock()
			return h(ctx, req)
		}
		srv := bufconntest.NewServer(t, func(_ string, n int) bufconntest.Step {
			if n < 2 {
				return bufconntest.Fail(status.Error(codes.Unavailable, "down"))
			}
			return bufconntest.Succeed(1)
		}, append(g.ServerOptions(), grpc.ChainUnaryInterceptor(record))...)
		incoming := metadata.Pairs(interceptor.PreviousAttemptsKey, "2", "x-user", "u")
		ctx := metadata.NewOutgoingContext(t.Context(), incoming) // the mid-tier forwards what it got
		if _, err := srv.Client(t, opts...).UnaryCall(callID(ctx, "fwd"), &testgrpc.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
	synctest.Test(t, func(t *testing.T) {
		grpcGo := run(t, grpc.WithDefaultServiceConfig(grpcRetry))
		lib := run(t, interceptor.DialOptions(fivePolicy(), interceptor.WithSafety("/grpc.testing.TestService/", interceptor.Idempotent))...)
		t.Logf("first values the guard reads: grpc-go %v, library %v", grpcGo, lib)
		if !slices.Equal(lib[1:], grpcGo[1:]) {
			t.Errorf("the guard reads %v on the library's attempts, %v on grpc-go's: a retry's own count must come first, as grpc-go writes it", lib, grpcGo)
		}
	})
}
