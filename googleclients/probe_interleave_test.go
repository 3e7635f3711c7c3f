package googleclients_test

// Red-team probe of issue 33, item 4: the bound of one call's attempts
// with a real generated client (Pub/Sub's GetTopic, whose client retries
// UNAVAILABLE and not RESOURCE_EXHAUSTED) against pstest over loopback TCP,
// under random interleavings of the two codes, gax's tracing on and off.

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	gax "github.com/googleapis/gax-go/v2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
)

func TestProbeInterleavingsRealClient(t *testing.T) {
	for _, tracing := range []bool{false, true} {
		t.Run(map[bool]string{false: "tracing off", true: "tracing on"}[tracing], func(t *testing.T) {
			if tracing {
				t.Setenv("GOOGLE_SDK_GO_EXPERIMENTAL_TRACING", "true")
			}
			gax.TestOnlyResetIsFeatureEnabled()
			defer gax.TestOnlyResetIsFeatureEnabled()
			if gax.IsFeatureEnabled("TRACING") != tracing {
				t.Fatalf("gax tracing %v, want %v", !tracing, tracing)
			}
			p := grpcbackoff.DefaultPolicy()
			p.Initial, p.Max, p.Jitter, p.MaxAttempts = 5*time.Millisecond, 10*time.Millisecond, 0, 4
			var own atomic.Int32 // the client's attempts: an interceptor before the library's
			count := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				own.Add(1)
				return invoker(ctx, method, req, reply, cc, opts...)
			})
			c, script := scriptedTopicClient(t, p, false, option.WithGRPCDialOption(count))
			rng := rand.New(rand.NewPCG(33, 4))
			for i := range 10 {
				cs := make([]codes.Code, 1+rng.IntN(10))
				for j := range cs {
					cs[j] = []codes.Code{codes.Unavailable, codes.ResourceExhausted}[rng.IntN(2)]
				}
				own.Store(0)
				before := script.set(cs...)
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				_, err := c.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topicName})
				cancel()
				wire, mine := script.count()-before, int(own.Load())
				if wire > mine+p.MaxAttempts-1 {
					t.Errorf("sequence %d %v: %d attempts on the wire, the client's %d; want at most %d (err %v)", i, cs, wire, mine, mine+p.MaxAttempts-1, err)
				}
			}
		})
	}
}
