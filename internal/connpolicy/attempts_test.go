package connpolicy

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// tokenCreds are a caller's own per-call credentials.
type tokenCreds string

func (c tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"x-token": string(c)}, nil
}
func (tokenCreds) RequireTransportSecurity() bool { return false }

// TestAttemptsCountsGRPCRetries: on a channel with grpc-go's retry on and a
// resolver's policy of 4 attempts, Attempts counts the 3 attempts of a call
// that fails twice, and 1 of a call served at once; the caller's own
// per-call credentials, given before it, still reach the server on every
// attempt.
func TestAttemptsCountsGRPCRetries(t *testing.T) {
	fails := func(id string, n int) bufconntest.Step {
		if id == "twice" && n < 2 {
			return bufconntest.Fail(status.Error(codes.Unavailable, "refused"))
		}
		return bufconntest.Succeed(1)
	}
	srv := bufconntest.NewServer(t, fails)
	cc, _ := channelTo(t, srv, `{"methodConfig": [{"name": [{}], "retryPolicy": {
		"maxAttempts": 4, "initialBackoff": "0.001s", "maxBackoff": "0.01s",
		"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []struct {
		id      string
		n       int
		retried bool
	}{{"twice", 3, true}, {"once", 1, false}} {
		a := Get()
		defer a.Release()
		opts := []grpc.CallOption{grpc.PerRPCCredentials(tokenCreds("t"))}
		opts = append(opts, a.CallOption(opts))
		cctx := metadata.AppendToOutgoingContext(ctx, bufconntest.StreamKey, c.id)
		if err := cc.Invoke(cctx, "/a.S/M", new(emptypb.Empty), new(emptypb.Empty), opts...); err != nil {
			t.Fatalf("%s: %v", c.id, err)
		}
		if a.N() != c.n || a.GRPCRetried() != c.retried {
			t.Errorf("%s: N() = %d, GRPCRetried() = %v; want %d, %v", c.id, a.N(), a.GRPCRetried(), c.n, c.retried)
		}
		var tokens []string
		for _, at := range srv.Attempts(c.id) {
			tokens = append(tokens, at.MD.Get("x-token")...)
		}
		if want := slices.Repeat([]string{"t"}, c.n); !slices.Equal(tokens, want) {
			t.Errorf("%s: the caller's credentials reached the server as %q, want %q", c.id, tokens, want)
		}
	}
}

// TestAttemptsPooled: an Attempts from Get counts from 0, forgets the last
// call's credentials, and Get, CallOption and Release allocate nothing once
// the pool holds one.
func TestAttemptsPooled(t *testing.T) {
	a := Get()
	a.CallOption([]grpc.CallOption{grpc.PerRPCCredentials(tokenCreds("t"))})
	if md, err := a.GetRequestMetadata(context.Background()); err != nil || a.N() != 1 || md["x-token"] != "t" {
		t.Fatalf("first use: N() = %d, metadata %v, %v; want 1, the caller's token", a.N(), md, err)
	}
	a.Release()
	b := Get()
	b.CallOption(nil)
	if md, _ := b.GetRequestMetadata(context.Background()); b.N() != 1 || md != nil {
		t.Errorf("reused: N() = %d, metadata %v; want 1, none", b.N(), md)
	}
	b.Release()
	if n := testing.AllocsPerRun(100, func() { c := Get(); c.CallOption(nil); c.Release() }); n != 0 {
		t.Errorf("Get, CallOption, Release: %v allocations, want 0", n)
	}
}

// TestXDS: the canonical targets of xDS channels, and others.
func TestXDS(t *testing.T) {
	for target, want := range map[string]bool{
		"xds:///svc":                           true,
		"xds://authority/svc":                  true,
		"google-c2p:///spanner.googleapis.com": true,
		"dns:///svc:443":                       false,
		"passthrough:///bufconn":               false,
		"unix:///tmp/s":                        false,
	} {
		if got := XDS(target); got != want {
			t.Errorf("XDS(%q) = %v, want %v", target, got, want)
		}
	}
}
