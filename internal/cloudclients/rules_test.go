package cloudclients

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff/internal/googledata"
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
		name string
		c    call
		want rule // kind, codes, hinted, opening, known
	}{
		{"no header", call{method: "/google.cloud.redis.v1.CloudRedis/GetInstance"}, rule{}},
		{"a wrapper's header", call{method: "/google.cloud.redis.v1.CloudRedis/GetInstance", header: "my-wrapper/1.0"}, rule{}},
		{"no client token", call{method: "/google.cloud.redis.v1.CloudRedis/GetInstance", header: "gl-go/1.26.0 gax/2.27.0 grpc/1.85.0"}, rule{}},
		{"gccl- tokens are not gccl/", call{method: "/google.storage.v2.Storage/ReadObject", header: "gccl-invocation-id/1 gccl-attempt-count/2"}, rule{}},
		{"Redis: its file names the method, without a retryPolicy", call{method: "/google.cloud.redis.v1.CloudRedis/GetInstance", header: redisHeader},
			rule{client: true, known: true, kind: fromTable}},
		{"Secret Manager's AccessSecretVersion", call{method: "/google.cloud.secretmanager.v1.SecretManagerService/AccessSecretVersion", header: "gapic/1.14.7"},
			rule{client: true, known: true, kind: fromTable, codes: bits(codes.Unavailable, codes.ResourceExhausted), pause: 60 * time.Second}},
		{"Cloud Tasks, a read", call{method: "/google.cloud.tasks.v2.CloudTasks/GetQueue", header: "gapic/1.21.1"},
			rule{client: true, known: true, kind: fromTable, codes: bits(codes.DeadlineExceeded, codes.Unavailable), pause: 10 * time.Second}},
		{"Cloud Tasks, a write", call{method: "/google.cloud.tasks.v2.CloudTasks/UpdateQueue", header: "gapic/1.21.1"},
			rule{client: true, known: true, kind: fromTable}},
		{"a whole-service entry", call{method: "/google.monitoring.dashboard.v1.DashboardsService/GetDashboard", header: "gapic/1.30.0"},
			rule{client: true, known: true, kind: fromWhole, codes: bits(codes.Unknown, codes.Unavailable), pause: 10 * time.Second}},
		{"a method entry without retryPolicy over the whole-service entry", call{method: "/google.monitoring.dashboard.v1.DashboardsService/CreateDashboard", header: "gapic/1.30.0"},
			rule{client: true, known: true, kind: fromTable}},
		{"a stream: the opening", call{method: "/google.pubsub.v1.Subscriber/StreamingPull", header: "gapic/2.8.1", stream: true},
			rule{client: true, known: true, kind: fromTable, opening: true, codes: bits(codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.Internal, codes.Unavailable), pause: 60 * time.Second}},
		{"an override at the pinned version", call{method: "/google.cloud.memorystore.v1.Memorystore/GetAclPolicy", header: "gapic/1.8.0"},
			rule{client: true, known: true, kind: fromOverride, codes: unavailable, pause: 10 * time.Second}},
		{"the same method at another version: its file", call{method: "/google.cloud.memorystore.v1.Memorystore/GetAclPolicy", header: "gapic/1.9.0"},
			rule{client: true, kind: unknownMethod, pause: 10 * time.Second}},
		{"op.Wait's polling: the LRO client's gapic/", call{method: getOperation, header: lroHeader},
			rule{client: true, known: true, kind: fromLRO, codes: unavailable, pause: 10 * time.Second}},
		{"the LRO client: another version than the connection's API", call{method: getOperation, header: "gapic/1.6.0", api: "google.cloud.dataproc.v1.ClusterController", apiGapic: "2.28.1"},
			rule{client: true, known: true, kind: fromLRO, codes: unavailable, pause: 10 * time.Second}},
		{"a service client's own GetOperation: its API's file names none", call{method: getOperation, header: redisHeader, api: "google.cloud.redis.v1.CloudRedis", apiGapic: "1.29.0"},
			rule{client: true, known: true, kind: fromMixin}},
		{"a service client's own ListOperations: its API's file names it", call{method: "/google.longrunning.Operations/ListOperations", header: "gapic/1.5.3", api: "google.cloud.retail.v2.ProductService", apiGapic: "1.5.3"},
			rule{client: true, known: true, kind: fromMixin, codes: bits(codes.DeadlineExceeded, codes.Unavailable), pause: 300 * time.Second}},
		{"a mixin whose API is not known", call{method: "/google.cloud.location.Locations/ListLocations", header: "gapic/2.28.1"},
			rule{client: true, kind: unknownMixin}},
		{"StreamingPull: the subscriber's loop, RESOURCE_EXHAUSTED refused on purpose", call{method: "/google.pubsub.v1.Subscriber/StreamingPull", header: pubsubHeader, stream: true},
			rule{client: true, known: true, kind: fromHand, codes: bits(codes.Unknown, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.Internal, codes.Unavailable)}},
		{"Publish", call{method: "/google.pubsub.v1.Publisher/Publish", header: pubsubHeader},
			rule{client: true, known: true, kind: fromHand, codes: bits(codes.Canceled, codes.Unknown, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.Internal, codes.Unavailable)}},
		{"Pub/Sub's admin call with gccl/: the table", call{method: "/google.pubsub.v1.Publisher/GetTopic", header: pubsubHeader},
			rule{client: true, known: true, kind: fromTable, codes: bits(codes.Unknown, codes.Aborted, codes.Unavailable), pause: 60 * time.Second}},
		{"Bigtable ReadRows resumes", call{method: "/google.bigtable.v2.Bigtable/ReadRows", header: bigtableHeader, stream: true},
			rule{client: true, known: true, kind: fromHand, codes: bits(codes.DeadlineExceeded, codes.Aborted, codes.Internal, codes.Unavailable), hinted: bEvery}},
		{"Spanner's resumable stream", call{method: "/google.spanner.v1.Spanner/ExecuteStreamingSql", header: spannerHeader, stream: true},
			rule{client: true, known: true, kind: fromHand, codes: bits(codes.Internal, codes.Unavailable), hinted: bits(codes.ResourceExhausted)}},
		{"Spanner's unary call: its CallOptions", call{method: "/google.spanner.v1.Spanner/ExecuteSql", header: spannerHeader},
			rule{client: true, known: true, kind: fromTable, codes: bits(codes.ResourceExhausted, codes.Unavailable), pause: 32 * time.Second}},
		{"Storage over gRPC", call{method: "/google.storage.v2.Storage/ReadObject", header: storageHeader, stream: true},
			rule{client: true, known: true, kind: fromHand, codes: bits(codes.DeadlineExceeded, codes.ResourceExhausted, codes.Internal, codes.Unavailable)}},
		{"Storage, a method of no entry: its loop", call{method: "/google.storage.v2.Storage/ComposeObject", header: storageHeader},
			rule{client: true, known: true, kind: fromHandAll, codes: bits(codes.DeadlineExceeded, codes.ResourceExhausted, codes.Internal, codes.Unavailable)}},
		{"an unknown method of a known service", call{method: "/google.pubsub.v1.Publisher/SomeNewMethod", header: "gapic/2.9.0"},
			rule{client: true, kind: unknownMethod, pause: 60 * time.Second}},
		{"an unknown service", call{method: "/google.example.v1.Example/Get", header: "gl-go/1.26.0 gapic/0.1.0"},
			rule{client: true, kind: unknownService}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := lookup(tc.c)
			g := rule{client: got.client, known: got.known, kind: got.kind, codes: got.codes, hinted: got.hinted, opening: got.opening}
			w := tc.want
			w.pause = 0
			if g != w {
				t.Errorf("lookup(%+v) = %+v; want %+v", tc.c, g, w)
			}
			if tc.want.pause != 0 && got.pause != tc.want.pause {
				t.Errorf("lookup(%+v): pause %v, want %v", tc.c, got.pause, tc.want.pause)
			}
		})
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

func TestExplain(t *testing.T) {
	rules := Explain("/google.longrunning.Operations/GetOperation", false)
	if len(rules) != 2 || rules[0].Codes != bits(codes.Unavailable) || !strings.Contains(rules[0].Source, "op.Wait") || rules[1].Codes != 0 {
		t.Errorf("Explain(GetOperation) = %+v; want the LRO client's UNAVAILABLE, then a service client's own call", rules)
	}
	rules = Explain("/google.pubsub.v1.Subscriber/StreamingPull", true)
	if len(rules) != 2 || !rules[0].Opening || rules[1].Opening || rules[1].Codes&bits(codes.ResourceExhausted) == 0 {
		t.Errorf("Explain(StreamingPull) = %+v; want the generated client's opening, the subscriber's loop", rules)
	}
	rules = Explain("/google.cloud.tasks.v2.CloudTasks/GetQueue", false)
	if len(rules) != 1 || !strings.Contains(rules[0].Source, "google/cloud/tasks/v2/cloudtasks_grpc_service_config.json") {
		t.Errorf("Explain(GetQueue) = %+v; want its file", rules)
	}
	rules = Explain("/google.example.v1.Example/Get", false)
	if len(rules) != 1 || rules[0].Known || !strings.Contains(rules[0].Source, "unknown service") {
		t.Errorf("Explain(an unknown service's method) = %+v", rules)
	}
}

func TestLookupAllocatesNothing(t *testing.T) {
	loadTable()
	for _, c := range []call{
		{method: "/google.longrunning.Operations/GetOperation", header: lroHeader},
		{method: "/google.longrunning.Operations/GetOperation", header: "gapic/9.9.9", api: "google.cloud.alloydb.v1.AlloyDBCSQLAdmin", apiGapic: "9.9.9"},
		{method: "/google.longrunning.Operations/ListOperations", header: "gapic/9.9.9", api: "google.cloud.retail.v2.ProductService", apiGapic: "9.9.9"},
		{method: "/google.pubsub.v1.Subscriber/StreamingPull", header: pubsubHeader, stream: true},
		{method: "/google.pubsub.v1.Publisher/SomeNewMethod", header: pubsubHeader},
		{method: "/google.cloud.tasks.v2.CloudTasks/GetQueue", header: "gapic/1.21.1"},
		{method: "/google.example.v1.Example/Get", header: storageHeader},
		{method: "/google.cloud.redis.v1.CloudRedis/GetInstance", header: "my-wrapper/1.0"},
	} {
		if n := testing.AllocsPerRun(100, func() { _ = lookup(c) }); n != 0 {
			t.Errorf("lookup(%+v): %v allocations, want 0", c, n)
		}
	}
}

// TestTable checks the table's invariants: it decodes, from its commit,
// rows sorted, codes 1 to 16; and the deflated text is retries.txt.
func TestTable(t *testing.T) {
	tb := loadTable()
	if tb.err != nil || len(tb.commit) != 40 || len(tb.files) < 400 || len(tb.rows) < 7000 {
		t.Fatalf("table: err %v, commit %q, %d files, %d rows", tb.err, tb.commit, len(tb.files), len(tb.rows))
	}
	for i, r := range tb.rows {
		if p := tb.policies[r.policy]; p.codes&^bEvery != 0 || p.codes != 0 && (p.max < p.initial || p.initial <= 0) {
			t.Errorf("rows[%d] = %+v: policy %+v", i, r, p)
		}
		if i > 0 {
			q := tb.rows[i-1]
			if q.service > r.service || q.service == r.service && (q.method > r.method || q.method == r.method && q.file >= r.file) {
				t.Errorf("rows[%d] %+v after %+v: not sorted", i, r, q)
			}
		}
	}
	text, err := inflate(googledata.RetriesDeflated)
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile("../googledata/retries.txt")
	if err != nil {
		t.Fatal(err)
	}
	if text != string(file) {
		t.Errorf("googledata.RetriesDeflated is not retries.txt: run go generate in internal/googledata")
	}
}

// TestData checks the hand-maintained tables: sorted, well-formed.
func TestData(t *testing.T) {
	wellFormed := func(m string) bool {
		i := strings.LastIndexByte(m, '/')
		return strings.HasPrefix(m, "/") && i > 1 && i < len(m)-1 && strings.Count(m, "/") == 2
	}
	for i, h := range handEntries {
		if !wellFormed(h.method) || h.codes&^bEvery != 0 || h.hinted&^bEvery != 0 || h.source == "" {
			t.Errorf("handEntries[%d] = %+v", i, h)
		}
		if i > 0 && handEntries[i-1].method >= h.method {
			t.Errorf("handEntries[%d] %s after %s: not sorted", i, h.method, handEntries[i-1].method)
		}
	}
	for i, o := range overrides {
		if !wellFormed(o.method) || o.gapic == "" || o.why == "" || i > 0 && overrides[i-1].method > o.method {
			t.Errorf("overrides[%d] = %+v", i, o)
		}
	}
	for i, m := range googledata.PinnedMethods {
		if !wellFormed(m.Method) || m.Why == "" || i > 0 && googledata.PinnedMethods[i-1].Method >= m.Method {
			t.Errorf("googledata.PinnedMethods[%d] = %+v", i, m)
		}
	}
}

func TestMethods(t *testing.T) {
	got, whole := Methods("google.bigtable.v2.Bigtable") // hand-written entries, and the file's
	if !slices.Contains(got, "/google.bigtable.v2.Bigtable/CheckAndMutateRow") || !slices.IsSorted(got) || whole {
		t.Errorf("Methods(Bigtable) = %q, %v", got, whole)
	}
	got, _ = Methods("google.cloud.tasks.v2.CloudTasks")
	if len(got) != 18 || !slices.IsSorted(got) {
		t.Errorf("Methods(CloudTasks) = %q: want its 18", got)
	}
	if got, whole := Methods("google.monitoring.dashboard.v1.DashboardsService"); !whole || len(got) != 3 {
		t.Errorf("Methods(DashboardsService) = %q, %v: want the 3 its file names, and its whole-service entry", got, whole)
	}
	if got, _ := Methods("google.example.v1.Example"); got != nil {
		t.Errorf("Methods(an unknown service) = %q, want none", got)
	}
}

// BenchmarkDecodeTable is the first lookup's decoding of the table:
// inflating retries.txt and indexing its rows.
func BenchmarkDecodeTable(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		text, err := inflate(googledata.RetriesDeflated)
		if err != nil {
			b.Fatal(err)
		}
		var t table
		if err := t.parse(text); err != nil {
			b.Fatal(err)
		}
	}
}
