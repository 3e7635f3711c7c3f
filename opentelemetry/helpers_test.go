package opentelemetry_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
)

// exact is the default policy without jitter, so that delays are exact.
func exact() grpcbackoff.Policy {
	p := grpcbackoff.DefaultPolicy()
	p.Jitter = 0
	return p
}

// script is a fake invoker: attempt i (from 0) returns errs[i], or nil past
// the end.
type script struct {
	errs []error
	n    int
}

func (s *script) invoke(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
	i := s.n
	s.n++
	if i < len(s.errs) {
		return s.errs[i]
	}
	return nil
}

func unavailable(n int) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = status.Error(codes.Unavailable, "down")
	}
	return errs
}

func call(ctx context.Context, t *testing.T, ic grpc.UnaryClientInterceptor, s *script, opts ...grpc.CallOption) error {
	t.Helper()
	return ic(ctx, "/pkg.Svc/Get", "req", new(string), nil, s.invoke, opts...)
}
