package googleclients_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/gaxretry"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

const (
	topic        = "projects/proj/topics/t"
	subscription = "projects/proj/subscriptions/s"
)

// pubsubFake is pstest behind a bufconntest.Proxy, with a topic and a subscription.
func pubsubFake(t *testing.T) (*pstest.Server, *bufconntest.Proxy) {
	t.Helper()
	srv := pstest.NewServer()
	t.Cleanup(func() { srv.Close() })
	ctx := t.Context()
	if _, err := srv.GServer.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.GServer.CreateSubscription(ctx, &pubsubpb.Subscription{Name: subscription, Topic: topic, AckDeadlineSeconds: 10}); err != nil {
		t.Fatal(err)
	}
	return srv, bufconntest.NewProxy(t, srv.Addr)
}

// pubsubClient returns a Pub/Sub client of the fake at addr with the
// platform's options; with the standard options it adopts both admin
// clients' CallOptions, as the README shows.
func pubsubClient(t *testing.T, platform []option.ClientOption, addr string) *pubsub.Client {
	t.Helper()
	c, err := pubsub.NewClient(t.Context(), "proj", with(platform, addr)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if platform != nil {
		if err := gaxretry.Adopt(c.TopicAdminClient.CallOptions); err != nil {
			t.Fatal(err)
		}
		if err := gaxretry.Adopt(c.SubscriptionAdminClient.CallOptions); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// TestPubSubPublish: the publisher's main path, Publish meeting UNAVAILABLE
// once, then a 1 s outage. The publisher retries Publish itself (Google's
// configuration retries it on UNAVAILABLE and six other codes); with the
// standard options it is the only layer, and each message is stored once.
// Before issue 21 the README's recipe crashed the process here (the nil
// Retryer of Adopt), and then nobody retried Publish.
func TestPubSubPublish(t *testing.T) {
	t.Parallel()
	run := func(platform []option.ClientOption, fault func(string, int) error) (int, int, error) {
		srv, proxy := pubsubFake(t)
		proxy.FailWith(fault)
		c := pubsubClient(t, platform, proxy.Addr)
		p := c.Publisher(topic)
		defer p.Stop()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		_, err := p.Publish(ctx, &pubsub.Message{Data: []byte("m")}).Get(ctx)
		return proxy.Attempts("/Publish"), len(srv.Messages()), err
	}
	alone, storedAlone, errAlone := run(nil, unavailableFirst("/Publish", 1))
	platform, r := counted(t)
	std, storedStd, errStd := run(platform, unavailableFirst("/Publish", 1))
	if errAlone != nil || errStd != nil || storedAlone != 1 || storedStd != 1 {
		t.Errorf("Publish: alone %v (%d stored), standard options %v (%d stored); want success and the message stored once", errAlone, storedAlone, errStd, storedStd)
	}
	if alone != 2 || std != 2 {
		t.Errorf("Publish: %d attempts alone, %d with the standard options; want 2 and 2", alone, std)
	}

	alone, storedAlone, errAlone = run(nil, unavailableFor("/Publish", time.Second))
	std, storedStd, errStd = run(platform, unavailableFor("/Publish", time.Second))
	if errAlone != nil || errStd != nil || storedAlone != 1 || storedStd != 1 {
		t.Errorf("Publish in an outage: alone %v (%d stored), standard options %v (%d stored); want success and the message stored once", errAlone, storedAlone, errStd, storedStd)
	}
	checkClientOnly(t, "Publish, UNAVAILABLE once then a 1 s outage", "/Publish", r, alone, std)
}

// TestPubSubSubscriber: the subscriber's main path, its StreamingPull in a
// 1.5 s outage. The subscriber reopens the stream itself; with the standard
// options it is the only layer (before issue 21, 17–25 opens for 4 alone),
// and every message is delivered, once, as alone.
func TestPubSubSubscriber(t *testing.T) {
	t.Parallel()
	const messages = 10
	run := func(platform []option.ClientOption) (opens int, got map[string]int) {
		srv, proxy := pubsubFake(t)
		for i := range messages {
			srv.Publish(topic, fmt.Appendf(nil, "m%d", i), nil)
		}
		proxy.FailWith(unavailableFor("/StreamingPull", 1500*time.Millisecond))
		c := pubsubClient(t, platform, proxy.Addr)
		s := c.Subscriber(subscription)
		s.ReceiveSettings.NumGoroutines = 1
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		var mu sync.Mutex
		got = make(map[string]int)
		err := s.Receive(ctx, func(_ context.Context, m *pubsub.Message) {
			m.Ack()
			mu.Lock()
			defer mu.Unlock()
			got[string(m.Data)]++
			if len(got) == messages {
				cancel()
			}
		})
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Receive: %v", err)
		}
		return proxy.Attempts("/StreamingPull"), got
	}
	alone, gotAlone := run(nil)
	platform, r := counted(t)
	std, gotStd := run(platform)
	checkClientOnly(t, "StreamingPull opens in a 1.5 s outage", "/StreamingPull", r, alone, std)
	for _, got := range []map[string]int{gotAlone, gotStd} {
		if len(got) != messages {
			t.Errorf("received %d distinct messages, want %d: %v", len(got), messages, got)
		}
	}
	if fmt.Sprint(gotAlone) != fmt.Sprint(gotStd) {
		t.Errorf("delivered %v with the standard options, %v alone", gotStd, gotAlone)
	}
	if n := r.of("/Acknowledge") + r.of("/ModifyAckDeadline"); n != 0 {
		t.Errorf("the standard options retried %d acks under the subscriber's own retries", n)
	}
}

// TestPubSubAdmin: an admin call, GetTopic, failing twice, then answered.
// Adopted, the interceptor retries it (the Policy's delays, its budget);
// not adopted, the client's own retry is the only layer; alone, the same.
// 3 attempts each time, also when the second failure is UNKNOWN, which the
// interceptor does not retry and the client does (before, adopted, the
// call ended there). Then GetTopic in a 1 s outage, not adopted: the
// generated client's CallOptions retry it, and the standard options add no
// retry under them.
func TestPubSubAdmin(t *testing.T) {
	t.Parallel()
	run := func(platform []option.ClientOption, adopt bool, fault func(string, int) error) (int, error) {
		_, proxy := pubsubFake(t)
		proxy.FailWith(fault)
		c, err := pubsub.NewClient(t.Context(), "proj", with(platform, proxy.Addr)...)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if adopt {
			if err := gaxretry.Adopt(c.TopicAdminClient.CallOptions); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		_, err = c.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topic})
		return proxy.Attempts("/GetTopic"), err
	}
	// UNAVAILABLE, which the interceptor retries, then UNKNOWN, which it
	// does not and the client does: adopted, the client decides on it.
	unavailableThenUnknown := func(method string, n int) error {
		switch {
		case !strings.HasSuffix(method, "/GetTopic"):
		case n == 1:
			return status.Error(codes.Unavailable, "fake outage")
		case n == 2:
			return status.Error(codes.Unknown, "fake blip")
		}
		return nil
	}
	for _, tc := range []struct {
		name     string
		platform []option.ClientOption
		adopt    bool
	}{{"alone", nil, false}, {"standard, not adopted", standard(t), false}, {"standard, adopted", standard(t), true}} {
		n, err := run(tc.platform, tc.adopt, unavailableFirst("/GetTopic", 2))
		if n != 3 || err != nil {
			t.Errorf("%s: %d attempts, err %v; want 3 and success", tc.name, n, err)
		}
		n, err = run(tc.platform, tc.adopt, unavailableThenUnknown)
		if n != 3 || err != nil {
			t.Errorf("%s, UNAVAILABLE then UNKNOWN: %d attempts, err %v; want 3 and success", tc.name, n, err)
		}
	}

	alone, err := run(nil, false, unavailableFor("/GetTopic", time.Second))
	if err != nil {
		t.Fatalf("alone, in an outage: %v", err)
	}
	platform, r := counted(t)
	n, err := run(platform, false, unavailableFor("/GetTopic", time.Second))
	if err != nil {
		t.Fatalf("standard options, in an outage: %v", err)
	}
	checkClientOnly(t, "GetTopic in a 1 s outage, not adopted", "/GetTopic", r, alone, n)
}

// TestPubSubAdoptOneRetryLayer: GetTopic always UNAVAILABLE for 3 s. Adopted,
// the interceptor makes exactly MaxAttempts attempts and returns its
// *grpcbackoff.Error, which the client does not retry again.
func TestPubSubAdoptOneRetryLayer(t *testing.T) {
	_, proxy := pubsubFake(t)
	proxy.FailWith(func(method string, _ int) error {
		if method == "/google.pubsub.v1.Publisher/GetTopic" {
			return status.Error(codes.Unavailable, "fake outage")
		}
		return nil
	})
	c := pubsubClient(t, standard(t), proxy.Addr)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	_, err := c.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topic})
	var ge *grpcbackoff.Error
	if !errors.As(err, &ge) || ge.Reason != grpcbackoff.ReasonExhausted || status.Code(err) != codes.Unavailable {
		t.Errorf("GetTopic: err = %v (%T), want a *grpcbackoff.Error, attempts exhausted", err, err)
	}
	if n := proxy.Attempts("/GetTopic"); n != quick().MaxAttempts {
		t.Errorf("GetTopic: %d attempts, want exactly MaxAttempts = %d", n, quick().MaxAttempts)
	}
}
