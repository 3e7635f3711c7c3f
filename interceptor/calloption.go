package interceptor

import (
	"fmt"

	"google.golang.org/grpc"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/loop"
	"github.com/platformkit/grpcbackoff/internal/settings"
)

// NoRetry, CallMaxAttempts and CallPolicy change the Policy of one call
// by a loop.Option. gRPC itself ignores it (grpc.EmptyCallOption), so a
// call carrying it works the same without the interceptors.

// NoRetry makes one call a single attempt, whatever its Policy says: for
// example a mutation that is not idempotent.
//
//	_, err := client.Increment(ctx, req, interceptor.NoRetry())
//
// For cloud.google.com/go clients, pass it with gax.WithGRPCOptions.
func NoRetry() grpc.CallOption {
	return &loop.Option{NoRetry: true}
}

// CallMaxAttempts replaces, for one call, the MaxAttempts of the Policy that
// applies to it. n must be at least 1; otherwise the call fails at once with
// INVALID_ARGUMENT naming n, without reaching the server.
func CallMaxAttempts(n int) grpc.CallOption {
	if n < 1 {
		return &loop.Option{Err: fmt.Errorf("interceptor: CallMaxAttempts(%d): MaxAttempts must be at least 1", n)}
	}
	return &loop.Option{MaxAttempts: n}
}

// CallPolicy replaces, for one call, the Policy that applies to it: its
// delays, codes and attempts, not the method's Safety (CallIdempotent states
// that). An invalid p makes the call fail at once with INVALID_ARGUMENT and
// Validate's message, without reaching the server.
func CallPolicy(p grpcbackoff.Policy) grpc.CallOption {
	c, err := settings.Compile(p)
	if err != nil {
		return &loop.Option{Err: fmt.Errorf("interceptor: CallPolicy: %w", err)}
	}
	return &loop.Option{Policy: &c}
}
