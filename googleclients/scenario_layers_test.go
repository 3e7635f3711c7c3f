package googleclients_test

// Issue 26's targets on layers, with a real client (the Pub/Sub
// TopicAdminClient, whose CallOptions retry GetTopic on UNAVAILABLE,
// UNKNOWN and ABORTED, not on RESOURCE_EXHAUSTED) against pstest behind a
// bufconntest.Proxy: the library installed twice, or through
// interceptor.DialOptions, retries in one layer; a user's own stub with a
// foreign x-goog-api-client is retried as the Policy says; and under any
// interleaving of UNAVAILABLE and RESOURCE_EXHAUSTED, the layers never nest.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	gax "github.com/googleapis/gax-go/v2"
	"google.golang.org/api/option"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff/interceptor"
)

// getTopic makes one GetTopic through a TopicAdminClient of the fake built
// with platform, its own attempts counted, with a deadline of d, and
// returns what reached the wire and its error.
func getTopic(t *testing.T, platform []option.ClientOption, fault func(string, int) error, d time.Duration) (layers, error) {
	t.Helper()
	_, proxy := pubsubFake(t)
	proxy.FailWith(fault)
	own := newOwnAttempts()
	c, err := vkit.NewTopicAdminClient(t.Context(), counting(own, platform, proxy.Addr)...)
	if err != nil { // not t.Fatal: it runs on goroutines of its own
		t.Error(err)
		return layers{}, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	_, err = c.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topic})
	return layers{proxy.Attempts("/GetTopic"), own.of("/GetTopic")}, err
}

// dialOptions are the dial options of interceptor.DialOptions(quick()) as
// client options, as a platform team would give its "standard dial
// options" to a Google client.
func dialOptions() []option.ClientOption {
	var cos []option.ClientOption
	for _, d := range interceptor.DialOptions(quick()) {
		cos = append(cos, option.WithGRPCDialOption(d))
	}
	return cos
}

// TestInstalledTwiceOnPubSub: the library given to a TopicAdminClient
// twice (the same ClientOptions slice twice, two slices, ClientOptions
// beside interceptor.DialOptions) or as interceptor.DialOptions alone
// retries as one ClientOptions slice does. RESOURCE_EXHAUSTED, which the
// client does not retry, for the whole call: exactly MaxAttempts attempts,
// one of the client (issue 26 found 9 for a 3-attempt Policy installed
// twice). UNAVAILABLE ×2, and UNAVAILABLE for 1 s, which the client
// retries: each of its attempts one on the wire (issue 26 found 24 for 8
// with DialOptions).
func TestInstalledTwiceOnPubSub(t *testing.T) {
	t.Parallel()
	one := standard(t)
	setups := []struct {
		name     string
		platform func() []option.ClientOption
	}{
		{"one ClientOptions slice", func() []option.ClientOption { return one }},
		{"the same slice twice", func() []option.ClientOption { return append(append([]option.ClientOption(nil), one...), one...) }},
		{"two ClientOptions slices", func() []option.ClientOption { return append(standard(t), standard(t)...) }},
		{"ClientOptions and DialOptions", func() []option.ClientOption { return append(standard(t), dialOptions()...) }},
		{"DialOptions alone", dialOptions},
	}
	faults := []struct {
		name    string
		fault   func() func(string, int) error
		clients bool // the code is the client's
	}{
		{"RESOURCE_EXHAUSTED throughout", func() func(string, int) error { return failFor("/GetTopic", time.Minute, codes.ResourceExhausted) }, false},
		{"UNAVAILABLE ×2", func() func(string, int) error { return failFirst("/GetTopic", 2, codes.Unavailable) }, true},
		{"UNAVAILABLE for 1 s", func() func(string, int) error { return unavailableFor("/GetTopic", time.Second) }, true},
	}
	var wg sync.WaitGroup
	for _, s := range setups {
		for _, f := range faults {
			platform := s.platform()
			wg.Go(func() {
				what := s.name + ", " + f.name
				l, err := getTopic(t, platform, f.fault(), 10*time.Second)
				t.Logf("%s: %v, err %v", what, l, err)
				oneLayer(t, what, l, f.clients)
				if f.clients {
					if err != nil {
						t.Errorf("%s: %v; want success", what, err)
					}
				} else if l.wire != quick().MaxAttempts || l.own != 1 || status.Code(err) != codes.ResourceExhausted {
					t.Errorf("%s: %v, err %v; want MaxAttempts (%d) on the wire, one of the client, RESOURCE_EXHAUSTED", what, l, err, quick().MaxAttempts)
				}
			})
		}
	}
	wg.Wait()
}

// TestForeignHeaderStub: a user's own generated stub (pubsubpb on a
// connection with the library's dial options) whose calls carry an
// x-goog-api-client of a wrapper, not of a Google client, is retried as the
// Policy says: UNAVAILABLE twice, then answered, is 3 attempts and success.
// A header with a gapic/ token, a Google client's, leaves UNAVAILABLE to
// that client: one attempt.
func TestForeignHeaderStub(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		header   string
		attempts int
	}{
		{"my-wrapper/1.0", 3},
		{"gl-go/1.26.0 my-wrapper/1.0", 3},
		{"gl-go/1.26.0 gapic/2.8.1 gax/2.27.0 grpc/1.85.0", 1},
	} {
		_, proxy := pubsubFake(t)
		proxy.FailWith(failFirst("/GetTopic", 2, codes.Unavailable))
		stub := pubsubpb.NewPublisherClient(stubConn(t, proxy.Addr))
		ctx := metadata.AppendToOutgoingContext(t.Context(), "x-goog-api-client", tc.header)
		_, err := stub.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topic})
		n := proxy.Attempts("/GetTopic")
		t.Logf("x-goog-api-client %q: %d attempts, err %v", tc.header, n, err)
		if n != tc.attempts || (tc.attempts == 3) != (err == nil) {
			t.Errorf("x-goog-api-client %q: %d attempts, err %v; want %d", tc.header, n, err, tc.attempts)
		}
	}
}

// TestLayersNeverNest: a real client's GetTopic under random interleavings
// of UNAVAILABLE (the client's to retry) and RESOURCE_EXHAUSTED (the
// library's), some ending with success, some not: the attempts on the wire
// for the one logical call are at most the client's own attempts plus
// MaxAttempts − 1, whatever the sequence. The client's attempts are counted
// by an interceptor given before ClientOptions; that it runs outside the
// library is checked first: RESOURCE_EXHAUSTED twice is 3 attempts on the
// wire and one of the client.
func TestLayersNeverNest(t *testing.T) {
	t.Parallel()
	l, err := getTopic(t, standard(t), failFirst("/GetTopic", 2, codes.ResourceExhausted), 10*time.Second)
	if err != nil || l.wire != 3 || l.own != 1 {
		t.Fatalf("RESOURCE_EXHAUSTED ×2: %v, err %v; want 3 on the wire, 1 of the client: the counting interceptor is not outside the library's", l, err)
	}
	rng := rand.New(rand.NewPCG(26, 2026))
	const trials = 24
	var wg sync.WaitGroup
	for i := range trials {
		// A sequence of 1 to 12 faults, each UNAVAILABLE or
		// RESOURCE_EXHAUSTED, then success (or, one trial in four, the
		// last fault for the rest of the call).
		seq := make([]codes.Code, 1+rng.IntN(12))
		for j := range seq {
			seq[j] = codes.Unavailable
			if rng.IntN(2) == 0 {
				seq[j] = codes.ResourceExhausted
			}
		}
		endless := rng.IntN(4) == 0
		wg.Go(func() {
			var mu sync.Mutex
			n := 0
			fault := func(method string, _ int) error {
				if !strings.HasSuffix(method, "/GetTopic") {
					return nil
				}
				mu.Lock()
				defer mu.Unlock()
				n++
				switch {
				case n <= len(seq):
					return status.Error(seq[n-1], "fake fault")
				case endless:
					return status.Error(seq[len(seq)-1], "fake fault, for good")
				}
				return nil
			}
			l, err := getTopic(t, standard(t), fault, 3*time.Second)
			what := fmt.Sprintf("trial %d: %v, then %s", i, seq, map[bool]string{true: "the last for good", false: "success"}[endless])
			t.Logf("%s: %v, err %v", what, l, err)
			oneLayer(t, what, l, false)
		})
	}
	wg.Wait()
}

// sequence fails the attempts of the methods whose name ends with suffix
// with the codes of seq, in turn, then lets them through.
func sequence(suffix string, seq ...codes.Code) func(string, int) error {
	var mu sync.Mutex
	n := 0
	return func(method string, _ int) error {
		if !strings.HasSuffix(method, suffix) {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if n++; n <= len(seq) {
			return status.Error(seq[n-1], "fake fault")
		}
		return nil
	}
}

// TestLayersNeverNestWithGaxTracing: TestLayersNeverNest's bound with gax's
// tracing on (GOOGLE_SDK_GO_EXPERIMENTAL_TRACING=true, which a platform
// team may set for Cloud Trace), on one sequence: RESOURCE_EXHAUSTED twice
// then UNAVAILABLE, three times, then success. The library retries the
// first two of each client attempt, the client the third; across the
// client's attempts the library has MaxAttempts − 1 = 4 retries in all, so
// the third client attempt's RESOURCE_EXHAUSTED ends the call: 7 attempts
// on the wire, 3 of the client. With tracing, gax.Invoke gives each
// attempt a context of its own (callctx.WithTelemetryContext with its
// resend_count), which the library's memory of a client's call, keyed by
// the context, does not know: it retries afresh under each client attempt.
// Failing at 9ee8684 and 3c5bb22: 10 attempts on the wire, 4 of the client.
func TestLayersNeverNestWithGaxTracing(t *testing.T) {
	re, u := codes.ResourceExhausted, codes.Unavailable
	seq := []codes.Code{re, re, u, re, re, u, re, re, u}
	l, err := getTopic(t, standard(t), sequence("/GetTopic", seq...), 10*time.Second)
	t.Logf("gax tracing off, (RE, RE, U) ×3 then success: %v, err %v", l, err)
	if l.wire != 7 || l.own != 3 || status.Code(err) != re {
		t.Errorf("gax tracing off, (RE, RE, U) ×3 then success: %v, err %v; want 7 attempts on the wire, 3 of the client, RESOURCE_EXHAUSTED", l, err)
	}

	t.Cleanup(gax.TestOnlyResetIsFeatureEnabled) // after the variable is restored
	t.Setenv("GOOGLE_SDK_GO_EXPERIMENTAL_TRACING", "true")
	gax.TestOnlyResetIsFeatureEnabled() // gax reads its features once
	l, err = getTopic(t, standard(t), sequence("/GetTopic", seq...), 10*time.Second)
	t.Logf("gax tracing on, (RE, RE, U) ×3 then success: %v, err %v", l, err)
	oneLayer(t, "gax tracing on, (RE, RE, U) ×3 then success", l, false)
}
