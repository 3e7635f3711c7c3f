package connpolicy

import (
	"context"
	"net"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
	"github.com/platformkit/grpcbackoff/internal/settings"
	"github.com/platformkit/grpcbackoff/serviceconfig"
)

// channel is a ClientConn to a server that answers every call, whose
// manual resolver hands it the service config sc, applied before channel
// returns; push applies another.
func channel(t *testing.T, sc string) (cc *grpc.ClientConn, push func(string)) {
	return channelTo(t, bufconntest.NewServer(t, bufconntest.Steps(bufconntest.Succeed(1))), sc)
}

// channelTo is channel to srv.
func channelTo(t *testing.T, srv *bufconntest.Server, sc string) (cc *grpc.ClientConn, push func(string)) {
	t.Helper()
	r := manual.NewBuilderWithScheme("cp")
	r.BuildCallback = func(_ resolver.Target, rcc resolver.ClientConn, _ resolver.BuildOptions) {
		r.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: "backend"}}, ServiceConfig: rcc.ParseServiceConfig(sc)})
	}
	dial := srv.Dialer()
	base := []grpc.DialOption{
		grpc.WithResolvers(r),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return dial(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}
	cc, err := grpc.NewClient("cp:///backend", base...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	cc.Connect() // builds the resolver, which hands over sc at once
	return cc, func(sc string) {
		r.UpdateState(resolver.State{Addresses: []resolver.Address{{Addr: "backend"}}, ServiceConfig: r.CC().ParseServiceConfig(sc)})
	}
}

const doc = `{"methodConfig": [
	{"name": [{"service": "a.S", "method": "M"}], "timeout": "1.5s", "retryPolicy": {
		"maxAttempts": 4, "initialBackoff": "0.01s", "maxBackoff": "0.1s",
		"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE", "INTERNAL"]}},
	{"name": [{"service": "a.S"}], "retryPolicy": {
		"maxAttempts": 3, "initialBackoff": "2s", "maxBackoff": "1s",
		"backoffMultiplier": 1.5, "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}},
	{"name": [{}], "retryPolicy": {
		"maxAttempts": 5, "initialBackoff": "0.1s", "maxBackoff": "30s",
		"backoffMultiplier": 3, "retryableStatusCodes": ["ABORTED", 14]}},
	{"name": [{"service": "b.S"}], "timeout": "2s"}
]}`

// sorted is p with its codes in ascending order.
func sorted(p grpcbackoff.Policy) grpcbackoff.Policy {
	p.Codes = slices.Sorted(slices.Values(p.Codes))
	return p
}

// TestLookupMapsAsWithServiceConfig: what Lookup returns for a method is
// what serviceconfig.Parse (and so WithServiceConfig) makes of the same
// document's entry for it — the method's own, its service's, the default —
// field for field, codes as a set; and each entry's timeout.
func TestLookupMapsAsWithServiceConfig(t *testing.T) {
	sc, err := serviceconfig.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	cc, _ := channel(t, doc)
	s := New(cc)
	for _, c := range []struct {
		method  string
		entry   int // of sc.Methods, -1 for none
		timeout time.Duration
		from    settings.Level
	}{
		{"/a.S/M", 0, 1500 * time.Millisecond, settings.FromMethod},
		{"/a.S/Other", 1, 0, settings.FromService},
		{"/c.S/Any", 2, 0, settings.FromDefault},
		{"/b.S/Any", -1, 2 * time.Second, settings.FromDefault},
	} {
		got, err := s.Lookup(c.method)
		if err != nil {
			t.Errorf("Lookup(%s): %v", c.method, err)
			continue
		}
		if got.Timeout != c.timeout {
			t.Errorf("Lookup(%s).Timeout = %v, want %v", c.method, got.Timeout, c.timeout)
		}
		if c.entry < 0 {
			if got.Retry != nil {
				t.Errorf("Lookup(%s).Retry = %+v, want none", c.method, got.Retry.Policy)
			}
			continue
		}
		want := sorted(*sc.Methods[c.entry].Policy)
		if got.Retry == nil || !reflect.DeepEqual(got.Retry.Policy, want) {
			t.Errorf("Lookup(%s).Retry = %+v, want serviceconfig's %+v", c.method, got.Retry, want)
		}
		if got.From != c.from {
			t.Errorf("Lookup(%s).From = %v, want %v", c.method, got.From, c.from)
		}
	}
}

// TestGRPCRetries: the codes grpc-go's own retry takes for a method are
// those its config's retryPolicy for it names, as grpc-go parsed it — a
// multiplier below 1 that Lookup refuses included; none without one.
func TestGRPCRetries(t *testing.T) {
	cc, _ := channel(t, strings.Replace(doc, `"backoffMultiplier": 1.5`, `"backoffMultiplier": 0.5`, 1))
	s := New(cc)
	for _, c := range []struct {
		method string
		code   codes.Code
		want   bool
	}{
		{"/a.S/M", codes.Internal, true},
		{"/a.S/M", codes.Aborted, false},
		{"/a.S/Other", codes.ResourceExhausted, true}, // backoffMultiplier 0.5: grpc-go retries it
		{"/c.S/Any", codes.Unavailable, true},
		{"/b.S/Any", codes.Unavailable, false}, // its entry has no retryPolicy
	} {
		if got := s.GRPCRetries(c.method, c.code); got != c.want {
			t.Errorf("GRPCRetries(%s, %v) = %v, want %v", c.method, c.code, got, c.want)
		}
	}
}

// TestLookupFollowsUpdates: each update of the connection's config reaches
// the next Lookup; a config without the entry removes its policy.
func TestLookupFollowsUpdates(t *testing.T) {
	cc, push := channel(t, doc)
	s := New(cc)
	before, _ := s.Lookup("/a.S/M")
	push(strings.Replace(doc, `"maxAttempts": 4`, `"maxAttempts": 2`, 1))
	after, _ := s.Lookup("/a.S/M")
	if before.Retry == nil || after.Retry == nil || before.Retry.MaxAttempts != 4 || after.Retry.MaxAttempts != 2 {
		t.Errorf("MaxAttempts before and after the update: %v, %v; want 4, 2", before.Retry, after.Retry)
	}
	push(`{}`)
	if p, err := s.Lookup("/a.S/M"); p.Set() || err != nil {
		t.Errorf("after {}: Lookup = %+v, %v; want nothing", p, err)
	}
}

// TestLookupRefusesWhatALibraryPolicyCannotDo: grpc-go accepts a
// backoffMultiplier below 1 and retryableStatusCodes of OK alone; Lookup
// returns an error naming the method and the field, and no Retry, every
// time it is asked.
func TestLookupRefusesWhatALibraryPolicyCannotDo(t *testing.T) {
	for _, c := range []struct{ rp, want string }{
		{`"backoffMultiplier": 0.5, "retryableStatusCodes": ["UNAVAILABLE"]`, "Multiplier (0.5) must be at least 1"},
		{`"backoffMultiplier": 2, "retryableStatusCodes": ["OK"]`, "retryableStatusCodes holds no error code"},
	} {
		sc := `{"methodConfig": [{"name": [{"service": "a.S"}], "retryPolicy": {
			"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s", ` + c.rp + `}}]}`
		cc, _ := channel(t, sc)
		s := New(cc)
		for range 2 {
			p, err := s.Lookup("/a.S/M")
			if err == nil || !strings.Contains(err.Error(), "/a.S/M") || !strings.Contains(err.Error(), c.want) || p.Retry != nil {
				t.Errorf("%s: Lookup = %+v, %v; want no Retry and an error naming /a.S/M and %q", c.rp, p, err, c.want)
			}
		}
	}
}

// TestLookupAllocatesNothing: while the config stands, Lookup allocates
// nothing, for a method with a policy and for one without.
func TestLookupAllocatesNothing(t *testing.T) {
	cc, _ := channel(t, doc)
	s := New(cc)
	for _, m := range []string{"/a.S/M", "/b.S/Any"} {
		s.Lookup(m)
		if n := testing.AllocsPerRun(100, func() { s.Lookup(m) }); n != 0 {
			t.Errorf("Lookup(%s): %v allocations, want 0", m, n)
		}
	}
}

// fakeConfigs returns, for /a.S/M alone, a new RetryPolicy on each call: a
// control plane updating its config on every call.
type fakeConfigs struct{ calls int }

//lint:ignore SA1019 the fake returns what grpc-go's ClientConn returns
func (f *fakeConfigs) GetMethodConfig(method string) grpc.MethodConfig {
	var mc grpc.MethodConfig //lint:ignore SA1019 as above
	if method != "/a.S/M" {
		return mc
	}
	f.calls++
	rv := reflect.ValueOf(&mc).Elem().FieldByName("RetryPolicy")
	rv.Set(reflect.New(rv.Type().Elem())) // grpc-go's RetryPolicy type is internal to it
	mc.RetryPolicy.MaxAttempts = 2 + f.calls%3
	mc.RetryPolicy.InitialBackoff, mc.RetryPolicy.MaxBackoff, mc.RetryPolicy.BackoffMultiplier = time.Millisecond, time.Second, 2
	mc.RetryPolicy.RetryableStatusCodes = map[codes.Code]bool{codes.Unavailable: true}
	return mc
}

// TestLookupCacheBounded: a config replaced on every call leaves the cache
// at maxCompiled entries at most, and every answer right.
func TestLookupCacheBounded(t *testing.T) {
	f := &fakeConfigs{}
	s := New(f)
	for i := range 3 * maxCompiled {
		p, err := s.Lookup("/a.S/M")
		if err != nil || p.Retry == nil || p.Retry.MaxAttempts != 2+(i+1)%3 {
			t.Fatalf("Lookup %d: %+v, %v; want MaxAttempts %d", i, p, err, 2+(i+1)%3)
		}
	}
	n := 0
	s.compiled.Range(func(_, _ any) bool { n++; return true })
	if n > maxCompiled {
		t.Errorf("%d policies kept compiled, want at most %d", n, maxCompiled)
	}
}
