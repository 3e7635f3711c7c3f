package interceptor_test

import (
	"strings"
	"testing"
	"testing/synctest"

	"github.com/platformkit/grpcbackoff/internal/bufconntest"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
)

func TestPerMethodAndPerCallPolicies(t *testing.T) {
	two := bufconntest.Exact()
	two.MaxAttempts = 2
	five := bufconntest.Exact()
	five.MaxAttempts = 5
	r, err := interceptor.New(bufconntest.Exact(), interceptor.WithoutThrottle(),
		interceptor.WithSafety("/pkg.Svc/", interceptor.Idempotent), interceptor.WithSafety("/pkg.Third/", interceptor.Idempotent),
		interceptor.WithMethod("/pkg.Svc/", five),
		interceptor.WithMethod("/pkg.Svc/Read", two),
		interceptor.WithoutRetryFor("/pkg.Svc/Delete"),
		interceptor.WithoutRetryFor("/pkg.Other/"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		method string
		opts   []grpc.CallOption
		want   int // attempts against a server that always fails
	}{
		{"/pkg.Svc/Read", nil, 2},       // the method's own entry
		{"/pkg.Svc/Write", nil, 5},      // its service's entry
		{"/pkg.Svc/Delete", nil, 1},     // switched off
		{"/pkg.Other/Anything", nil, 1}, // switched off for the service
		{"/pkg.Third/Call", nil, 8},     // the default Policy
		{"/pkg.Svc/Readonly", nil, 5},   // a prefix of a method name is not a match
		{"/pkg.Third/Call", opt(interceptor.NoRetry()), 1},
		{"/pkg.Third/Call", opt(interceptor.CallMaxAttempts(3)), 3},
		{"/pkg.Svc/Read", opt(interceptor.CallMaxAttempts(4)), 4},
		{"/pkg.Svc/Delete", opt(interceptor.CallMaxAttempts(4)), 1}, // off stays off
		{"/pkg.Svc/Delete", opt(interceptor.CallPolicy(two)), 2},    // a whole Policy turns it on
		{"/pkg.Third/Call", opt(interceptor.NoRetry(), interceptor.CallMaxAttempts(3)), 1},
		{"/pkg.Third/Call", opt(interceptor.CallMaxAttempts(3), grpc.WaitForReady(true), interceptor.CallMaxAttempts(2)), 2}, // the last wins
	}
	for _, tc := range cases {
		t.Run(tc.method, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &script{errs: bufconntest.Unavailable(100)}
				err := r.Unary()(t.Context(), tc.method, "req", new(string), nil, s.invoke, tc.opts...)
				if len(s.times) != tc.want {
					t.Errorf("%s with %d options: attempts = %d, want %d", tc.method, len(tc.opts), len(s.times), tc.want)
				}
				if status.Code(err) != codes.Unavailable {
					t.Errorf("code = %v, want Unavailable", status.Code(err))
				}
			})
		})
	}
}

func TestBadCallOptionsFailBeforeTheServer(t *testing.T) {
	bad := bufconntest.Exact()
	bad.MaxAttempts = 0
	for _, tc := range []struct {
		opt  grpc.CallOption
		want string
	}{
		{interceptor.CallMaxAttempts(0), "CallMaxAttempts(0)"},
		{interceptor.CallMaxAttempts(-3), "CallMaxAttempts(-3)"},
		{interceptor.CallPolicy(bad), "MaxAttempts (0)"},
	} {
		s := &script{}
		err := interceptor.Unary(bufconntest.Exact())(t.Context(), "/pkg.Svc/Get", "req", new(string), nil, s.invoke, tc.opt)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err = %v, want INVALID_ARGUMENT naming %q", err, tc.want)
		}
		if len(s.times) != 0 {
			t.Errorf("the server saw %d attempts, want none", len(s.times))
		}
	}
}

func TestBadMethodNames(t *testing.T) {
	for _, name := range []string{"", "pkg.Svc/Get", "/", "//Get", "/pkg.Svc", "/pkg.Svc/Get/More"} {
		_, err := interceptor.New(bufconntest.Exact(), interceptor.WithoutRetryFor(name))
		if err == nil || !strings.Contains(err.Error(), `"`+name+`"`) {
			t.Errorf("WithoutRetryFor(%q): err = %v, want an error naming it", name, err)
		}
	}
	bad := grpcbackoff.DefaultPolicy()
	bad.Multiplier = 0.5
	if _, err := interceptor.New(bufconntest.Exact(), interceptor.WithMethod("/pkg.Svc/Get", bad)); err == nil ||
		!strings.Contains(err.Error(), "/pkg.Svc/Get") || !strings.Contains(err.Error(), "Multiplier (0.5)") {
		t.Errorf("WithMethod with a bad Policy: err = %v, want the method and the field named", err)
	}
}
