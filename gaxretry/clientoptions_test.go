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
	if len(co.Get) != 4 || len(co.Mutate) != 3 || get.Retry == nil || get.Retry() == nil || mutate.Retry == nil || mutate.Retry() == nil {
		t.Fatalf("Get: %d options, Mutate: %d; want 2 added once to each, and a Retryer", len(co.Get), len(co.Mutate))
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
