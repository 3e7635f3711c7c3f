package googleclients

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
)

// bits returns the mask of cs.
func bits(cs ...codes.Code) uint32 {
	var m uint32
	for _, c := range cs {
		m |= 1 << c
	}
	return m
}

// Headers as the clients sent them to an interceptor installed as
// ClientOptions installs the library (googleclients' TestHeaders).
const (
	redisHeader     = "gl-go/1.26.8 gapic/1.29.0 gax/2.27.0 grpc/1.85.0 pb/1.36"
	lroHeader       = "gl-go/1.26.8 gapic/1.5.0 gax/2.27.0 grpc/1.85.0 pb/1.36"
	pubsubHeader    = "gl-go/1.26.8 gccl/2.8.1 gapic/2.8.1 gax/2.27.0 grpc/1.85.0 pb/1.36"
	bigtableHeader  = "gl-go/1.26.8 gax/2.27.0 grpc/1.85.0 gccl/1.58.0"
	spannerHeader   = "gl-go/1.26.8 gccl/1.96.1 gapic/1.96.1 gax/2.27.0 grpc/1.85.0 pb/1.36"
	firestoreHeader = "gl-go/1.26.8 gccl/1.29.2 gapic/1.29.2 gax/2.27.0 grpc/1.85.0 pb/1.36"
	storageHeader   = "gccl-invocation-id/74fe3da3-377b-46b3-8fdb-00362e1e332f gccl-attempt-count/1 gl-go/1.26.8 gccl/1.69.0 gl-go/1.26.8 gapic/1.69.0 gax/2.27.0 grpc/1.85.0 pb/1.36"
)

func TestLookup(t *testing.T) {
	const getOperation = "/google.longrunning.Operations/GetOperation"
	unavailable := bits(codes.Unavailable)
	cases := []struct {
		name, method, header string
		want                 rule
		source               string // a part of want.source
	}{
		{"no header", "/google.cloud.redis.v1.CloudRedis/GetInstance", "", rule{}, ""},
		{"a wrapper's header", "/google.cloud.redis.v1.CloudRedis/GetInstance", "my-wrapper/1.0", rule{}, ""},
		{"no client token", "/google.cloud.redis.v1.CloudRedis/GetInstance", "gl-go/1.26.0 gax/2.27.0 grpc/1.85.0", rule{}, ""},
		{"gccl- tokens are not gccl/", "/google.storage.v2.Storage/ReadObject", "gccl-invocation-id/1 gccl-attempt-count/2", rule{}, ""},
		{"Redis retries nothing", "/google.cloud.redis.v1.CloudRedis/GetInstance", redisHeader,
			rule{client: true, known: true}, "cloud.google.com/go/redis/apiv1 v1.29.0 CallOptions (CloudRedisClient)"},
		{"a known method keeps its entry at another version", "/google.cloud.redis.v1.CloudRedis/GetInstance", "gapic/1.30.0",
			rule{client: true, known: true}, "cloud.google.com/go/redis/apiv1 v1.29.0"},
		{"a generated client's CallOptions", "/google.pubsub.v1.Publisher/GetTopic", "gapic/2.8.1",
			rule{client: true, known: true, codes: bits(codes.Unknown, codes.Aborted, codes.Unavailable)}, "pubsub/v2/apiv1 v2.8.1 CallOptions (TopicAdminClient)"},
		{"op.Wait's polling: the LRO client's gapic/", getOperation, lroHeader,
			rule{client: true, known: true, codes: unavailable}, "cloud.google.com/go/longrunning/autogen v1.5.0"},
		{"a service client's own GetOperation mixin", getOperation, redisHeader,
			rule{client: true, known: true}, ""},
		{"a shared method at no pinned version: the union", getOperation, "gapic/9.9.9",
			rule{client: true, known: true, codes: unavailable}, "union"},
		{"a shared method without gapic/: the union", getOperation, bigtableHeader,
			rule{client: true, known: true, codes: unavailable}, "union"},
		{"StreamingPull: the subscriber's loop, RESOURCE_EXHAUSTED refused on purpose", "/google.pubsub.v1.Subscriber/StreamingPull", pubsubHeader,
			rule{client: true, known: true, codes: bits(codes.Unknown, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.Internal, codes.Unavailable)}, "pullstream.go"},
		{"StreamingPull of the generated client: its opening", "/google.pubsub.v1.Subscriber/StreamingPull", "gapic/2.8.1",
			rule{client: true, known: true, opening: true, codes: bits(codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.Internal, codes.Unavailable)}, "SubscriptionAdminClient"},
		{"Publish", "/google.pubsub.v1.Publisher/Publish", pubsubHeader,
			rule{client: true, known: true, codes: bits(codes.Canceled, codes.Unknown, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.Internal, codes.Unavailable)}, "publisher"},
		{"Bigtable ReadRows resumes", "/google.bigtable.v2.Bigtable/ReadRows", bigtableHeader,
			rule{client: true, known: true, codes: bits(codes.DeadlineExceeded, codes.Aborted, codes.Internal, codes.Unavailable), hinted: bEvery}, "bigtable.go"},
		{"Bigtable ReadModifyWriteRow is never retried", "/google.bigtable.v2.Bigtable/ReadModifyWriteRow", bigtableHeader,
			rule{client: true, known: true}, "never retried"},
		{"Spanner's resumable stream", "/google.spanner.v1.Spanner/ExecuteStreamingSql", spannerHeader,
			rule{client: true, known: true, codes: bits(codes.Internal, codes.Unavailable), hinted: bits(codes.ResourceExhausted)}, "read.go"},
		{"Spanner's unary call: its CallOptions", "/google.spanner.v1.Spanner/ExecuteSql", spannerHeader,
			rule{client: true, known: true, codes: bits(codes.ResourceExhausted, codes.Unavailable)}, "spanner/apiv1 v1.96.1"},
		{"Firestore RunQuery: the opening only", "/google.firestore.v1.Firestore/RunQuery", firestoreHeader,
			rule{client: true, known: true, opening: true, codes: bits(codes.DeadlineExceeded, codes.Internal, codes.Unavailable)}, "firestore/apiv1"},
		{"Firestore Listen: the watch stream", "/google.firestore.v1.Firestore/Listen", firestoreHeader,
			rule{client: true, known: true, codes: bits(codes.Unknown, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Internal, codes.Unavailable, codes.Unauthenticated)}, "watch.go"},
		{"Storage over gRPC", "/google.storage.v2.Storage/ReadObject", storageHeader,
			rule{client: true, known: true, codes: bits(codes.DeadlineExceeded, codes.ResourceExhausted, codes.Internal, codes.Unavailable)}, "grpc_reader.go"},
		{"Storage, a method of no entry: its service's codes", "/google.storage.v2.Storage/ComposeObject", storageHeader,
			rule{client: true, codes: bits(codes.DeadlineExceeded, codes.ResourceExhausted, codes.Internal, codes.Unavailable)}, "unknown method of google.storage.v2.Storage"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := lookup(tc.method, tc.header)
			src := got.source
			got.source = ""
			if got != tc.want || !strings.Contains(src, tc.source) {
				t.Errorf("lookup(%q, %q) = %+v, source %q; want %+v, source with %q", tc.method, tc.header, got, src, tc.want, tc.source)
			}
		})
	}
}

// TestLookupUnknown: an unknown method of a known service is left to the
// client for every code any pinned client retries for a method of that
// service; of an unknown service, for any method.
func TestLookupUnknown(t *testing.T) {
	var publisher uint32
	for _, m := range genMethods {
		if strings.HasPrefix(m.method, "/google.pubsub.v1.Publisher/") {
			publisher |= m.codes
		}
	}
	for _, h := range handEntries {
		if strings.HasPrefix(h.method, "/google.pubsub.v1.Publisher/") {
			publisher |= h.codes
		}
	}
	got := lookup("/google.pubsub.v1.Publisher/SomeNewMethod", "gapic/2.9.0")
	want := rule{client: true, codes: publisher,
		source: "unknown method of google.pubsub.v1.Publisher: every code any pinned client retries for that service"}
	if got != want {
		t.Errorf("an unknown method of Publisher: %+v, want %+v", got, want)
	}

	var every uint32
	for _, m := range genMethods {
		every |= m.codes
	}
	for _, h := range handEntries {
		every |= h.codes
	}
	got = lookup("/google.example.v1.Example/Get", "gl-go/1.26.0 gapic/0.1.0")
	if want := (rule{client: true, codes: every, source: sourceUnknown}); got != want {
		t.Errorf("an unknown service: %+v, want %+v", got, want)
	}
	if every&bits(codes.Unavailable, codes.ResourceExhausted) != bits(codes.Unavailable, codes.ResourceExhausted) {
		t.Errorf("the pinned clients retry %#x in all: want UNAVAILABLE and RESOURCE_EXHAUSTED among them", every)
	}
}

func TestClientTokens(t *testing.T) {
	cases := []struct {
		header        string
		gapic         string
		hasGapic, gcc bool
	}{
		{"", "", false, false},
		{"my-wrapper/1.0", "", false, false},
		{"gapic/", "", true, false},
		{"gl-go/1.26.0 gapic/1.29.0 gax/2.27.0", "1.29.0", true, false},
		{"gapic/1.0.0 gapic/2.0.0", "1.0.0", true, false},
		{"gccl/1.58.0", "", false, true},
		{"gccl-attempt-count/1 xgapic/1.0 gapic", "", false, false},
		{"  gccl/2.8.1   gapic/2.8.1 ", "2.8.1", true, true},
	}
	for _, tc := range cases {
		gapic, hasGapic, hasGccl := clientTokens(tc.header)
		if gapic != tc.gapic || hasGapic != tc.hasGapic || hasGccl != tc.gcc {
			t.Errorf("clientTokens(%q) = %q, %t, %t; want %q, %t, %t", tc.header, gapic, hasGapic, hasGccl, tc.gapic, tc.hasGapic, tc.gcc)
		}
	}
}

func TestExplainRules(t *testing.T) {
	rules := explainRules("/google.longrunning.Operations/GetOperation")
	lo, hi := genRange("/google.longrunning.Operations/GetOperation")
	if want := 1 + (hi - lo) + 1; len(rules) != want || rules[0].client {
		t.Fatalf("explainRules(GetOperation): %d rules, the first %+v; want %d: no client's, one per client, another version's", len(rules), rules[0], want)
	}
	for _, r := range rules[1:] {
		if !r.client || !r.known || r.source == "" {
			t.Errorf("explainRules(GetOperation): %+v", r)
		}
	}
	rules = explainRules("/google.pubsub.v1.Subscriber/StreamingPull")
	if len(rules) != 3 || !rules[1].opening || rules[2].opening || rules[2].codes&bits(codes.ResourceExhausted) == 0 {
		t.Errorf("explainRules(StreamingPull) = %+v; want no client's, the generated client's opening, the subscriber's loop", rules)
	}
	rules = explainRules("/google.example.v1.Example/Get")
	if len(rules) != 2 || rules[1].known || rules[1].source != sourceUnknown {
		t.Errorf("explainRules(an unknown service's method) = %+v", rules)
	}
}

func TestLookupAllocatesNothing(t *testing.T) {
	for _, c := range []struct{ method, header string }{
		{"/google.longrunning.Operations/GetOperation", lroHeader},
		{"/google.longrunning.Operations/GetOperation", "gapic/9.9.9"},
		{"/google.pubsub.v1.Subscriber/StreamingPull", pubsubHeader},
		{"/google.pubsub.v1.Publisher/SomeNewMethod", pubsubHeader},
		{"/google.example.v1.Example/Get", storageHeader},
		{"/google.cloud.redis.v1.CloudRedis/GetInstance", "my-wrapper/1.0"},
	} {
		if n := testing.AllocsPerRun(100, func() { _ = lookup(c.method, c.header) }); n != 0 {
			t.Errorf("lookup(%q, %q): %v allocations, want 0", c.method, c.header, n)
		}
	}
}

// TestData checks the tables' invariants: sorted, well-formed methods,
// client indexes in range, codes 1 to 16.
func TestData(t *testing.T) {
	wellFormed := func(m string) bool {
		i := strings.LastIndexByte(m, '/')
		return strings.HasPrefix(m, "/") && i > 1 && i < len(m)-1 && strings.Count(m, "/") == 2
	}
	for i, m := range genMethods {
		if !wellFormed(m.method) || int(m.client) >= len(genClients) || m.codes&^bEvery != 0 {
			t.Errorf("genMethods[%d] = %+v", i, m)
		}
		if i > 0 {
			p := genMethods[i-1]
			if p.method > m.method || p.method == m.method && p.client >= m.client {
				t.Errorf("genMethods[%d] (%s, %d) after (%s, %d): not sorted", i, m.method, m.client, p.method, p.client)
			}
		}
	}
	for i, h := range handEntries {
		if !wellFormed(h.method) || h.codes&^bEvery != 0 || h.hinted&^bEvery != 0 || h.source == "" {
			t.Errorf("handEntries[%d] = %+v", i, h)
		}
		if i > 0 && handEntries[i-1].method >= h.method {
			t.Errorf("handEntries[%d] %s after %s: not sorted", i, h.method, handEntries[i-1].method)
		}
	}
	for i, c := range genClients {
		if c.gapic == "" || c.module == "" || !strings.HasPrefix(c.pkg, c.module) {
			t.Errorf("genClients[%d] = %+v", i, c)
		}
	}
}

func TestMethodsOf(t *testing.T) {
	got := methodsOf("google.bigtable.v2.Bigtable") // hand-written entries only
	if len(got) != 9 || got[0] != "/google.bigtable.v2.Bigtable/CheckAndMutateRow" || !slices.IsSorted(got) {
		t.Errorf("methodsOf(Bigtable) = %q", got)
	}
	got = methodsOf("google.pubsub.v1.Subscriber") // generated, and the subscriber's loops
	if !slices.Contains(got, "/google.pubsub.v1.Subscriber/StreamingPull") || !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
		t.Errorf("methodsOf(Subscriber) = %q", got)
	}
	if got := methodsOf("google.example.v1.Example"); got != nil {
		t.Errorf("methodsOf(an unknown service) = %q, want none", got)
	}
}
