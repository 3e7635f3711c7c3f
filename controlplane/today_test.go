package controlplane

// The measurements of issue 45, as tests: what the standard options do
// today on a service whose owners publish a retry policy through a control
// plane, beside bare grpc-go on the same plane. Each pins a defect; the
// wiring of the connection's policy (phase 2, on the engine's loop) turns
// it into the acceptance test of the same name in acceptance_test.go, and
// this one goes.

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// TestTodayInternalRetriedByNobody: under DialOptions(DefaultPolicy()),
// INTERNAL, which the owners retry, gets 1 attempt on every plane: a
// twice-failing call fails where bare grpc-go serves it.
func TestTodayInternalRetriedByNobody(t *testing.T) {
	for _, p := range planes {
		t.Run(p.name, func(t *testing.T) {
			pl := p.new(t)
			srv, cc := pl.Backend(), pl.Conn(t, interceptor.DialOptions(grpcbackoff.DefaultPolicy(), idempotent...)...)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			want(t, "INTERNAL always", call(ctx, srv, cc, unary, codes.Internal, always), codes.Internal, 1)
			want(t, "INTERNAL twice", call(ctx, srv, cc, unary, codes.Internal, 2), codes.Internal, 1)
		})
	}
}

// TestTodayUnavailableWaitsTheRecipe: on a manual resolver, in a bubble,
// UNAVAILABLE waits the recipe's 1–2 s, then 2–3 s, where grpc-go waits the
// owners' 8–12 ms, then 16–24 ms; a call with a 1.5 s deadline fails.
func TestTodayUnavailableWaitsTheRecipe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := bufconntest.NewServer(t, script)
		m := newManual(srv, owners)
		ctx := context.Background()
		for _, c := range []struct {
			name  string
			opts  []grpc.DialOption
			waits [][2]time.Duration
		}{
			{"bare", nil, [][2]time.Duration{{8 * time.Millisecond, 12 * time.Millisecond}, {16 * time.Millisecond, 24 * time.Millisecond}}},
			{"library", interceptor.DialOptions(grpcbackoff.DefaultPolicy(), idempotent...), [][2]time.Duration{{time.Second, 2 * time.Second}, {2 * time.Second, 3 * time.Second}}},
		} {
			cc := m.Conn(t, c.opts...)
			r := call(ctx, srv, cc, unary, codes.Unavailable, 2)
			want(t, c.name, r, codes.OK, 3)
			for i, w := range r.Waits() {
				if w < c.waits[i][0] || w > c.waits[i][1] {
					t.Errorf("%s: wait %d: %v, want %v to %v", c.name, i+1, w, c.waits[i][0], c.waits[i][1])
				}
			}
			dctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
			r = call(dctx, srv, cc, unary, codes.Unavailable, 2)
			cancel()
			if c.name == "bare" {
				want(t, "bare, 1.5 s deadline", r, codes.OK, 3)
			} else if r.Code() == codes.OK {
				t.Errorf("library, 1.5 s deadline: %v, want a failure", r)
			}
		}
	})
}

// TestTodayRecipeMissesDeadline: over DNS and xDS, in real time, a call
// with a 300 ms deadline that fails twice with UNAVAILABLE fails under the
// standard options (the recipe's first wait is 1 s) where bare grpc-go
// serves it in 3 attempts.
func TestTodayRecipeMissesDeadline(t *testing.T) {
	for _, p := range planes[1:] {
		t.Run(p.name, func(t *testing.T) {
			pl := p.new(t)
			srv := pl.Backend()
			for _, c := range []struct {
				name string
				opts []grpc.DialOption
				ok   bool
			}{
				{"bare", nil, true},
				{"library", interceptor.DialOptions(grpcbackoff.DefaultPolicy(), idempotent...), false},
			} {
				cc := pl.Conn(t, c.opts...)
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				r := call(ctx, srv, cc, unary, codes.Unavailable, 2)
				cancel()
				switch {
				case c.ok:
					want(t, c.name, r, codes.OK, 3)
				case r.Code() == codes.OK || r.N() != 1:
					t.Errorf("%s: %v, want a failure after 1 attempt", c.name, r)
				}
			}
		})
	}
}

// TestTodayLibraryPolicyWins: under a short Policy of 6 attempts
// (UNAVAILABLE), the owners' UNAVAILABLE gets 6 attempts, not their 4, on
// every plane, and their INTERNAL 1.
func TestTodayLibraryPolicyWins(t *testing.T) {
	for _, p := range planes {
		t.Run(p.name, func(t *testing.T) {
			pl := p.new(t)
			srv, cc := pl.Backend(), pl.Conn(t, interceptor.DialOptions(short(), idempotent...)...)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			want(t, "UNAVAILABLE always", call(ctx, srv, cc, unary, codes.Unavailable, always), codes.Unavailable, 6)
			want(t, "INTERNAL always", call(ctx, srv, cc, unary, codes.Internal, always), codes.Internal, 1)
		})
	}
}

// TestTodayPushesIgnored: the plane lowers maxAttempts to 2 (xDS:
// num_retries 1) at run time; bare grpc-go's next call makes 2 attempts, the
// library's keeps its own 6.
func TestTodayPushesIgnored(t *testing.T) {
	for _, p := range planes {
		t.Run(p.name, func(t *testing.T) {
			pl := p.new(t)
			srv := pl.Backend()
			bare, lib := pl.Conn(t), pl.Conn(t, interceptor.DialOptions(short(), idempotent...)...)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			want(t, "bare, before", call(ctx, srv, bare, unary, codes.Unavailable, always), codes.Unavailable, 4)
			pl.Publish(t, 2)
			eventually(t, "bare grpc-go following the push", func() bool {
				return call(ctx, srv, bare, unary, codes.Unavailable, always).N() == 2
			})
			want(t, "library, after", call(ctx, srv, lib, unary, codes.Unavailable, always), codes.Unavailable, 6)
		})
	}
}

// TestTodayThrottlingIgnored: the resolver adds retryThrottling (2 tokens:
// the first failure throttles); over 5 always-failing calls bare grpc-go
// makes 5 attempts, the library 30.
func TestTodayThrottlingIgnored(t *testing.T) {
	const throttled = `{"maxTokens": 2, "tokenRatio": 0.1}`
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
				{"library", interceptor.DialOptions(short(), idempotent...), 30},
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

// TestTodayNaiveFixMultiplies: the naive fix — the library's interceptors
// without grpc.WithDisableRetry, leaving to grpc-go the methods whose
// connection has a resolver policy — cannot see an xDS route's policy
// (GetMethodConfig has none, TestProbeGetMethodConfig): the route's
// UNAVAILABLE gets 4 × 6 = 24 attempts. Two layers.
func TestTodayNaiveFixMultiplies(t *testing.T) {
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
