package gaxretry_test

import (
	"testing"
	"time"

	gax "github.com/googleapis/gax-go/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/gaxretry"
	"github.com/platformkit/grpcbackoff/internal/cloudclients"
)

// TestAdoptFields: Adopt keeps each field's gRPC options and marks the calls
// of every method as handed over; its gax Retryer then leaves a call the
// interceptor retried alone and asks the client's own Retryer otherwise (a
// method the client does not retry has none to ask). A second Adopt changes
// nothing. (Re-derived for issue 21: Adopt turned the client's retry off,
// marked calls CallIdempotent, and added NoRetry to the methods the client
// does not retry.)
func TestAdoptFields(t *testing.T) {
	type callOptions struct {
		Get    []gax.CallOption
		Mutate []gax.CallOption
	}
	keep := grpc.MaxCallRecvMsgSize(1 << 20)
	co := &callOptions{
		Get:    []gax.CallOption{gax.WithGRPCOptions(keep), gax.WithRetry(func() gax.Retryer { return gax.OnCodes([]codes.Code{codes.Unavailable}, gax.Backoff{}) })},
		Mutate: []gax.CallOption{gax.WithTimeout(time.Second)},
	}
	for range 2 {
		if err := gaxretry.Adopt(co); err != nil {
			t.Fatal(err)
		}
	}
	resolve := func(opts []gax.CallOption) gax.CallSettings {
		var s gax.CallSettings
		for _, o := range opts {
			o.Resolve(&s)
		}
		return s
	}
	get, mutate := resolve(co.Get), resolve(co.Mutate)
	if len(co.Get) != 3 || len(co.Mutate) != 2 || get.Retry == nil || get.Retry() == nil || mutate.Retry == nil || mutate.Retry() == nil {
		t.Fatalf("Get: %d options, Mutate: %d; want 1 added once to each, and a Retryer", len(co.Get), len(co.Mutate))
	}
	down := status.Error(codes.Unavailable, "down")
	if _, ok := get.Retry().Retry(down); !ok {
		t.Error("Get: a failure the interceptor did not retry is not left to the client's own Retryer")
	}
	if d, ok := get.Retry().Retry(&grpcbackoff.Error{Err: down, Attempts: 5, Reason: grpcbackoff.ReasonExhausted}); ok {
		t.Errorf("Get: Retry(a *grpcbackoff.Error) = %v, true: the client retries what the interceptor retried", d)
	}
	if d, ok := mutate.Retry().Retry(down); ok {
		t.Errorf("Mutate: Retry(UNAVAILABLE) = %v, true: the client did not retry it", d)
	}
	if len(get.GRPC) != 2 || get.GRPC[0] != keep || len(mutate.GRPC) != 1 {
		t.Errorf("gRPC options: Get %v, Mutate %v; want the field's own, then the mark", get.GRPC, mutate.GRPC)
	}
}

// TestAdoptPerCallRetryerSeen: the mark Adopt puts on each call tells
// whether the call's gax Retryer is Adopt's own (nothing is left to it) or
// a per-call gax.WithRetry's, resolved after Adopt's option, and then
// whether that one retries an error; a later per-call gax.WithRetry(nil)
// leaves nothing to anyone but the interceptor.
func TestAdoptPerCallRetryerSeen(t *testing.T) {
	co := &struct{ Get []gax.CallOption }{}
	if err := gaxretry.Adopt(co); err != nil {
		t.Fatal(err)
	}
	onU := gax.WithRetry(func() gax.Retryer { return gax.OnCodes([]codes.Code{codes.Unavailable}, gax.Backoff{}) })
	down, quota := status.Error(codes.Unavailable, "down"), status.Error(codes.ResourceExhausted, "quota")
	for _, tc := range []struct {
		name        string
		perCall     []gax.CallOption
		down, quota bool
	}{
		{"Adopt's Retryer", nil, false, false},
		{"a per-call gax.WithRetry on UNAVAILABLE", []gax.CallOption{onU}, true, false},
		{"a per-call gax.WithRetry(nil)", []gax.CallOption{gax.WithRetry(nil)}, false, false},
	} {
		var s gax.CallSettings
		for _, o := range append(co.Get, tc.perCall...) {
			o.Resolve(&s)
		}
		var mark *cloudclients.HandedOver
		for _, o := range s.GRPC {
			if m, ok := o.(*cloudclients.HandedOver); ok {
				mark = m
			}
		}
		if mark == nil || mark.Retries == nil {
			t.Fatalf("%s: no mark among the call's gRPC options %v", tc.name, s.GRPC)
		}
		if got := mark.Retries(down); got != tc.down {
			t.Errorf("%s: Retries(UNAVAILABLE) = %v, want %v", tc.name, got, tc.down)
		}
		if got := mark.Retries(quota); got != tc.quota {
			t.Errorf("%s: Retries(RESOURCE_EXHAUSTED) = %v, want %v", tc.name, got, tc.quota)
		}
	}
}
