package googleclients_test

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	firestore "cloud.google.com/go/firestore"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"cloud.google.com/go/pubsub/v2"
	redis "cloud.google.com/go/redis/apiv1"
	"cloud.google.com/go/redis/apiv1/redispb"
	"cloud.google.com/go/spanner"
	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"cloud.google.com/go/storage"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/platformkit/grpcbackoff/googleclients"
)

// headers records the x-goog-api-client values of calls, by method: as a
// client-side interceptor installed as gaxretry installs the library's sees
// them, and as the server receives them.
type headers struct {
	mu             sync.Mutex
	client, server map[string][]string
}

func (h *headers) add(m map[string][]string, method string, md metadata.MD) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m[method] = append(m[method], strings.Join(md.Get("x-goog-api-client"), " | "))
}

func (h *headers) get(m map[string][]string, method string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(m[method])
}

// fake is a loopback gRPC server that records each call's metadata and
// answers NotFound, except what the clients need to reach the call measured:
// an unfinished operation for CreateInstance, sessions for Spanner.
func (h *headers) fake(stream grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(stream)
	md, _ := metadata.FromIncomingContext(stream.Context())
	h.add(h.server, method, md)
	if err := stream.RecvMsg(new(emptypb.Empty)); err != nil {
		return err
	}
	const db = "projects/p/instances/i/databases/d"
	switch method {
	case "/google.cloud.redis.v1.CloudRedis/CreateInstance":
		return stream.SendMsg(&longrunningpb.Operation{Name: "projects/p/locations/l/operations/o1"})
	case "/google.spanner.v1.Spanner/CreateSession":
		return stream.SendMsg(&spannerpb.Session{Name: db + "/sessions/m", Multiplexed: true})
	case "/google.spanner.v1.Spanner/BatchCreateSessions":
		return stream.SendMsg(&spannerpb.BatchCreateSessionsResponse{Session: []*spannerpb.Session{{Name: db + "/sessions/s"}}})
	}
	return status.Error(codes.NotFound, "googleclients: headers test")
}

// TestHeaders makes one call through each client family against a loopback
// server, and checks the x-goog-api-client tokens the data's lookup relies
// on: gapic/VERSION for a generated client, at its pinned version; gccl/VERSION
// for a hand-written one; the LRO client's own gapic/ for op.Wait's polling,
// which tells it from a service client's GetOperation mixin. It logs what
// it saw.
func TestHeaders(t *testing.T) {
	h := &headers{client: map[string][]string{}, server: map[string][]string{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error { return h.fake(stream) }))
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	addr := lis.Addr().String()

	opts := []option.ClientOption{
		option.WithEndpoint(addr),
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
		option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, o ...grpc.CallOption) error {
			md, _ := metadata.FromOutgoingContext(ctx)
			h.add(h.client, method, md)
			return invoker(ctx, method, req, reply, cc, o...)
		})),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, o ...grpc.CallOption) (grpc.ClientStream, error) {
			md, _ := metadata.FromOutgoingContext(ctx)
			h.add(h.client, method, md)
			return streamer(ctx, desc, cc, method, o...)
		})),
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	// A generated client, its GetOperation mixin, and op.Wait's polling.
	rc, err := redis.NewCloudRedisClient(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	_, _ = rc.GetInstance(ctx, &redispb.GetInstanceRequest{Name: "projects/p/locations/l/instances/i"})
	_, _ = rc.GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: "projects/p/locations/l/operations/o1"})
	op, err := rc.CreateInstance(ctx, &redispb.CreateInstanceRequest{Parent: "projects/p/locations/l", InstanceId: "i"})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = op.Wait(ctx)
	// op.Wait's GetOperation is the second one the server saw.

	// Pub/Sub: the publisher and the subscriber.
	ps, err := pubsub.NewClient(ctx, "p", opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	pub := ps.Publisher("t")
	_, _ = pub.Publish(ctx, &pubsub.Message{Data: []byte("x")}).Get(ctx)
	pub.Stop()
	_ = ps.Subscriber("s").Receive(ctx, func(context.Context, *pubsub.Message) {})

	// Bigtable's data client.
	bt, err := bigtable.NewClientWithConfig(ctx, "p", "i",
		bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}, DisableDirectAccess: true, DisableSession: true}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer bt.Close()
	_, _ = bt.Open("t").ReadRow(ctx, "r")

	// Spanner's data client.
	sp, err := spanner.NewClientWithConfig(ctx, "projects/p/instances/i/databases/d",
		spanner.ClientConfig{DisableNativeMetrics: true}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	_, _ = sp.Single().Query(ctx, spanner.Statement{SQL: "SELECT 1"}).Next()

	// Firestore's client.
	fs, err := firestore.NewClient(ctx, "p", opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	_, _ = fs.Doc("c/d").Get(ctx)

	// Storage over gRPC, through its emulator setting: no DirectPath, no
	// metrics exporter.
	t.Setenv("STORAGE_EMULATOR_HOST_GRPC", addr)
	st, err := storage.NewGRPCClient(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if r, err := st.Bucket("b").Object("o").NewReader(ctx); err == nil {
		r.Close()
	}

	gen, err := googleclients.Generate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pinned := func(pkg, name string) string {
		for _, c := range gen.Clients {
			if c.Package == pkg && c.Name == name {
				return c.Gapic
			}
		}
		t.Fatalf("no pinned client %s.%s", pkg, name)
		return ""
	}
	redisV := pinned("cloud.google.com/go/redis/apiv1", "CloudRedisClient")
	lroV := pinned("cloud.google.com/go/longrunning/autogen", "OperationsClient")
	pubsubV := pinned("cloud.google.com/go/pubsub/v2/apiv1", "TopicAdminClient")
	spannerV := pinned("cloud.google.com/go/spanner/apiv1", "Client")
	firestoreV := pinned("cloud.google.com/go/firestore/apiv1", "Client")

	cases := []struct {
		family, method string
		at             int    // which call of method (0: the first)
		gapic, gccl    string // the versions their tokens carry; "": no such token
	}{
		{"generated client (Cloud Redis)", "/google.cloud.redis.v1.CloudRedis/GetInstance", 0, redisV, ""},
		{"a service client's GetOperation mixin", "/google.longrunning.Operations/GetOperation", 0, redisV, ""},
		{"op.Wait's polling (the LRO client)", "/google.longrunning.Operations/GetOperation", 1, lroV, ""},
		{"Pub/Sub publisher", "/google.pubsub.v1.Publisher/Publish", 0, pubsubV, pubsubV},
		{"Pub/Sub subscriber", "/google.pubsub.v1.Subscriber/StreamingPull", 0, pubsubV, pubsubV},
		{"Bigtable data client", "/google.bigtable.v2.Bigtable/ReadRows", 0, "", "1.58.0"},
		{"Spanner data client", "/google.spanner.v1.Spanner/ExecuteStreamingSql", 0, spannerV, spannerV},
		{"Firestore client", "/google.firestore.v1.Firestore/BatchGetDocuments", 0, firestoreV, firestoreV},
		{"Storage over gRPC", "/google.storage.v2.Storage/ReadObject", 0, "1.69.0", "1.69.0"},
	}
	for _, tc := range cases {
		for side, m := range map[string]map[string][]string{"interceptor": h.client, "server": h.server} {
			seen := h.get(m, tc.method)
			if len(seen) <= tc.at {
				t.Errorf("%s, %s: %d calls of %s seen, want call %d", tc.family, side, len(seen), tc.method, tc.at+1)
				continue
			}
			v := seen[tc.at]
			t.Logf("%s (%s), %s: %q", tc.family, tc.method, side, v)
			if got := googleclients.Token(v, "gapic"); got != tc.gapic {
				t.Errorf("%s, %s: gapic/%q, want %q, in %q", tc.family, side, got, tc.gapic, v)
			}
			if got := googleclients.Token(v, "gccl"); got != tc.gccl {
				t.Errorf("%s, %s: gccl/%q, want %q, in %q", tc.family, side, got, tc.gccl, v)
			}
		}
	}
	if t.Failed() {
		for _, side := range []map[string][]string{h.client, h.server} {
			for m, v := range side {
				t.Logf("%s: %q", m, v)
			}
		}
	}
}
