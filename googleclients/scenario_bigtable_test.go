package googleclients_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"cloud.google.com/go/bigtable/bttest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

const table = "t"

// bigtableFake is bttest with table t (family f) holding rows r0..r9, behind
// a bufconntest.Proxy. cut, when not nil, sees every server stream of ReadRows and
// may end it after some rows.
func bigtableFake(t *testing.T, cut grpc.StreamServerInterceptor, unary grpc.UnaryServerInterceptor) *bufconntest.Proxy {
	t.Helper()
	var opts []grpc.ServerOption
	if cut != nil {
		opts = append(opts, grpc.ChainStreamInterceptor(cut))
	}
	if unary != nil {
		opts = append(opts, grpc.ChainUnaryInterceptor(unary))
	}
	srv, err := bttest.NewServer("127.0.0.1:0", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	ctx := t.Context()
	admin, err := bigtable.NewAdminClient(ctx, "p", "i", fakeEndpoint(srv.Addr)...)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.CreateTable(ctx, table); err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateColumnFamily(ctx, table, "f"); err != nil {
		t.Fatal(err)
	}
	c := bigtableClient(t, nil, srv.Addr)
	tbl := c.Open(table)
	for i := range 10 {
		m := bigtable.NewMutation()
		m.Set("f", "c", 1000, []byte(fmt.Sprint(i)))
		if err := tbl.Apply(ctx, fmt.Sprintf("r%d", i), m); err != nil {
			t.Fatal(err)
		}
	}
	return bufconntest.NewProxy(t, srv.Addr)
}

// bigtableClient is a Bigtable data client of the fake at addr with the
// platform's options, its metrics off (they would be sent to Cloud
// Monitoring) and without its session data plane, which bttest does not
// serve and whose Direct Access probe reaches for Google's metadata server
// by name (metadata.google.internal) whatever GCE_METADATA_HOST says.
func bigtableClient(t *testing.T, platform []option.ClientOption, addr string) *bigtable.Client {
	t.Helper()
	c, err := bigtable.NewClientWithConfig(t.Context(), "p", "i",
		bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}, DisableDirectAccess: true, DisableSession: true},
		with(platform, addr)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// cutReadRowsAfter ends the first ReadRows stream with UNAVAILABLE after it
// sent n responses, as a server restarting mid-scan would.
func cutReadRowsAfter(n int) grpc.StreamServerInterceptor {
	var streams atomic.Int32
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !strings.HasSuffix(info.FullMethod, "/ReadRows") || streams.Add(1) > 1 {
			return handler(srv, ss)
		}
		return handler(srv, &cutStream{ServerStream: ss, left: n})
	}
}

type cutStream struct {
	grpc.ServerStream
	left int
}

func (s *cutStream) SendMsg(m any) error {
	if s.left == 0 {
		return status.Error(codes.Unavailable, "server restarting")
	}
	s.left--
	return s.ServerStream.SendMsg(m)
}

// TestBigtableReadRows: the data client's main path, a scan whose stream
// the server ends after 3 rows, then a scan in a 1 s outage. The client
// resumes after the last row it got, by itself; with the standard options
// it is the only layer, and the rows arrive as alone: each once, in order.
func TestBigtableReadRows(t *testing.T) {
	t.Parallel()
	var fault func(string, int) error
	run := func(platform []option.ClientOption) (int, []string, error) {
		proxy := bigtableFake(t, cutReadRowsAfter(3), nil)
		proxy.FailWith(fault)
		c := bigtableClient(t, platform, proxy.Addr)
		var keys []string
		err := c.Open(table).ReadRows(t.Context(), bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
			keys = append(keys, r.Key())
			return true
		})
		return proxy.Attempts("/ReadRows"), keys, err
	}
	alone, aloneKeys, err := run(nil)
	if err != nil {
		t.Fatalf("alone: %v", err)
	}
	platform, r := counted(t)
	n, keys, err := run(platform)
	if err != nil {
		t.Fatalf("standard options: %v", err)
	}
	if fmt.Sprint(keys) != fmt.Sprint(aloneKeys) || len(keys) != 10 {
		t.Errorf("rows %v with the standard options, %v alone; want r0..r9 once each", keys, aloneKeys)
	}
	checkClientOnly(t, "ReadRows cut after 3 rows", "/ReadRows", r, alone, n)

	fault = unavailableFor("/ReadRows", time.Second)
	if alone, _, err = run(nil); err != nil {
		t.Fatalf("alone: %v", err)
	}
	fault = unavailableFor("/ReadRows", time.Second)
	n, keys, err = run(platform)
	if err != nil || len(keys) != 10 {
		t.Fatalf("standard options: rows %v, %v", keys, err)
	}
	checkClientOnly(t, "ReadRows in a 1 s outage", "/ReadRows", r, alone, n)
}

// TestBigtableMutateRow: Apply of a mutation with its own timestamp, which
// the client retries by itself, in a 1 s outage.
func TestBigtableMutateRow(t *testing.T) {
	t.Parallel()
	run := func(platform []option.ClientOption) (int, error) {
		proxy := bigtableFake(t, nil, nil)
		proxy.FailWith(unavailableFor("/MutateRow", time.Second))
		c := bigtableClient(t, platform, proxy.Addr)
		m := bigtable.NewMutation()
		m.Set("f", "c", 2000, []byte("v"))
		err := c.Open(table).Apply(t.Context(), "r0", m)
		return proxy.Attempts("/MutateRow"), err
	}
	alone, err := run(nil)
	if err != nil {
		t.Fatalf("alone: %v", err)
	}
	platform, r := counted(t)
	n, err := run(platform)
	if err != nil {
		t.Fatalf("standard options: %v", err)
	}
	checkClientOnly(t, "MutateRow in a 1 s outage", "/MutateRow", r, alone, n)
}

// incrementThenFail answers ReadModifyWriteRow with UNAVAILABLE after
// applying it, as a server whose answer is lost would, and counts the
// increments applied.
func incrementThenFail(applied *atomic.Int32) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if strings.HasSuffix(info.FullMethod, "/ReadModifyWriteRow") && err == nil {
			applied.Add(1)
			return nil, status.Error(codes.Unavailable, "answer lost")
		}
		return resp, err
	}
}

// TestBigtableIncrementNotDuplicated: an increment whose answer is lost is
// applied once, with the standard options through the real client (which
// does not retry it) and through the generated stub (where the library
// decides: ReadModifyWriteRow is not idempotent). WithNonIdempotentRetries
// resends it, and every attempt is applied.
func TestBigtableIncrementNotDuplicated(t *testing.T) {
	increment := func(platform []option.ClientOption) (applied int32, err error) {
		var n atomic.Int32
		proxy := bigtableFake(t, nil, incrementThenFail(&n))
		m := bigtable.NewReadModifyWrite()
		m.Increment("f", "n", 1)
		_, err = bigtableClient(t, platform, proxy.Addr).Open(table).ApplyReadModifyWrite(t.Context(), "r0", m)
		return n.Load(), err
	}
	if n, err := increment(standard(t)); n != 1 || status.Code(err) != codes.Unavailable {
		t.Errorf("client with the standard options: %d increments applied, err %v; want 1 and UNAVAILABLE", n, err)
	}

	stub := func(opts ...interceptor.Option) int32 {
		var n atomic.Int32
		proxy := bigtableFake(t, nil, incrementThenFail(&n))
		bt := bigtablepb.NewBigtableClient(stubConn(t, proxy.Addr, opts...))
		_, err := bt.ReadModifyWriteRow(t.Context(), &bigtablepb.ReadModifyWriteRowRequest{
			TableName: "projects/p/instances/i/tables/" + table, RowKey: []byte("r0"),
			Rules: []*bigtablepb.ReadModifyWriteRule{{FamilyName: "f", ColumnQualifier: []byte("n"),
				Rule: &bigtablepb.ReadModifyWriteRule_IncrementAmount{IncrementAmount: 1}}},
		})
		if status.Code(err) != codes.Unavailable {
			t.Errorf("generated stub: err %v, want UNAVAILABLE", err)
		}
		return n.Load()
	}
	if n := stub(); n != 1 {
		t.Errorf("generated stub with the standard options: %d increments applied, want 1", n)
	}
	if n, want := stub(interceptor.WithNonIdempotentRetries()), int32(quick().MaxAttempts); n != want {
		t.Errorf("generated stub WithNonIdempotentRetries: %d increments applied, want %d", n, want)
	}
}

// stubConn is a connection to addr with the standard options' Retrier,
// for generated stubs, which send no x-goog-api-client: the library is
// their only retry layer.
func stubConn(t *testing.T, addr string, opts ...interceptor.Option) *grpc.ClientConn {
	t.Helper()
	r, err := interceptor.New(quick(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("passthrough:///"+addr, append(r.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestBigtableReadRowsGeneratedStub: ReadRows through the generated stub,
// which retries nothing, meeting UNAVAILABLE before its first row: the
// library retries it, a read, and every row arrives once.
func TestBigtableReadRowsGeneratedStub(t *testing.T) {
	proxy := bigtableFake(t, cutReadRowsAfter(0), nil)
	bt := bigtablepb.NewBigtableClient(stubConn(t, proxy.Addr))
	stream, err := bt.ReadRows(t.Context(), &bigtablepb.ReadRowsRequest{TableName: "projects/p/instances/i/tables/" + table})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("after %d rows: %v", len(keys), err)
		}
		for _, ch := range resp.GetChunks() {
			if k := ch.GetRowKey(); len(k) > 0 {
				keys = append(keys, string(k))
			}
		}
	}
	if n := proxy.Attempts("/ReadRows"); n != 2 || len(keys) != 10 {
		t.Errorf("%d attempts, rows %v; want 2 attempts and r0..r9", n, keys)
	}
}

// TestBigtableAdmin: the admin client, which has no CallOptions to adopt,
// lists tables in a 1 s outage; it retries by itself, and stays the only
// layer with the standard options.
func TestBigtableAdmin(t *testing.T) {
	t.Parallel()
	run := func(platform []option.ClientOption) (int, []string, error) {
		proxy := bigtableFake(t, nil, nil)
		proxy.FailWith(unavailableFor("/ListTables", time.Second))
		admin, err := bigtable.NewAdminClient(t.Context(), "p", "i", with(platform, proxy.Addr)...)
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close()
		tables, err := admin.Tables(t.Context())
		return proxy.Attempts("/ListTables"), tables, err
	}
	alone, _, err := run(nil)
	if err != nil {
		t.Fatalf("alone: %v", err)
	}
	platform, r := counted(t)
	n, tables, err := run(platform)
	if err != nil || len(tables) != 1 {
		t.Fatalf("standard options: tables %v, %v", tables, err)
	}
	checkClientOnly(t, "ListTables in a 1 s outage", "/ListTables", r, alone, n)
}
