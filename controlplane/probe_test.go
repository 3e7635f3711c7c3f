package controlplane

// Probes of what grpc-go v1.85 lets an interceptor see of a connection's
// retry policy and of grpc-go's own attempts: each pins a fact the design
// of issue 45 rests on (notes/cp.md), so that a grpc-go upgrade that
// changes one fails here first.

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"

	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// seenPolicy is what a unary interceptor read of a call's method through
// cc.GetMethodConfig: its RetryPolicy, and the pointer grpc-go returned.
type seenPolicy struct {
	ptr         any // the *RetryPolicy, nil if none
	maxAttempts int
	initial     time.Duration
	max         time.Duration
	mult        float64
	codes       []codes.Code
	timeout     bool // the MethodConfig had a Timeout
}

func (p seenPolicy) String() string {
	if p.ptr == nil {
		return fmt.Sprintf("no retry policy (timeout %v)", p.timeout)
	}
	return fmt.Sprintf("%d attempts, %v -> %v ×%v, %v", p.maxAttempts, p.initial, p.max, p.mult, p.codes)
}

//lint:ignore SA1019 MethodConfig is what GetMethodConfig returns: the subject of the probe
func policyOf(mc grpc.MethodConfig) seenPolicy {
	rp := mc.RetryPolicy
	if rp == nil {
		return seenPolicy{timeout: mc.Timeout != nil}
	}
	p := seenPolicy{ptr: rp, maxAttempts: rp.MaxAttempts, initial: rp.InitialBackoff, max: rp.MaxBackoff, mult: rp.BackoffMultiplier, timeout: mc.Timeout != nil}
	for c, on := range rp.RetryableStatusCodes {
		if on {
			p.codes = append(p.codes, c)
		}
	}
	slices.Sort(p.codes)
	return p
}

// reader is a unary interceptor that reads cc.GetMethodConfig(method) on
// every call, before the call's first attempt and after its last.
type reader struct {
	mu            sync.Mutex
	before, after []seenPolicy
}

func (r *reader) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	before := policyOf(cc.GetMethodConfig(method))
	err := invoker(ctx, method, req, reply, cc, opts...)
	after := policyOf(cc.GetMethodConfig(method))
	r.mu.Lock()
	r.before, r.after = append(r.before, before), append(r.after, after)
	r.mu.Unlock()
	return err
}

func (r *reader) last() seenPolicy {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.before[len(r.before)-1]
}

// TestProbeGetMethodConfig: inside a unary interceptor, with grpc-go's
// retry off, cc.GetMethodConfig(method).RetryPolicy is the resolver's
// policy (manual resolver and DNS TXT alike) — but not before a new
// channel's first call has resolved its name: that call's interceptor sees
// none before its attempt and the policy after it (grpc-go applies the
// config before it lets the first attempt through: clientconn.go,
// updateResolverStateAndUnlock, firstResolveEvent) — one pointer while the config
// stands, a new one on each update, which the next call sees; grpc-go caps
// maxAttempts at 5 as it parses; "{}" removes the policy, but a TXT record
// removed leaves the last one in force. On an xDS channel it is nil: the
// route's policy reaches grpc-go per call through the xDS config selector
// (grpc-go internal/xds/resolver/serviceconfig.go, SelectConfig), which no
// interceptor sees.
func TestProbeGetMethodConfig(t *testing.T) {
	owned := seenPolicy{maxAttempts: 4, initial: 10 * time.Millisecond, max: 100 * time.Millisecond, mult: 2, codes: []codes.Code{codes.Internal, codes.Unavailable}}
	same := func(got, want seenPolicy) bool {
		return (got.ptr == nil) == (want.maxAttempts == 0) && got.maxAttempts == want.maxAttempts &&
			got.initial == want.initial && got.max == want.max && got.mult == want.mult && slices.Equal(got.codes, want.codes)
	}
	with := func(n int) seenPolicy { p := owned; p.maxAttempts = n; return p }
	for _, p := range planes[:2] {
		t.Run(p.name, func(t *testing.T) {
			pl := p.new(t)
			var rd reader
			cc := pl.Conn(t, grpc.WithDisableRetry(), grpc.WithChainUnaryInterceptor(rd.intercept))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			srv := pl.Backend()
			check := func(what string, method string, want seenPolicy) seenPolicy {
				t.Helper()
				call(ctx, srv, cc, method, codes.OK, 0)
				got := rd.last()
				if !same(got, want) {
					t.Errorf("%s: GetMethodConfig(%s): %v, want %v", what, method, got, want)
				}
				return got
			}
			call(ctx, srv, cc, unary, codes.OK, 0)
			rd.mu.Lock()
			before, after := rd.before[0], rd.after[0]
			rd.mu.Unlock()
			if !same(before, seenPolicy{}) || !same(after, owned) {
				t.Errorf("a new channel's first call: GetMethodConfig before its attempt %v, after %v; want none, then %v", before, after, owned)
			}
			first := check("at first", unary, owned)
			if again := check("again", unary, owned); again.ptr != first.ptr {
				t.Errorf("two calls under one config: RetryPolicy %p then %p, want one pointer", first.ptr, again.ptr)
			}
			check("at first", unnamed, seenPolicy{})
			pl.Publish(t, 2)
			if got := check("after maxAttempts 2", unary, with(2)); got.ptr == first.ptr {
				t.Errorf("after an update: RetryPolicy %p, the pointer of the config before", got.ptr)
			}
			pl.Publish(t, 6)
			check("after maxAttempts 6 (grpc-go caps at 5)", unary, with(5))
			pl.Publish(t, 0) // "{}"
			check("after {}", unary, seenPolicy{})
			if d, ok := pl.(*dnsPlane); ok {
				pl.Publish(t, 4)
				d.Set(t, "") // no TXT record: grpc-go keeps the config it has
				check("after the TXT record is removed", unary, owned)
			}
		})
	}
	t.Run("xds", func(t *testing.T) {
		x := newXDS(t, bufconntest.NewServerTCP(t, script), ownersRoute())
		var rd reader
		cc := x.Conn(t, grpc.WithChainUnaryInterceptor(rd.intercept))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r := call(ctx, x.srv, cc, unary, codes.Unavailable, 2) // grpc-go's retry is on: the route applies
		want(t, "bare, twice UNAVAILABLE", r, codes.OK, 3)
		if got := rd.last(); got.ptr != nil || got.timeout {
			t.Errorf("xDS: GetMethodConfig(%s): %v, want no retry policy and no timeout", unary, got)
		}
	})
}

// TestProbeXDSRouteNotCapped: grpc-go caps a service config's maxAttempts at
// 5 (WithMaxCallAttempts) as it parses the resolver's JSON, but an xDS
// route's num_retries+1 reaches its retry uncapped.
func TestProbeXDSRouteNotCapped(t *testing.T) {
	x := newXDS(t, bufconntest.NewServerTCP(t, script), routePolicy("unavailable", 6))
	cc := x.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	want(t, "num_retries 6", call(ctx, x.srv, cc, unary, codes.Unavailable, always), codes.Unavailable, 7)
}

// attemptCounter is a stats handler that counts the attempts of each call
// it sees begin: the call's context carries its counter (the tag of a stats
// handler's TagRPC is derived from the call's context).
type attemptCounter struct{}

type countKey struct{}

type counts struct{ all, transparent atomic.Int32 }

func (attemptCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (attemptCounter) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if b, ok := s.(*stats.Begin); ok && b.IsClient() {
		if c, ok := ctx.Value(countKey{}).(*counts); ok {
			c.all.Add(1)
			if b.IsTransparentRetryAttempt {
				c.transparent.Add(1)
			}
		}
	}
}
func (attemptCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (attemptCounter) HandleConn(context.Context, stats.ConnStats)                       {}

// TestProbeStatsHandlerSeesGRPCAttempts: with grpc-go's retry on, a stats
// handler sees each of grpc-go's own attempts of a call begin
// (stats.Begin, IsTransparentRetryAttempt false: grpc-go stream.go,
// newAttemptLocked), on a resolver's channel and on an xDS channel: so a
// library can tell, per call, that grpc-go retried it. The handler is a dial
// option, run on every call of the channel.
func TestProbeStatsHandlerSeesGRPCAttempts(t *testing.T) {
	for _, p := range []int{0, 2} {
		t.Run(planes[p].name, func(t *testing.T) {
			pl := planes[p].new(t)
			cc := pl.Conn(t, grpc.WithStatsHandler(attemptCounter{}))
			c := new(counts)
			ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), countKey{}, c), 10*time.Second)
			defer cancel()
			r := call(ctx, pl.Backend(), cc, unary, codes.Unavailable, 2)
			want(t, "twice UNAVAILABLE", r, codes.OK, 3)
			if c.all.Load() != 3 || c.transparent.Load() != 0 {
				t.Errorf("stats.Begin: %d, of which %d transparent; want 3, none transparent", c.all.Load(), c.transparent.Load())
			}
		})
	}
}

// countingCreds are per-call credentials that add nothing and count the
// attempts they are asked for, delegating to inner if set.
type countingCreds struct {
	n     atomic.Int32
	inner interface {
		GetRequestMetadata(context.Context, ...string) (map[string]string, error)
	}
}

func (c *countingCreds) GetRequestMetadata(ctx context.Context, uri ...string) (map[string]string, error) {
	c.n.Add(1)
	if c.inner != nil {
		return c.inner.GetRequestMetadata(ctx, uri...)
	}
	return nil, nil
}
func (c *countingCreds) RequireTransportSecurity() bool { return false }

// TestProbeCallCredentialsPerAttempt: a per-call signal without a stats
// handler. grpc-go asks a call's PerRPCCredentials (a call option) for
// metadata as each attempt's stream is made (grpc-go
// internal/transport/http2_client.go, createHeaderFields → getCallAuthData),
// so credentials that add nothing count the call's attempts, on an insecure
// channel too (RequireTransportSecurity false). Transparent retries count as
// well: the count cannot tell them apart. Of two such options the later
// wins (rpc_util.go, PerRPCCredsCallOption.before), so a library's must
// wrap the caller's.
func TestProbeCallCredentialsPerAttempt(t *testing.T) {
	for _, p := range []int{0, 2} {
		t.Run(planes[p].name, func(t *testing.T) {
			pl := planes[p].new(t)
			cc := pl.Conn(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c := new(countingCreds)
			want(t, "twice UNAVAILABLE", call(ctx, pl.Backend(), cc, unary, codes.Unavailable, 2, grpc.PerRPCCredentials(c)), codes.OK, 3)
			if c.n.Load() != 3 {
				t.Errorf("GetRequestMetadata: %d calls, want 3", c.n.Load())
			}
			first, second := new(countingCreds), new(countingCreds)
			call(ctx, pl.Backend(), cc, unary, codes.OK, 0, grpc.PerRPCCredentials(first), grpc.PerRPCCredentials(second))
			if first.n.Load() != 0 || second.n.Load() != 1 {
				t.Errorf("two PerRPCCredentials options: the first asked %d times, the second %d; want 0 and 1", first.n.Load(), second.n.Load())
			}
		})
	}
}

// TestProbeOnFinishOncePerCall: grpc.OnFinish runs once per call, after
// grpc-go's last attempt, with the call's error: it tells nothing of the
// attempts before.
func TestProbeOnFinishOncePerCall(t *testing.T) {
	pl := planes[2].new(t)
	cc := pl.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errs []error
	r := call(ctx, pl.Backend(), cc, unary, codes.Unavailable, always, grpc.OnFinish(func(err error) { errs = append(errs, err) }))
	want(t, "UNAVAILABLE always", r, codes.Unavailable, 4)
	if len(errs) != 1 {
		t.Errorf("OnFinish ran %d times, want once", len(errs))
	}
}

// TestProbePreviousAttemptsHeader: grpc-go's transport adds
// grpc-previous-rpc-attempts to its retries (http2_client.go,
// createHeaderFields, from CallHdr.PreviousAttempts): the server sees it
// (the guard reads it); the client's interceptors never do, since it is not
// in the call's outgoing metadata. The library's own retries send it too.
func TestProbePreviousAttemptsHeader(t *testing.T) {
	srv := bufconntest.NewServerTCP(t, script)
	m := newManual(srv, owners)
	var outgoing []string
	peek := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		md, _ := metadata.FromOutgoingContext(ctx)
		outgoing = append(outgoing, strings.Join(md.Get("grpc-previous-rpc-attempts"), ","))
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := call(ctx, srv, m.Conn(t, grpc.WithChainUnaryInterceptor(peek)), unary, codes.Unavailable, 2)
	if got := r.Previous(); !slices.Equal(got, []string{"", "1", "2"}) || !slices.Equal(outgoing, []string{""}) {
		t.Errorf("grpc-go's retries: the server saw grpc-previous-rpc-attempts %q, the interceptor %q; want [\"\" 1 2] and [\"\"]", got, outgoing)
	}
	lib := m.Conn(t, interceptor.DialOptions(short(), idempotent...)...)
	if got := call(ctx, srv, lib, unary, codes.Unavailable, 2).Previous(); !slices.Equal(got, []string{"", "1", "2"}) {
		t.Errorf("the library's retries: the server saw grpc-previous-rpc-attempts %q, want [\"\" 1 2]", got)
	}
}

// TestProbeRetryThrottlingUnexported: grpc-go keeps a resolver's
// retryThrottling in unexported fields (ServiceConfig.retryThrottling, the
// ClientConn's retryThrottler): no exported field or method reads it, so a
// library on a resolver's channel cannot map it.
func TestProbeRetryThrottlingUnexported(t *testing.T) {
	//lint:ignore SA1019 the probe reads the deprecated type's fields
	sc := reflect.TypeFor[grpc.ServiceConfig]()
	f, ok := sc.FieldByName("retryThrottling")
	if !ok || f.IsExported() {
		t.Errorf("grpc.ServiceConfig.retryThrottling: found %v, exported %v; want an unexported field", ok, ok && f.IsExported())
	}
	for _, typ := range []reflect.Type{sc, reflect.PointerTo(sc), reflect.TypeFor[*grpc.ClientConn]()} {
		for m := range typ.Methods() {
			if strings.Contains(strings.ToLower(m.Name), "throttl") {
				t.Errorf("%v has method %s: retryThrottling may be readable now", typ, m.Name)
			}
		}
	}
	for f := range sc.Fields() {
		if f.IsExported() && strings.Contains(strings.ToLower(f.Name), "throttl") {
			t.Errorf("grpc.ServiceConfig has exported field %s", f.Name)
		}
	}
}
