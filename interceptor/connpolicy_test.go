package interceptor_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
	"github.com/platformkit/grpcbackoff/serviceconfig"
)

// The methods of the connection-policy tests: the resolver's config names
// ownMethod by an entry of its own and ownService's methods by their
// service's; it does not name otherMethod.
const (
	ownMethod   = "/grpc.testing.TestService/UnaryCall"
	ownService  = "/pkg.Owned/Write"
	otherMethod = "/pkg.Other/Call"
)

// ownersConfig is the service config the owners publish through the
// resolver: 4 attempts on INTERNAL and UNAVAILABLE for ownMethod, 3 on
// INTERNAL for the methods of pkg.Owned.
const ownersConfig = `{"methodConfig": [
	{"name": [{"service": "grpc.testing.TestService", "method": "UnaryCall"}], "retryPolicy": {
		"maxAttempts": 4, "initialBackoff": "0.01s", "maxBackoff": "0.1s",
		"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE", "INTERNAL"]}},
	{"name": [{"service": "pkg.Owned"}], "retryPolicy": {
		"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.1s",
		"backoffMultiplier": 2, "retryableStatusCodes": ["INTERNAL"]}}]}`

// failing is a backend's script: a call whose id is "CODE/N/…" fails its
// first N attempts with CODE, trailers-only, then answers.
func failing(id string, n int) bufconntest.Step {
	f := strings.SplitN(id, "/", 3)
	if len(f) < 3 {
		return bufconntest.Succeed(1)
	}
	c, _ := strconv.Atoi(f[0])
	k, _ := strconv.Atoi(f[1])
	if n < k {
		return bufconntest.Fail(status.Errorf(codes.Code(c), "attempt %d refused", n+1))
	}
	return bufconntest.Succeed(1)
}

var policyCalls atomic.Int64

// callFailing makes a call of method on cc that srv fails fails times with
// code, and returns the attempts srv saw and its error.
func callFailing(ctx context.Context, srv *bufconntest.Server, cc *grpc.ClientConn, method string, code codes.Code, fails int, opts ...grpc.CallOption) (int, error) {
	id := fmt.Sprintf("%d/%d/%d", code, fails, policyCalls.Add(1))
	ctx = metadata.AppendToOutgoingContext(ctx, bufconntest.StreamKey, id)
	err := cc.Invoke(ctx, method, new(emptypb.Empty), new(emptypb.Empty), opts...)
	return len(srv.Attempts(id)), err
}

// resolvedConn returns a ClientConn to srv whose manual resolver hands it
// the service config sc, with opts, and push, which hands it another.
func resolvedConn(t *testing.T, srv *bufconntest.Server, sc string, opts ...grpc.DialOption) (*grpc.ClientConn, func(sc string)) {
	t.Helper()
	r := manual.NewBuilderWithScheme("owners")
	r.BuildCallback = func(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) {
		r.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: "backend"}}, ServiceConfig: cc.ParseServiceConfig(sc)})
	}
	dial := srv.Dialer()
	cc, err := grpc.NewClient("owners:///backend", append([]grpc.DialOption{grpc.WithResolvers(r),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return dial(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc, func(sc string) {
		r.UpdateState(resolver.State{Addresses: []resolver.Address{{Addr: "backend"}}, ServiceConfig: r.CC().ParseServiceConfig(sc)})
	}
}

// shortPolicy is the library's Policy of these tests: 6 attempts on
// UNAVAILABLE alone, from 10 ms.
func shortPolicy() grpcbackoff.Policy {
	return grpcbackoff.Policy{Initial: 10 * time.Millisecond, Multiplier: 2, Max: 100 * time.Millisecond,
		MaxAttempts: 6, Codes: []codes.Code{codes.Unavailable}}
}

// TestConnectionPolicyOrder pins where a call's retry settings come from
// under DialOptions on a ClientConn whose resolver publishes a retry policy
// (issue 45), the first that speaks deciding: the call's options
// (CallPolicy, NoRetry; CallMaxAttempts bounds), the Retrier's options for
// the method or its service (WithMethod, WithoutRetryFor, an entry of
// WithServiceConfig without a retryPolicy), the connection's service
// config, WithServiceConfig's retryPolicies, the Retrier's Policy —
// each row's attempts on the wire, and the source ExplainOn names. And what
// the connection's retryPolicy states of safety, as WithServiceConfig's
// would: a method it names is resendable, unless WithSafety states the
// method itself; a method of a service it names, where nothing else knows.
func TestConnectionPolicyOrder(t *testing.T) {
	marked := []interceptor.Option{
		interceptor.WithSafety("/grpc.testing.TestService/", interceptor.Idempotent),
		interceptor.WithSafety("/pkg.Owned/", interceptor.Idempotent),
		interceptor.WithSafety("/pkg.Other/", interceptor.Idempotent),
	}
	five := shortPolicy()
	five.MaxAttempts, five.Codes = 5, []codes.Code{codes.Internal}
	two := five
	two.MaxAttempts = 2
	sc := func(doc string) interceptor.Option {
		c, err := serviceconfig.Parse([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		return interceptor.WithServiceConfig(c)
	}
	sc5 := sc(`{"methodConfig": [{"name": [{"service": "grpc.testing.TestService", "method": "UnaryCall"}], "retryPolicy": {
		"maxAttempts": 5, "initialBackoff": "0.01s", "maxBackoff": "0.1s", "backoffMultiplier": 2, "retryableStatusCodes": ["INTERNAL"]}}]}`)
	scNone := sc(`{"methodConfig": [{"name": [{"service": "grpc.testing.TestService", "method": "UnaryCall"}], "timeout": "10s"}]}`)
	for _, tc := range []struct {
		name     string
		opts     []interceptor.Option
		call     []grpc.CallOption
		method   string
		code     codes.Code
		attempts int
		source   string // in ExplainOn's PolicySource, or its Source (safety) with safety set
		safety   bool
	}{
		{"the connection's over the Policy", marked, nil, ownMethod, codes.Internal, 4, "the connection's service config", false},
		{"the connection's service entry", marked, nil, ownService, codes.Internal, 3, "its retryPolicy for /pkg.Owned/", false},
		{"a method it does not name: the Policy", marked, nil, otherMethod, codes.Unavailable, 6, "the Retrier's Policy", false},
		{"a method it does not name: the Policy's codes", marked, nil, otherMethod, codes.Internal, 1, "the Retrier's Policy", false},
		{"WithMethod over the connection's", append(marked, interceptor.WithMethod(ownMethod, two)), nil, ownMethod, codes.Internal, 2, "WithMethod", false},
		{"WithMethod for the service over it", append(marked, interceptor.WithMethod("/grpc.testing.TestService/", two)), nil, ownMethod, codes.Internal, 2, "WithMethod", false},
		{"WithoutRetryFor over it", append(marked, interceptor.WithoutRetryFor(ownMethod)), nil, ownMethod, codes.Internal, 1, "WithoutRetryFor", false},
		{"the connection's over WithServiceConfig", append(marked, sc5), nil, ownMethod, codes.Internal, 4, "read at each call's first failure", false},
		{"WithServiceConfig's no retry over it", append(marked, scNone), nil, ownMethod, codes.Internal, 1, "a service config entry without a retryPolicy", false},
		{"CallMaxAttempts bounds it", marked, []grpc.CallOption{interceptor.CallMaxAttempts(2)}, ownMethod, codes.Internal, 2, "", false},
		{"CallPolicy over it", marked, []grpc.CallOption{interceptor.CallPolicy(five)}, ownMethod, codes.Internal, 5, "", false},
		{"NoRetry over it", marked, []grpc.CallOption{interceptor.NoRetry()}, ownMethod, codes.Internal, 1, "", false},
		{"unmarked: the method it names is resendable", nil, nil, ownMethod, codes.Internal, 4, "a retryPolicy for it in the connection's service config", true},
		{"unmarked: a method of a service it names too", nil, nil, ownService, codes.Internal, 3, "a retryPolicy for its service in the connection's service config", true},
		{"unmarked: a method it does not name is a write", nil, nil, otherMethod, codes.Unavailable, 1, "treated as a write", true},
		{"WithSafety of the method over it", []interceptor.Option{interceptor.WithSafety(ownMethod, interceptor.NotIdempotent)}, nil, ownMethod, codes.Internal, 1, "WithSafety(" + ownMethod + ")", true},
		{"WithSafety of the service over its service entry", []interceptor.Option{interceptor.WithSafety("/pkg.Owned/", interceptor.NotIdempotent)}, nil, ownService, codes.Internal, 1, "WithSafety(/pkg.Owned/)", true},
		{"its method entry over WithSafety of the service", []interceptor.Option{interceptor.WithSafety("/grpc.testing.TestService/", interceptor.NotIdempotent)}, nil, ownMethod, codes.Internal, 4, "a retryPolicy for it in the connection's service config", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, err := interceptor.New(shortPolicy(), tc.opts...)
				if err != nil {
					t.Fatal(err)
				}
				srv := bufconntest.NewServer(t, failing)
				cc, _ := resolvedConn(t, srv, ownersConfig, r.DialOptions()...)
				ctx := context.Background()
				if _, err := callFailing(ctx, srv, cc, tc.method, codes.OK, 0); err != nil { // the ClientConn resolves
					t.Fatal(err)
				}
				if n, _ := callFailing(ctx, srv, cc, tc.method, tc.code, 100, tc.call...); n != tc.attempts {
					t.Errorf("%v always: %d attempts, want %d", tc.code, n, tc.attempts)
				}
				d := r.ExplainOn(cc, tc.method)
				got := d.PolicySource
				if tc.safety {
					got = d.Source
				}
				if !strings.Contains(got, tc.source) {
					t.Errorf("ExplainOn: %q, want it to name %q (%v)", got, tc.source, d)
				}
			})
		})
	}
}

// TestConnectionPolicyTimeout: the timeout of the connection's methodConfig
// bounds the call as grpc-go bounds it: grpc-go ends a call that fails
// INTERNAL at every attempt after 3 attempts, waiting 16–24 then 32–48 ms,
// with DEADLINE_EXCEEDED at 100 ms; the library makes the same 3 attempts
// and returns the last failure once the next retry could not start within
// the timeout (from the first failure on), not its 5.
func TestConnectionPolicyTimeout(t *testing.T) {
	const doc = `{"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}], "timeout": "0.1s", "retryPolicy": {
		"maxAttempts": 5, "initialBackoff": "0.02s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["INTERNAL"]}}]}`
	for _, c := range []struct {
		name string
		opts []grpc.DialOption
		code codes.Code
		took [2]time.Duration
	}{
		{"bare grpc-go", nil, codes.DeadlineExceeded, [2]time.Duration{100 * time.Millisecond, 100 * time.Millisecond}},
		{"DialOptions", interceptor.DialOptions(shortPolicy(), interceptor.WithSafety("/grpc.testing.TestService/", interceptor.Idempotent)),
			codes.Internal, [2]time.Duration{48 * time.Millisecond, 72 * time.Millisecond}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := bufconntest.NewServer(t, failing)
				cc, _ := resolvedConn(t, srv, doc, c.opts...)
				start := time.Now()
				n, err := callFailing(context.Background(), srv, cc, ownMethod, codes.Internal, 100)
				if took := time.Since(start); status.Code(err) != c.code || n != 3 || took < c.took[0] || took > c.took[1] {
					t.Errorf("%v after %d attempts in %v; want %v after 3 in %v to %v", err, n, took, c.code, c.took[0], c.took[1])
				}
			})
		})
	}
}
