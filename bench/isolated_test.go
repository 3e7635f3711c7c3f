package bench

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/googleapis/gax-go/v2"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff/interceptor"
)

// The isolated benchmarks call each retry layer with a fake invoker that
// returns at once: no transport, so that nanoseconds show. grpc-go's
// built-in retry lives inside the transport's stream and has no column here.

// isoNames are the mechanisms of the isolated benchmarks.
var isoNames = []string{bare, ours, oursHook, oursNoop, oursSDK, oursAll, oursNoPB, middleware, gaxInvoke}

// isoMethod is the method every isolated call names.
const isoMethod = "/grpc.testing.TestService/UnaryCall"

// An isoCall makes one call of isoMethod through a retry layer, the way its
// users make one: invoker stands for the rest of the chain.
type isoCall func(ctx context.Context, req, reply any, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error

// isoMech returns the call of mechanism name set up as s says, and the grpc
// call options to pass it, for options of the given kind (see isoOpts).
func isoMech(name string, s setting, kind string) (isoCall, []grpc.CallOption) {
	var opts []grpc.CallOption
	if kind != "none" {
		opts = append(opts, grpc.StaticMethod())
	}
	own := kind == "own"
	retries := new(atomic.Int64)
	switch name {
	case bare:
		return func(ctx context.Context, req, reply any, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
			return invoker(ctx, isoMethod, req, reply, nil, opts...)
		}, opts
	case ours, oursHook, oursNoop, oursSDK, oursAll, oursNoPB, oursHedge:
		r, err := interceptor.New(oursPolicy(s), oursOptions(name, s, retries)...)
		if err != nil {
			panic(err)
		}
		if own {
			opts = append(opts, interceptor.CallMaxAttempts(3))
		}
		u := r.Unary()
		return func(ctx context.Context, req, reply any, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
			return u(ctx, isoMethod, req, reply, nil, invoker, opts...)
		}, opts
	case middleware:
		if own {
			opts = append(opts, retry.WithMax(3))
		}
		u := retry.UnaryClientInterceptor(middlewareOptions(s, retries)...)
		return func(ctx context.Context, req, reply any, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
			return u(ctx, isoMethod, req, reply, nil, invoker, opts...)
		}, opts
	case gaxInvoke:
		// As a generated Google client: the method's default gax options,
		// with the caller's appended (a gax option, not a grpc one); the
		// grpc options are the stub's.
		defaults := []gax.CallOption{gaxRetry(s, retries)}
		var perCall []gax.CallOption
		if own {
			perCall = []gax.CallOption{gaxRetry(s, retries)}
		}
		return func(ctx context.Context, req, reply any, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
			gopts := defaults
			if len(perCall) > 0 {
				gopts = append(defaults[:len(defaults):len(defaults)], perCall...)
			}
			return gax.Invoke(ctx, func(ctx context.Context, cs gax.CallSettings) error {
				return invoker(ctx, isoMethod, req, reply, nil, append(opts, cs.GRPC...)...)
			}, gopts...)
		}, opts
	}
	panic("bench: unknown mechanism " + name)
}

// isoOpts are the kinds of call options of the isolated benchmarks: none;
// the one grpc's generated code always passes (grpc.StaticMethod, "static");
// and that one with the mechanism's own option that changes one call's
// retrying ("own": CallMaxAttempts(3), retry.WithMax(3), a gax.WithRetry
// appended to the defaults).
var isoOpts = []string{"none", "static", "own"}

// succeed is the fake invoker of a call that succeeds.
func succeed(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
	return nil
}

// errUnavailable is the error of the failed attempts, made once: a real
// transport makes one per failure, for every mechanism alike.
var errUnavailable = status.Error(codes.Unavailable, "bench: flaky")

// flaky returns a fake invoker that fails every other call, the first one
// first, and counts its calls in n.
func flaky(n *int) grpc.UnaryInvoker {
	return func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		*n++
		if *n%2 == 1 {
			return errUnavailable
		}
		return nil
	}
}

// BenchmarkIsolated is a call that succeeds, through each retry layer with no
// transport behind it.
func BenchmarkIsolated(b *testing.B) {
	for _, kind := range isoOpts {
		for _, i := range order(b, len(isoNames)) {
			name := isoNames[i]
			b.Run("opts="+kind+"/mech="+name, func(b *testing.B) {
				call, opts := isoMech(name, defaults, kind)
				ctx, req, reply := context.Background(), new(int), new(int)
				op := func() error { return call(ctx, req, reply, succeed, opts) }
				warmUp(b, 1000, op)
				b.ReportAllocs()
				for b.Loop() {
					if err := op(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkIsolatedRetry is a call whose first attempt fails with
// UNAVAILABLE, retried once after 1 ns; the bare column calls twice. The
// call's context is context.Background (ctx=background), or one with a
// deadline (ctx=deadline), as calls with a timeout have: ours sleeps through
// a wait that cannot be cut short, and waits on a timer otherwise.
func BenchmarkIsolatedRetry(b *testing.B) {
	for _, ctxKind := range []string{"background", "deadline"} {
		for _, i := range order(b, len(isoNames)) {
			name := isoNames[i]
			b.Run("opts=static/ctx="+ctxKind+"/mech="+name, func(b *testing.B) {
				call, opts := isoMech(name, fast, "static")
				ctx, req, reply := context.Background(), new(int), new(int)
				if ctxKind == "deadline" {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, time.Hour)
					defer cancel()
				}
				var n int
				invoker := flaky(&n)
				op := func() error {
					err := call(ctx, req, reply, invoker, opts)
					if name == bare && err == errUnavailable {
						err = call(ctx, req, reply, invoker, opts)
					}
					return err
				}
				warmUp(b, 1000, op)
				n = 0
				b.ReportAllocs()
				for b.Loop() {
					if err := op(); err != nil {
						b.Fatal(err)
					}
				}
				if n != 2*b.N {
					b.Fatalf("%d attempts for %d calls, want two each", n, b.N)
				}
			})
		}
	}
}

// BenchmarkIsolatedParallel is BenchmarkIsolated from every core at once, one
// retry layer shared: for ours, one throttle.
func BenchmarkIsolatedParallel(b *testing.B) {
	for _, i := range order(b, len(isoNames)) {
		name := isoNames[i]
		b.Run("opts=static/mech="+name, func(b *testing.B) {
			call, opts := isoMech(name, defaults, "static")
			ctx, req, reply := context.Background(), new(int), new(int)
			warmUp(b, 1000, func() error { return call(ctx, req, reply, succeed, opts) })
			b.ResetTimer()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				ctx, req, reply := context.Background(), new(int), new(int)
				for pb.Next() {
					if err := call(ctx, req, reply, succeed, opts); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
