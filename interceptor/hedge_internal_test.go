package interceptor

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/settings"
)

// withKnownUnsafe installs f as the idempotency classifier that New
// consults, as the classifier's own option will.
func withKnownUnsafe(f func(name string) bool) Option {
	return func(r *Retrier) error {
		r.e.Unsafe = f
		return nil
	}
}

// idempotencyUnknown is a classifier from proto descriptors: a method is
// known unsafe when its idempotency_level is IDEMPOTENCY_UNKNOWN (the
// default), a service when one of its methods is.
func idempotencyUnknown(name string) bool {
	service, method, _ := strings.Cut(strings.TrimPrefix(name, "/"), "/")
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		return false // unknown here, not known unsafe
	}
	sd := d.(protoreflect.ServiceDescriptor)
	for i := range sd.Methods().Len() {
		md := sd.Methods().Get(i)
		if method != "" && string(md.Name()) != method {
			continue
		}
		if md.Options().(*descriptorpb.MethodOptions).GetIdempotencyLevel() == descriptorpb.MethodOptions_IDEMPOTENCY_UNKNOWN {
			return true
		}
	}
	return false
}

func TestHedgingRefusedForUnsafeMethods(t *testing.T) {
	_ = testgrpc.TestService_ServiceDesc // registers grpc/testing/test.proto
	h := grpcbackoff.Hedging{MaxAttempts: 2, Delay: time.Millisecond}
	p := grpcbackoff.DefaultPolicy()
	for _, name := range []string{"/grpc.testing.TestService/UnaryCall", "/grpc.testing.TestService/"} {
		_, err := New(p, WithHedging(name, h), withKnownUnsafe(idempotencyUnknown))
		if err == nil || !strings.Contains(err.Error(), `"`+name+`"`) || !strings.Contains(err.Error(), "not to be safe to send twice") {
			t.Errorf("WithHedging(%q) of a method with idempotency_level IDEMPOTENCY_UNKNOWN: err = %v, want one naming it", name, err)
		}
	}
	// A method the classifier does not know, and a retry policy for an
	// unsafe method, are accepted.
	if _, err := New(p, WithHedging("/pkg.Svc/Get", h), WithMethod("/grpc.testing.TestService/UnaryCall", p), withKnownUnsafe(idempotencyUnknown)); err != nil {
		t.Errorf("err = %v, want nil", err)
	}
	// Without a classifier, nothing is known unsafe.
	if _, err := New(p, WithHedging("/grpc.testing.TestService/UnaryCall", h)); err != nil {
		t.Errorf("err = %v, want nil", err)
	}
}

// TestDefaultHedgingSkipsUnsafeMethods checks that hedging configured for
// a whole service or by default is not applied to a method known unsafe.
func TestDefaultHedgingSkipsUnsafeMethods(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, err := New(grpcbackoff.DefaultPolicy(), withKnownUnsafe(func(name string) bool { return name == "/pkg.Svc/Put" }))
		if err != nil {
			t.Fatal(err)
		}
		hp, err := settings.CompileHedging(grpcbackoff.Hedging{MaxAttempts: 2, Delay: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		r.e.Settings.Entry("").SetHedge(hp) // as WithServiceConfig does for a default entry
		for method, want := range map[string]int32{"/pkg.Svc/Get": 2, "/pkg.Svc/Put": 1} {
			var attempts atomic.Int32
			invoker := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
				attempts.Add(1)
				<-time.After(10 * time.Millisecond)
				return nil
			}
			if err := r.Unary()(t.Context(), method, "req", new(string), nil, invoker); err != nil {
				t.Fatal(err)
			}
			if got := attempts.Load(); got != want {
				t.Errorf("%s: %d attempts, want %d", method, got, want)
			}
		}
	})
}
