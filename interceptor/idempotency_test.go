package interceptor_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/platformkit/grpcbackoff/internal/bufconntest"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	_ "google.golang.org/protobuf/types/known/emptypb" // registers google/protobuf/empty.proto

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/serviceconfig"
)

// The service idemtest.Store, registered in protoregistry.GlobalFiles as a
// generated package would register it: Read has no side effects, Put is
// idempotent, Write says nothing.
func init() {
	method := func(name string, lvl descriptorpb.MethodOptions_IdempotencyLevel) *descriptorpb.MethodDescriptorProto {
		m := &descriptorpb.MethodDescriptorProto{
			Name:       proto.String(name),
			InputType:  proto.String(".google.protobuf.Empty"),
			OutputType: proto.String(".google.protobuf.Empty"),
		}
		if lvl != descriptorpb.MethodOptions_IDEMPOTENCY_UNKNOWN {
			m.Options = &descriptorpb.MethodOptions{IdempotencyLevel: lvl.Enum()}
		}
		return m
	}
	fdp := &descriptorpb.FileDescriptorProto{
		Name:       proto.String("grpcbackoff/interceptor/idemtest.proto"),
		Package:    proto.String("idemtest"),
		Dependency: []string{"google/protobuf/empty.proto"},
		Syntax:     proto.String("proto3"),
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("Store"),
			Method: []*descriptorpb.MethodDescriptorProto{
				method("Read", descriptorpb.MethodOptions_NO_SIDE_EFFECTS),
				method("Put", descriptorpb.MethodOptions_IDEMPOTENT),
				method("Write", descriptorpb.MethodOptions_IDEMPOTENCY_UNKNOWN),
			},
		}},
	}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		panic(err)
	}
	if err := protoregistry.GlobalFiles.RegisterFile(fd); err != nil {
		panic(err)
	}
}

// A failure of an attempt that made no transport stream: grpc-go's for a
// connection that could not be made, which writes none of the attempt's
// call options (see script).
var refused = neverSent{status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`)}

func TestNotIdempotentNotRetriedAfterMaybeApplied(t *testing.T) {
	write := "/idemtest.Store/Write"
	notIdem := interceptor.WithSafety(write, interceptor.NotIdempotent)
	cases := []struct {
		name     string
		method   string
		opts     []interceptor.Option
		callOpts []grpc.CallOption
		errs     []error
		attempts int
	}{
		// Issue 42: what nothing establishes is treated as a write (it was
		// resent on every code of its Policy, and applied three times).
		{"an unmarked method is a write: UNAVAILABLE not retried", write, nil, nil, bufconntest.Unavailable(2), 1},
		{"an unmarked method is a write: RESOURCE_EXHAUSTED retried", write, nil, nil,
			[]error{status.Error(codes.ResourceExhausted, "quota"), status.Error(codes.ResourceExhausted, "quota")}, 3},
		{"an unmarked method is a write: never sent is retried", write, nil, nil, []error{refused, refused}, 3},
		{"an unmarked method, retried when opted in", write, []interceptor.Option{interceptor.WithNonIdempotentRetries()}, nil, bufconntest.Unavailable(2), 3},
		{"WithSafety SafetyUnknown: a write", "/idemtest.Store/Read", []interceptor.Option{interceptor.WithSafety("/idemtest.Store/Read", interceptor.SafetyUnknown)}, nil, bufconntest.Unavailable(2), 1},
		{"not idempotent: UNAVAILABLE not retried", write, []interceptor.Option{notIdem}, nil, bufconntest.Unavailable(2), 1},
		{"not idempotent: RESOURCE_EXHAUSTED retried", write, []interceptor.Option{notIdem}, nil,
			[]error{status.Error(codes.ResourceExhausted, "quota"), status.Error(codes.ResourceExhausted, "quota")}, 3},
		{"not idempotent: never sent is retried", write, []interceptor.Option{notIdem}, nil, []error{refused, refused}, 3},
		{"not idempotent: retried when opted in", write, []interceptor.Option{notIdem, interceptor.WithNonIdempotentRetries()}, nil, bufconntest.Unavailable(2), 3},
		{"per service", write, []interceptor.Option{interceptor.WithSafety("/idemtest.Store/", interceptor.NotIdempotent)}, nil, bufconntest.Unavailable(2), 1},
		{"method wins over service", write, []interceptor.Option{
			interceptor.WithSafety("/idemtest.Store/", interceptor.NotIdempotent),
			interceptor.WithSafety(write, interceptor.Idempotent)}, nil, bufconntest.Unavailable(2), 3},
		{"CallIdempotent wins over WithSafety", write, []interceptor.Option{notIdem}, opt(interceptor.CallIdempotent()), bufconntest.Unavailable(2), 3},
		// Re-derived for issue 27: a Policy of the library's own stated
		// the method safe to resend (a tuned FailoverInstance applied twice).
		{"CallPolicy changes delays, not safety", write, []interceptor.Option{notIdem}, opt(interceptor.CallPolicy(bufconntest.Exact())), bufconntest.Unavailable(2), 1},
		{"CallNotIdempotent", write, nil, opt(interceptor.CallNotIdempotent()), bufconntest.Unavailable(2), 1},
		{"WithMethod changes delays, not safety", write, []interceptor.Option{
			interceptor.WithSafety("/idemtest.Store/", interceptor.NotIdempotent), interceptor.WithMethod(write, bufconntest.Exact())}, nil, bufconntest.Unavailable(2), 1},
		{"a service config's retryPolicy states it may be retried", write, []interceptor.Option{
			interceptor.WithSafety("/idemtest.Store/", interceptor.NotIdempotent), interceptor.WithServiceConfig(retryWrites(write))}, nil, bufconntest.Unavailable(2), 3},
		{"idempotency_level NO_SIDE_EFFECTS", "/idemtest.Store/Read", nil, opt(interceptor.CallNotIdempotent(), interceptor.CallIdempotent()), bufconntest.Unavailable(2), 3},
		{"later call option wins", write, nil, opt(interceptor.CallIdempotent(), interceptor.CallNotIdempotent()), bufconntest.Unavailable(2), 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &script{errs: tc.errs}
				ic := interceptor.Unary(bufconntest.Exact(), append([]interceptor.Option{interceptor.WithoutThrottle()}, tc.opts...)...)
				err := ic(t.Context(), tc.method, "req", new(string), nil, s.invoke, tc.callOpts...)
				if n := len(s.times); n != tc.attempts {
					t.Errorf("attempts = %d, want %d (err %v)", n, tc.attempts, err)
				}
				if tc.attempts == 1 && status.Code(err) != status.Code(tc.errs[0]) {
					t.Errorf("err = %v, want the attempt's own error", err)
				}
			})
		})
	}
}

func withCodes(cs ...codes.Code) grpcbackoff.Policy {
	p := bufconntest.Exact()
	p.Codes = cs
	return p
}

// DEADLINE_EXCEEDED of an attempt's own timeout may have been applied: a
// method not idempotent is not retried after it, even with a Policy that
// retries that code, unless the call says it is idempotent.
func TestNotIdempotentAttemptTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := withCodes(codes.DeadlineExceeded)
		for _, tc := range []struct {
			opts     []grpc.CallOption
			attempts int
		}{{nil, 1}, {opt(interceptor.CallIdempotent()), 3}} {
			s := &script{errs: []error{status.Error(codes.DeadlineExceeded, "attempt timeout"), status.Error(codes.DeadlineExceeded, "attempt timeout")}}
			ic := interceptor.Unary(p, interceptor.WithoutThrottle(), interceptor.WithSafety("/idemtest.Store/Write", interceptor.NotIdempotent))
			_ = ic(t.Context(), "/idemtest.Store/Write", "req", new(string), nil, s.invoke, tc.opts...)
			if n := len(s.times); n != tc.attempts {
				t.Errorf("call options %v: attempts = %d, want %d", tc.opts, n, tc.attempts)
			}
		}
	})
}

func TestExplain(t *testing.T) {
	r, err := interceptor.New(bufconntest.Exact(),
		interceptor.WithSafety("/idemtest.Store/Write", interceptor.NotIdempotent),
		interceptor.WithoutRetryFor("/other.Svc/"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		method string
		safety interceptor.Safety
		codes  []codes.Code
		source string
	}{
		{"/idemtest.Store/Read", interceptor.Idempotent, bufconntest.Exact().Codes, "idempotency_level NO_SIDE_EFFECTS"},
		{"/idemtest.Store/Put", interceptor.Idempotent, bufconntest.Exact().Codes, "idempotency_level IDEMPOTENT"},
		{"/idemtest.Store/Write", interceptor.NotIdempotent, []codes.Code{codes.ResourceExhausted}, "WithSafety(/idemtest.Store/Write)"},
		{"/grpc.testing.TestService/UnaryCall", interceptor.NotIdempotent, []codes.Code{codes.ResourceExhausted},
			"treated as a write, resent only when its request carries a request_id (AIP-155): neither idempotency_level nor google.api.http, and its name is no standard read (Get, List, BatchGet, Search)"},
		{"/unregistered.Svc/Get", interceptor.Idempotent, bufconntest.Exact().Codes, "a standard read by its name (Get, AIP-131); no descriptor registered for unregistered.Svc"},
		{"/unregistered.Svc/CreateOrder", interceptor.NotIdempotent, []codes.Code{codes.ResourceExhausted},
			"treated as a write, resent only when its request carries a request_id (AIP-155): no descriptor registered for unregistered.Svc, and its name is no standard read (Get, List, BatchGet, Search)"},
	}
	for _, tc := range cases {
		d := r.Explain(tc.method)
		if d.Safety != tc.safety || d.Source != tc.source || !equalCodes(d.Codes, tc.codes) || d.Policy == nil || d.Policy.MaxAttempts != bufconntest.Exact().MaxAttempts {
			t.Errorf("Explain(%q) = %+v, want safety %v from %q, codes %v", tc.method, d, tc.safety, tc.source, tc.codes)
		}
		if s := d.String(); !strings.HasPrefix(s, tc.method+": up to 8 attempts on ") || !strings.Contains(s, tc.source) {
			t.Errorf("Explain(%q).String() = %q", tc.method, s)
		}
	}
	if got, want := r.Explain("/other.Svc/Get").String(), "/other.Svc/Get: never retried (WithoutRetryFor, or a service config entry without a retryPolicy, for /other.Svc/)"; got != want {
		t.Errorf("Explain of a method WithoutRetryFor = %q, want %q", got, want)
	}
	sc, err := serviceconfig.Parse([]byte(`{"methodConfig": [{"name": [{}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	none, err := interceptor.New(bufconntest.Exact(), interceptor.WithServiceConfig(sc))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := none.Explain("/idemtest.Store/Read").String(), "/idemtest.Store/Read: never retried (no default Policy: WithServiceConfig's default entry has no retryPolicy)"; got != want {
		t.Errorf("Explain without a default Policy = %q, want %q", got, want)
	}
	want := "/idemtest.Store/Write: up to 8 attempts on RESOURCE_EXHAUSTED (UNAVAILABLE only when the connection could not be made) [the Retrier's Policy]; not idempotent: WithSafety(/idemtest.Store/Write)"
	if got := r.Explain("/idemtest.Store/Write").String(); got != want {
		t.Errorf("Explain(Write).String() =\n%s\nwant\n%s", got, want)
	}
}

func equalCodes(a, b []codes.Code) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestWithSafetyBadInput(t *testing.T) {
	if _, err := interceptor.New(bufconntest.Exact(), interceptor.WithSafety("/idemtest.Store/Write", interceptor.Safety(7))); err == nil ||
		err.Error() != `interceptor: opts[0]: WithSafety("/idemtest.Store/Write", 7): unknown Safety` {
		t.Errorf("WithSafety(7) error = %v", err)
	}
	if _, err := interceptor.New(bufconntest.Exact(), interceptor.WithSafety("Write", interceptor.Idempotent)); err == nil || !strings.Contains(err.Error(), `"Write"`) {
		t.Errorf("WithSafety(bad name) error = %v", err)
	}
}

// Over loopback TCP, to a port nothing listens on: grpc-go's UNAVAILABLE for
// a connection that could not be made proves the request never left, so a
// call not idempotent is retried after it.
func TestNotIdempotentRetriedWhenNeverSent(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	var attempts atomic.Int64
	count := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		attempts.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	p := bufconntest.Exact()
	p.Initial, p.Max, p.MaxAttempts = time.Millisecond, time.Millisecond, 3
	opts := append(interceptor.DialOptions(p, interceptor.WithoutThrottle()), count, grpc.WithTransportCredentials(insecure.NewCredentials()))
	cc, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = testgrpc.NewTestServiceClient(cc).UnaryCall(ctx, &testgrpc.SimpleRequest{}, interceptor.CallNotIdempotent())
	var ge *grpcbackoff.Error
	if !errors.As(err, &ge) || ge.Reason != grpcbackoff.ReasonExhausted || attempts.Load() != 3 {
		t.Errorf("err = %v after %d attempts, want 3 attempts exhausted", err, attempts.Load())
	}
}

// TestExplainHedged: Explain of a hedged method is the plan its calls get:
// the hedging, and the Policy its failures answer to (its service's here).
// Before issue 20 it said "up to 8 attempts … [the Retrier's Policy]",
// never mentioning the hedging.
func TestExplainHedged(t *testing.T) {
	svc := bufconntest.Exact()
	svc.MaxAttempts = 3
	r, err := interceptor.New(bufconntest.Exact(),
		interceptor.WithHedging("/pkg.Svc/Get", grpcbackoff.Hedging{MaxAttempts: 2, Delay: 50 * time.Millisecond}),
		interceptor.WithMethod("/pkg.Svc/", svc))
	if err != nil {
		t.Fatal(err)
	}
	d := r.Explain("/pkg.Svc/Get")
	if d.Hedging == nil || d.Hedging.MaxAttempts != 2 || d.Hedging.Delay != 50*time.Millisecond || d.Policy == nil || d.MaxAttempts != 3 {
		t.Fatalf("Explain = %+v, want the hedging (2, 50ms) and the service's Policy of 3 attempts", d)
	}
	want := "/pkg.Svc/Get: unary calls hedged, 2 attempts at most in flight, one every 50ms while none answers; failures up to 3 attempts on UNAVAILABLE, RESOURCE_EXHAUSTED [WithMethod or WithServiceConfig for /pkg.Svc/]; idempotent: a standard read by its name (Get, AIP-131); no descriptor registered for pkg.Svc"
	if got := d.String(); got != want {
		t.Errorf("Explain(Get).String() =\n%s\nwant\n%s", got, want)
	}
	if d := r.Explain("/pkg.Svc/Put"); d.Hedging != nil || d.MaxAttempts != 3 {
		t.Errorf("Explain(Put) = %+v, want the service's Policy, not hedged", d)
	}
}

// retryWrites is a service config that retries method on UNAVAILABLE with
// bufconntest.Exact's delays.
func retryWrites(method string) serviceconfig.Config {
	p := bufconntest.Exact()
	return serviceconfig.Config{Methods: []serviceconfig.Method{{Names: []string{method}, Policy: &p}}}
}
