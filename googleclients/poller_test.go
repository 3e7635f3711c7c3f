package googleclients_test

// A poller that reuses one request object and one context, on the README's
// set-up (ClientOptions and Adopt of the Pub/Sub admin client), against
// pstest over loopback TCP; first written as a red-team probe of issue 33.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/gaxretry"
)

// scriptedGetTopic is a pstest reactor for GetTopic: it answers the codes
// of its script in order, then lets pstest answer; it counts attempts.
type scriptedGetTopic struct {
	mu       sync.Mutex
	script   []codes.Code
	attempts int
}

func (s *scriptedGetTopic) React(any) (bool, any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts++
	if len(s.script) == 0 {
		return false, nil, nil
	}
	c := s.script[0]
	s.script = s.script[1:]
	return true, nil, status.Error(c, "scripted "+c.String())
}

func (s *scriptedGetTopic) set(cs ...codes.Code) (attempts int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script, attempts = cs, s.attempts
	return attempts
}

func (s *scriptedGetTopic) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempts
}

// scriptedTopicClient returns a Pub/Sub client of a pstest server whose
// GetTopic answers script, with topicName created, through
// gaxretry.ClientOptions(p) and more options; its topic admin client's
// CallOptions adopted (gaxretry.Adopt) if adopt.
func scriptedTopicClient(t *testing.T, p grpcbackoff.Policy, adopt bool, more ...option.ClientOption) (*pubsub.Client, *scriptedGetTopic) {
	t.Helper()
	script := &scriptedGetTopic{}
	srv := pstest.NewServer(pstest.ServerReactorOption{FuncName: "GetTopic", Reactor: script})
	t.Cleanup(func() { srv.Close() })
	if _, err := srv.GServer.CreateTopic(t.Context(), &pubsubpb.Topic{Name: topicName}); err != nil {
		t.Fatal(err)
	}
	platform, err := gaxretry.ClientOptions(p)
	if err != nil {
		t.Fatal(err)
	}
	opts := append([]option.ClientOption{option.WithEndpoint(srv.Addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials()))}, more...)
	c, err := pubsub.NewClient(t.Context(), "proj", append(opts, platform...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if adopt {
		if err := gaxretry.Adopt(c.TopicAdminClient.CallOptions); err != nil {
			t.Fatal(err)
		}
	}
	return c, script
}

// pollerPolicy is the Policy of the poller tests: 5 attempts, 20 to 50 ms
// apart.
func pollerPolicy() grpcbackoff.Policy {
	p := grpcbackoff.DefaultPolicy()
	p.Initial, p.Max, p.Jitter, p.MaxAttempts = 20*time.Millisecond, 50*time.Millisecond, 0, 5
	return p
}

// topicName is the topic the poller tests poll.
const topicName = "projects/proj/topics/polled"

// TestPollerAfterFailedCall: a health poller calls GetTopic with one
// request object and one context (its service's), through
// ClientOptions(p) and Adopt of the topic admin client's CallOptions, as
// the README shows. Its first call meets a short outage and fails after
// MaxAttempts (5); the next call, a new call of the poller, meets
// RESOURCE_EXHAUSTED twice, then an answer: the library's to retry (the
// client does not retry RESOURCE_EXHAUSTED; Adopt hands every code to the
// library), which it does for the control, the same call with a new
// request object. Issue 33: "a call whose context is alive is always sent
// at least once; what the memory knows can only lower the library's own
// retries of a call its client resends"; RESOURCE_EXHAUSTED never retried
// by nobody. Adopt's Retryer does not send the first call again, and says
// so (cloudclients.Decline): the second is a call of its own, not the
// client's resend of the first (TestAdoptPerCallRetry: a per-call
// gax.WithRetry, which does resend it, keeps its retries bounded).
func TestPollerAfterFailedCall(t *testing.T) {

	for _, tc := range []struct {
		name       string
		sameObject bool
	}{{"same request object", true}, {"control: a new request object", false}} {
		t.Run(tc.name, func(t *testing.T) {
			c, script := scriptedTopicClient(t, pollerPolicy(), true)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // the poller's job, with its deadline
			defer cancel()
			req := &pubsubpb.GetTopicRequest{Topic: topicName}

			script.set(codes.Unavailable, codes.Unavailable, codes.Unavailable, codes.Unavailable, codes.Unavailable)
			_, err := c.TopicAdminClient.GetTopic(ctx, req)
			var ge *grpcbackoff.Error
			if !errors.As(err, &ge) || status.Code(err) != codes.Unavailable || script.count() != 5 {
				t.Fatalf("the first call: %v after %d attempts; want UNAVAILABLE after 5", err, script.count())
			}

			before := script.set(codes.ResourceExhausted, codes.ResourceExhausted)
			if !tc.sameObject {
				req = &pubsubpb.GetTopicRequest{Topic: topicName}
			}
			_, err = c.TopicAdminClient.GetTopic(ctx, req)
			if n := script.count() - before; err != nil || n != 3 {
				t.Errorf("the poller's next call (RESOURCE_EXHAUSTED twice, then an answer): %v after %d attempts; want success after 3, as with a new request object", err, n)
			}
		})
	}
}

// TestPollerAfterResentCall: the poller's first call is resent by the
// client's own Retryer (ABORTED, a code the Policy does not retry, after a
// retried UNAVAILABLE), and that resend fails once with a code nobody
// retries: the Retrier returns a *grpcbackoff.Error for it too, as it
// retried the call in the client's earlier attempt, so that Adopt's
// Retryer can say it will not send it again. The poller's next call, with
// the same request object and context, meets UNAVAILABLE four times and an
// answer: all its attempts are its own (a reviewer's case: it had 4 and
// failed).
func TestPollerAfterResentCall(t *testing.T) {
	for _, tc := range []struct {
		name       string
		sameObject bool
	}{{"same request object", true}, {"control: a new request object", false}} {
		t.Run(tc.name, func(t *testing.T) {
			c, script := scriptedTopicClient(t, pollerPolicy(), true)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			req := &pubsubpb.GetTopicRequest{Topic: topicName}

			script.set(codes.Unavailable, codes.Aborted, codes.NotFound)
			if _, err := c.TopicAdminClient.GetTopic(ctx, req); status.Code(err) != codes.NotFound || script.count() != 3 {
				t.Fatalf("the first call: %v after %d attempts; want NOT_FOUND after 3", err, script.count())
			}
			before := script.set(codes.Unavailable, codes.Unavailable, codes.Unavailable, codes.Unavailable)
			if !tc.sameObject {
				req = &pubsubpb.GetTopicRequest{Topic: topicName}
			}
			_, err := c.TopicAdminClient.GetTopic(ctx, req)
			if n := script.count() - before; err != nil || n != 5 {
				t.Errorf("the poller's next call (UNAVAILABLE ×4, then an answer): %v after %d attempts; want success after 5", err, n)
			}
		})
	}
}
