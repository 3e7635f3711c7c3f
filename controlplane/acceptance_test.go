package controlplane

// The acceptance suite of issue 45: the behaviour of the standard options
// on a service whose owners publish a retry policy through a control plane,
// each test beside bare grpc-go on the same plane: codes retried, attempts
// on the wire, waits, pushes at run time, the methods the plane does not
// name. The standard options are DialOptions on a resolver's channel and
// XDSDialOptions on an xDS channel (standard).

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// standard returns the library's standard options for a channel of pl:
// XDSDialOptions on the xDS plane, DialOptions on the others.
func standard(pl plane, p grpcbackoff.Policy, opts ...interceptor.Option) []grpc.DialOption {
	if _, ok := pl.(*xdsPlane); ok {
		return interceptor.XDSDialOptions(p, opts...)
	}
	return interceptor.DialOptions(p, opts...)
}

// clients are the two clients each test compares on one plane: bare
// grpc-go, and the library's standard options with p and opts.
func clients(pl plane, p grpcbackoff.Policy, opts ...interceptor.Option) []struct {
	name string
	opts []grpc.DialOption
} {
	return []struct {
		name string
		opts []grpc.DialOption
	}{{"bare", nil}, {"library", standard(pl, p, opts...)}}
}

// TestOwnersPolicyKept: under the standard options, on every plane, a
// method the plane names follows the owners' policy as bare grpc-go does —
// 4 attempts on INTERNAL and on UNAVAILABLE, a twice-failing call served in
// 3, the same grpc-previous-rpc-attempts on the wire, a server stream too —
// from a new channel's first call on; a method it does not name gets the
// library's Policy (6 attempts on UNAVAILABLE, 1 on INTERNAL), where bare
// grpc-go makes 1. One layer per method and code.
func TestOwnersPolicyKept(t *testing.T) {
	for _, p := range planes {
		t.Run(p.name, func(t *testing.T) {
			pl := p.new(t)
			srv := pl.Backend()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for _, c := range clients(pl, short(), idempotent...) {
				cc := pl.Conn(t, c.opts...)
				for _, code := range []codes.Code{codes.Unavailable, codes.Internal} {
					r := call(ctx, srv, cc, unary, code, always)
					want(t, c.name+": "+code.String()+" always", r, code, 4)
					if prev := r.Previous(); !slices.Equal(prev, []string{"", "1", "2", "3"}) {
						t.Errorf("%s: %v always: grpc-previous-rpc-attempts %q, want grpc-go's", c.name, code, prev)
					}
					want(t, c.name+": "+code.String()+" twice", call(ctx, srv, cc, unary, code, 2), codes.OK, 3)
					want(t, c.name+": server stream, "+code.String()+" always", stream(ctx, srv, cc, code, always), code, 4)
				}
				unavailable, internal := 6, 1
				if c.name == "bare" {
					unavailable = 1
				}
				want(t, c.name+": unnamed, UNAVAILABLE always", call(ctx, srv, cc, unnamed, codes.Unavailable, always), codes.Unavailable, unavailable)
				want(t, c.name+": unnamed, INTERNAL always", call(ctx, srv, cc, unnamed, codes.Internal, always), codes.Internal, internal)
			}
		})
	}
}

// TestOwnersStateSafety: the owners' policy states their method resendable,
// as a service config given to WithServiceConfig does: with nothing marked
// (no WithSafety), the standard options retry it as bare grpc-go does, on
// every plane; a method the plane does not name is a write nobody marked,
// not resent after a failure the server may have applied (1 attempt, as
// bare grpc-go's, which retries it on no code).
func TestOwnersStateSafety(t *testing.T) {
	for _, p := range planes {
		t.Run(p.name, func(t *testing.T) {
			pl := p.new(t)
			srv := pl.Backend()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for _, c := range clients(pl, short()) {
				cc := pl.Conn(t, c.opts...)
				want(t, c.name+": INTERNAL always", call(ctx, srv, cc, unary, codes.Internal, always), codes.Internal, 4)
				want(t, c.name+": UNAVAILABLE twice", call(ctx, srv, cc, unary, codes.Unavailable, 2), codes.OK, 3)
				want(t, c.name+": unnamed, UNAVAILABLE always", call(ctx, srv, cc, unnamed, codes.Unavailable, always), codes.Unavailable, 1)
			}
		})
	}
}

// TestOwnersWaitsKept: in a bubble, on a manual resolver, under
// DialOptions(DefaultPolicy()), the owners' method waits their 8–12 ms,
// then 16–24 ms, as grpc-go does (not the recipe's seconds), on the
// channel's first call, and a call with a 1.5 s deadline is served.
func TestOwnersWaitsKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := bufconntest.NewServer(t, script)
		m := newManual(srv, owners)
		for _, c := range clients(m, grpcbackoff.DefaultPolicy(), idempotent...) {
			cc := m.Conn(t, c.opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
			r := call(ctx, srv, cc, unary, codes.Unavailable, 2)
			cancel()
			want(t, c.name+": UNAVAILABLE twice", r, codes.OK, 3)
			bounds := [][2]time.Duration{{8 * time.Millisecond, 12 * time.Millisecond}, {16 * time.Millisecond, 24 * time.Millisecond}}
			for i, w := range r.Waits() {
				if w < bounds[i][0] || w > bounds[i][1] {
					t.Errorf("%s: wait %d: %v, want %v to %v", c.name, i+1, w, bounds[i][0], bounds[i][1])
				}
			}
		}
	})
}

// TestOwnersDeadlineMet: over DNS and xDS, in real time, a call with a
// 300 ms deadline that fails twice with UNAVAILABLE is served in 3
// attempts under the standard options with DefaultPolicy, as under bare
// grpc-go: the owners' 10 ms waits, not the recipe's first 1 s.
func TestOwnersDeadlineMet(t *testing.T) {
	for _, p := range planes[1:] {
		t.Run(p.name, func(t *testing.T) {
			pl := p.new(t)
			srv := pl.Backend()
			for _, c := range clients(pl, grpcbackoff.DefaultPolicy(), idempotent...) {
				cc := pl.Conn(t, c.opts...)
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				want(t, c.name, call(ctx, srv, cc, unary, codes.Unavailable, 2), codes.OK, 3)
				cancel()
			}
		})
	}
}

// TestResolverPushesApply: the resolver lowers maxAttempts to 2: the next
// call makes 2 attempts, as bare grpc-go's; it removes the policy ("{}"):
// the next call follows the library's Policy again (bare grpc-go: no
// retry).
func TestResolverPushesApply(t *testing.T) {
	for _, p := range planes[:2] {
		t.Run(p.name, func(t *testing.T) {
			pl := p.new(t)
			srv := pl.Backend()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cs := clients(pl, short(), idempotent...)
			ccs := []*grpc.ClientConn{pl.Conn(t, cs[0].opts...), pl.Conn(t, cs[1].opts...)}
			for i, cc := range ccs {
				want(t, cs[i].name+": before", call(ctx, srv, cc, unary, codes.Internal, always), codes.Internal, 4)
			}
			pl.Publish(t, 2)
			for i, cc := range ccs {
				want(t, cs[i].name+": maxAttempts 2", call(ctx, srv, cc, unary, codes.Internal, always), codes.Internal, 2)
			}
			pl.Publish(t, 0)
			for i, cc := range ccs {
				unavailable := 6
				if cs[i].name == "bare" {
					unavailable = 1
				}
				want(t, cs[i].name+": removed, UNAVAILABLE", call(ctx, srv, cc, unary, codes.Unavailable, always), codes.Unavailable, unavailable)
				want(t, cs[i].name+": removed, INTERNAL", call(ctx, srv, cc, unary, codes.Internal, always), codes.Internal, 1)
			}
		})
	}
}

// TestXDSRouteKept: under XDSDialOptions, the route's codes get the route's
// attempts (4, not 6 and not 24), its twice-failing call is served in 3,
// and the codes it does not retry get the library's Policy; a method
// without a route policy gets the library's alone.
func TestXDSRouteKept(t *testing.T) {
	opts := func() []grpc.DialOption { return interceptor.XDSDialOptions(short(), idempotent...) }
	for _, c := range []struct {
		name                  string
		retryOn               string
		unavailable, internal int
	}{
		{"unavailable,internal", "unavailable,internal", 4, 4},
		{"internal", "internal", 6, 4}, // UNAVAILABLE: the library's layer alone
	} {
		t.Run(c.name, func(t *testing.T) {
			x := newXDS(t, bufconntest.NewServerTCP(t, script), routePolicy(c.retryOn, 3))
			cc := x.Conn(t, opts()...)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			want(t, "UNAVAILABLE always", call(ctx, x.srv, cc, unary, codes.Unavailable, always), codes.Unavailable, c.unavailable)
			want(t, "INTERNAL always", call(ctx, x.srv, cc, unary, codes.Internal, always), codes.Internal, c.internal)
			want(t, "INTERNAL twice", call(ctx, x.srv, cc, unary, codes.Internal, 2), codes.OK, 3)
			want(t, "unnamed, UNAVAILABLE always", call(ctx, x.srv, cc, unnamed, codes.Unavailable, always), codes.Unavailable, 6)
			want(t, "unnamed, INTERNAL always", call(ctx, x.srv, cc, unnamed, codes.Internal, always), codes.Internal, 1)
		})
	}
}

// TestXDSPushesApply: the management server pushes num_retries 1: the next
// calls make 2 attempts, as bare grpc-go's; it removes the route's policy:
// the library's Policy applies again (bare grpc-go: no retry).
func TestXDSPushesApply(t *testing.T) {
	opts := func() []grpc.DialOption { return interceptor.XDSDialOptions(short(), idempotent...) }
	x := newXDS(t, bufconntest.NewServerTCP(t, script), ownersRoute())
	bare, cc := x.Conn(t), x.Conn(t, opts()...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	want(t, "before", call(ctx, x.srv, cc, unary, codes.Internal, always), codes.Internal, 4)
	x.Publish(t, 2)
	eventually(t, "bare: num_retries 1", func() bool { return call(ctx, x.srv, bare, unary, codes.Internal, always).N() == 2 })
	eventually(t, "num_retries 1", func() bool { return call(ctx, x.srv, cc, unary, codes.Internal, always).N() == 2 })
	x.Publish(t, 0)
	eventually(t, "bare: no route policy", func() bool { return call(ctx, x.srv, bare, unary, codes.Unavailable, always).N() == 1 })
	eventually(t, "no route policy", func() bool { return call(ctx, x.srv, cc, unary, codes.Internal, always).N() == 1 })
	want(t, "no route policy, UNAVAILABLE", call(ctx, x.srv, cc, unary, codes.Unavailable, always), codes.Unavailable, 6)
}

// throttled is a resolver's retryThrottling whose 2 tokens the first
// failure spends: every later failure is throttled.
const throttled = `{"maxTokens": 2, "tokenRatio": 0.1}`

// TestThrottlingWhereSeen: the resolver's retryThrottling is grpc-go's to
// honour where its retry is on (XDSDialOptions, on a resolver's channel:
// the resolver's codes are grpc-go's): 5 failing calls make 5 attempts, as
// bare grpc-go's.
func TestThrottlingWhereSeen(t *testing.T) {
	opts := func() []grpc.DialOption { return interceptor.XDSDialOptions(short(), idempotent...) }
	srv := bufconntest.NewServerTCP(t, script)
	m := newManual(srv, doc(4, throttled))
	cc := m.Conn(t, opts()...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := 0
	for range 5 {
		n += call(ctx, srv, cc, unary, codes.Unavailable, always).N()
	}
	if n != 5 {
		t.Errorf("5 failing calls made %d attempts, want 5", n)
	}
}

// TestThrottlingUnseenUnderDialOptions pins a limit: with grpc-go's retry
// off (DialOptions), the resolver's retryThrottling cannot be read (grpc-go
// keeps it unexported): the owners' retryPolicy applies, bounded by the
// library's own budget, whose reserve lets so few retries through — 5
// failing calls make 20 attempts, 4 each, where bare grpc-go makes 5.
func TestThrottlingUnseenUnderDialOptions(t *testing.T) {
	for _, p := range planes[:2] {
		t.Run(p.name, func(t *testing.T) {
			pl := p.new(t)
			srv := pl.Backend()
			switch pl := pl.(type) {
			case *manualPlane:
				pl.Push(doc(4, throttled))
			case *dnsPlane:
				pl.Set(t, doc(4, throttled))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for _, c := range []struct {
				name string
				opts []grpc.DialOption
				want int
			}{
				{"bare", nil, 5},
				{"library", interceptor.DialOptions(short(), idempotent...), 20},
			} {
				cc := pl.Conn(t, c.opts...)
				n := 0
				for range 5 {
					n += call(ctx, srv, cc, unary, codes.Unavailable, always).N()
				}
				if n != c.want {
					t.Errorf("%s: 5 failing calls made %d attempts, want %d", c.name, n, c.want)
				}
			}
		})
	}
}

// TestUnaryAloneOnXDSMultiplies pins why xDS channels need XDSDialOptions:
// the interceptors alone, grpc-go's retry on, cannot see the route's
// policy (GetMethodConfig has none, TestProbeGetMethodConfig): the route's
// UNAVAILABLE gets 4 × 6 = 24 attempts. Two layers.
func TestUnaryAloneOnXDSMultiplies(t *testing.T) {
	x := newXDS(t, bufconntest.NewServerTCP(t, script), ownersRoute())
	r, err := interceptor.New(short(), idempotent...)
	if err != nil {
		t.Fatal(err)
	}
	cc := x.Conn(t, grpc.WithChainUnaryInterceptor(r.Unary()), grpc.WithChainStreamInterceptor(r.Stream()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	want(t, "UNAVAILABLE always", call(ctx, x.srv, cc, unary, codes.Unavailable, always), codes.Unavailable, 24)
}

// TestExplainNamesTheSource: ExplainOn names where each method's policy
// comes from: the connection's resolver for the owners' method, with their
// 4 attempts on INTERNAL and UNAVAILABLE, the Retrier's Policy for the
// others; on an xDS channel under XDSDialOptions, that grpc-go's retry
// takes the route's failures, known only when a call is made; under
// DialOptions, that a route's policy is not applied there.
func TestExplainNamesTheSource(t *testing.T) {
	r, err := interceptor.New(short(), idempotent...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := newManual(bufconntest.NewServerTCP(t, script), owners)
	cc := m.Conn(t, r.DialOptions()...)
	call(ctx, m.srv, cc, unary, codes.OK, 0) // the channel resolves
	for _, c := range []struct{ method, source string }{
		{unary, "the connection's service config from its resolver"},
		{unnamed, "the Retrier's Policy"},
	} {
		if d := r.ExplainOn(cc, c.method); !strings.Contains(d.PolicySource, c.source) {
			t.Errorf("ExplainOn(%s).PolicySource = %q, want it to name %q", c.method, d.PolicySource, c.source)
		}
	}
	if d := r.ExplainOn(cc, unary); d.Policy == nil || d.MaxAttempts != 4 || len(d.Codes) != 2 || d.Safety != interceptor.Idempotent {
		t.Errorf("ExplainOn(%s): %v, want the owners' 4 attempts on INTERNAL and UNAVAILABLE", unary, d)
	}
	x := newXDS(t, bufconntest.NewServerTCP(t, script), ownersRoute())
	for _, c := range []struct {
		name    string
		opts    []grpc.DialOption
		explain func(d interceptor.Decision) string
		says    string
	}{
		{"XDSDialOptions", r.XDSDialOptions(), func(d interceptor.Decision) string { return d.GRPCRetries }, "known only when the call is made"},
		{"DialOptions", r.DialOptions(), func(d interceptor.Decision) string { return d.PolicySource }, "xDS route's retry_policy, if the call's route has one, is not applied"},
	} {
		xcc := x.Conn(t, c.opts...)
		call(ctx, x.srv, xcc, unary, codes.OK, 0)
		if d := r.ExplainOn(xcc, unary); !strings.Contains(c.explain(d), c.says) {
			t.Errorf("%s: ExplainOn(%s) = %v, want it to say %q", c.name, unary, d, c.says)
		}
	}
}
