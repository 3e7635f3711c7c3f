package googleclients_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	redis "cloud.google.com/go/redis/apiv1"
	"cloud.google.com/go/redis/apiv1/redispb"
	gax "github.com/googleapis/gax-go/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/gaxretry"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
	"github.com/platformkit/grpcbackoff/redistest"
)

// adoptedGetTopic makes one GetTopic, with the per-call options opts,
// through a TopicAdminClient of the fake with the platform's options whose
// CallOptions were given to Adopt, with a deadline of d.
func adoptedGetTopic(t *testing.T, fault func(string, int) error, d time.Duration, opts ...gax.CallOption) (layers, error) {
	t.Helper()
	_, proxy := pubsubFake(t)
	proxy.FailWith(fault)
	own := newOwnAttempts()
	c, err := vkit.NewTopicAdminClient(t.Context(), counting(own, standard(t), proxy.Addr)...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := gaxretry.Adopt(c.CallOptions); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	_, err = c.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topic}, opts...)
	return layers{proxy.Attempts("/GetTopic"), own.of("/GetTopic")}, err
}

// TestAdoptPerCallGRPCOptions: an adopted GetTopic given per-call gRPC
// options (gax.WithGRPCOptions(grpc.Header(&md)), which replaces the gRPC
// options of its CallOptions, Adopt's mark among them) keeps its retries:
// UNAVAILABLE twice, then answered, is 3 attempts on the wire, in one
// layer, and the header arrives. (Which layer: the test logs it. The mark
// is lost with the replaced options, so the library takes the call for the
// client's and leaves UNAVAILABLE to it, and Adopt's Retryer hands it to
// the client's own: 3 attempts of the client, the client's backoff, not
// the Retrier's Policy.)
func TestAdoptPerCallGRPCOptions(t *testing.T) {
	t.Parallel()
	var md metadata.MD
	l, err := adoptedGetTopic(t, failFirst("/GetTopic", 2, codes.Unavailable), 10*time.Second, gax.WithGRPCOptions(grpc.Header(&md)))
	t.Logf("adopted, per-call grpc.Header, UNAVAILABLE ×2: %v, err %v, header %v", l, err, md)
	if err != nil || l.wire != 3 {
		t.Errorf("adopted, per-call grpc.Header, UNAVAILABLE ×2: %v, err %v; want success, 3 attempts on the wire", l, err)
	}
	oneLayer(t, "adopted, per-call grpc.Header, UNAVAILABLE ×2", l, false)
	if l.own != 1 && l.own != l.wire {
		t.Errorf("adopted, per-call grpc.Header, UNAVAILABLE ×2: %v; want one layer, the library's or the client's", l)
	}
	if md == nil {
		t.Errorf("adopted, per-call grpc.Header: no header received")
	}
	// In a 1 s outage, adopted, with and without the per-call option.
	with, err := adoptedGetTopic(t, unavailableFor("/GetTopic", time.Second), 10*time.Second, gax.WithGRPCOptions(grpc.Header(&md)))
	t.Logf("adopted, per-call grpc.Header, UNAVAILABLE for 1 s: %v, err %v", with, err)
	without, err := adoptedGetTopic(t, unavailableFor("/GetTopic", time.Second), 10*time.Second)
	t.Logf("adopted, UNAVAILABLE for 1 s: %v, err %v", without, err)
}

// TestAdoptPerCallRetry: an adopted GetTopic given a per-call gax.WithRetry
// (which replaces Adopt's Retryer) in an outage of the call's whole 2 s
// deadline, of UNAVAILABLE, then of RESOURCE_EXHAUSTED: the per-call
// Retryer retries after the library gave up, with the same context, and
// each of its attempts is sent once: the library's retries across them
// stay within MaxAttempts, at most the client's attempts + MaxAttempts − 1
// on the wire (issue 26 found 24 = 8 × 3). Before issue 33 those attempts
// were refused at once, never sent, with the error the library gave up
// with: a memory that answered for the wire.
func TestAdoptPerCallRetry(t *testing.T) {
	t.Parallel()
	perCall := gax.WithRetry(func() gax.Retryer {
		return gax.OnCodes([]codes.Code{codes.Unavailable, codes.ResourceExhausted}, gax.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond})
	})
	var wg sync.WaitGroup
	for _, code := range []codes.Code{codes.Unavailable, codes.ResourceExhausted} {
		wg.Go(func() {
			l, err := adoptedGetTopic(t, failFor("/GetTopic", time.Minute, code), 2*time.Second, perCall)
			what := fmt.Sprintf("adopted, per-call gax.WithRetry, %v throughout", code)
			t.Logf("%s: %v, err %v", what, l, err)
			if l.wire > l.own+quick().MaxAttempts-1 || l.own < 2 || err == nil {
				t.Errorf("%s: %v, err %v; want at most the client's attempts + MaxAttempts (%d) − 1 on the wire, the client's attempts sent, and an error", what, l, err, quick().MaxAttempts)
			}
		})
	}
	wg.Wait()
}

// TestAdoptOperationWait: Adopt(c.LROClient.CallOptions) hands the polling
// of op.Wait over to the library. op.Wait polls with the LRO client's
// GetOperation, whose CallOptions retry UNAVAILABLE by themselves; adopted,
// its calls are the library's, on every code of the Policy: UNAVAILABLE
// and RESOURCE_EXHAUSTED twice are each 3 attempts on the wire, one of the
// client; in an outage the library makes MaxAttempts attempts, and the LRO
// client does not retry after it gave up: op.Wait returns the library's
// *grpcbackoff.Error.
func TestAdoptOperationWait(t *testing.T) {
	t.Parallel()
	run := func(fault func(string, int) error) (layers, error) {
		srv := redistest.NewServer()
		t.Cleanup(srv.Close)
		proxy := bufconntest.NewProxy(t, "redistest", grpc.WithContextDialer(srv.Dialer()))
		own := newOwnAttempts()
		c, err := redis.NewCloudRedisClient(t.Context(), counting(own, standard(t), proxy.Addr)...)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := gaxretry.Adopt(c.LROClient.CallOptions); err != nil {
			t.Fatal(err)
		}
		op, err := c.CreateInstance(t.Context(), &redispb.CreateInstanceRequest{Parent: parent, InstanceId: "cache",
			Instance: &redispb.Instance{Tier: redispb.Instance_BASIC, MemorySizeGb: 1}})
		if err != nil {
			t.Fatal(err)
		}
		proxy.FailWith(fault)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		_, err = c.CreateInstanceOperation(op.Name()).Wait(ctx)
		return layers{proxy.Attempts("/GetOperation"), own.of("/GetOperation")}, err
	}
	for _, code := range []codes.Code{codes.Unavailable, codes.ResourceExhausted} {
		l, err := run(failFirst("/GetOperation", 2, code))
		what := fmt.Sprintf("op.Wait adopted, GetOperation %v ×2", code)
		t.Logf("%s: %v, err %v", what, l, err)
		if err != nil || l.wire != 3 || l.own != 1 {
			t.Errorf("%s: %v, err %v; want success, 3 attempts on the wire, 1 of the client", what, l, err)
		}
	}
	l, err := run(failFor("/GetOperation", time.Minute, codes.Unavailable))
	t.Logf("op.Wait adopted, GetOperation UNAVAILABLE throughout: %v, err %v", l, err)
	var ge *grpcbackoff.Error
	if l.wire != quick().MaxAttempts || l.own != 1 || !errors.As(err, &ge) || ge.Reason != grpcbackoff.ReasonExhausted {
		t.Errorf("op.Wait adopted, GetOperation UNAVAILABLE throughout: %v, err %v; want MaxAttempts (%d) on the wire, 1 of the client, the library's error", l, err, quick().MaxAttempts)
	}
}
