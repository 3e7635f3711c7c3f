package loop

import (
	"google.golang.org/grpc"

	"github.com/platformkit/grpcbackoff/internal/gate"
	"github.com/platformkit/grpcbackoff/internal/safety"
	"github.com/platformkit/grpcbackoff/internal/settings"
)

// The call options a Plan reads. gRPC itself ignores them
// (grpc.EmptyCallOption), so a call carrying them works the same without
// the interceptors. They are used by pointer, so that finding one among a
// call's options copies nothing.

// Option changes the Policy of one call (interceptor.NoRetry,
// CallMaxAttempts, CallPolicy).
type Option struct {
	grpc.EmptyCallOption
	NoRetry     bool
	MaxAttempts int              // > 0: replaces Policy.MaxAttempts
	Policy      *settings.Policy // replaces the Policy
	Err         error            // the option was built from bad input
}

// SafetyOption states the Safety of one call (interceptor.CallIdempotent,
// CallNotIdempotent).
type SafetyOption struct {
	grpc.EmptyCallOption
	Level safety.Level
}

// CriticalityOption states how critical one call is (interceptor.Critical,
// interceptor.Sheddable): the last one given wins.
type CriticalityOption struct {
	grpc.EmptyCallOption
	Level gate.Criticality
}

// layerMark is the call option by which the Retrier that takes a call tells
// the Retriers installed after it on the same connection (the same dial
// options given twice, two slices, ClientOptions beside DialOptions) that it
// does: they pass every attempt of it through (Plan.Through), so that
// attempts never multiply.
type layerMark struct{ grpc.EmptyCallOption }

// Mark is the layer mark every attempt of a call the Retrier takes carries.
var Mark grpc.CallOption = &layerMark{}

// grpc.OnFinish runs its function once per call, with the call's final
// status, as grpc-go runs it. gRPC runs the call options of every attempt,
// so a call that retries or hedges takes the caller's OnFinish options off
// its attempts and runs them itself, once, when the call ends.

// SplitOnFinish returns the functions of the grpc.OnFinish options in
// opts, and a copy of opts without them.
func SplitOnFinish(opts []grpc.CallOption) (fs []func(error), rest []grpc.CallOption) {
	rest = make([]grpc.CallOption, 0, len(opts))
	for _, o := range opts {
		if f, ok := o.(grpc.OnFinishCallOption); ok {
			fs = append(fs, f.OnFinish)
		} else {
			rest = append(rest, o)
		}
	}
	return fs, rest
}

// Finish runs fs with err, a call's final error (nil for success).
func Finish(fs []func(error), err error) {
	for _, f := range fs {
		f(err)
	}
}
