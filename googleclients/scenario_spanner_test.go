package googleclients_test

import (
	"errors"
	"io"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"cloud.google.com/go/spanner/spannertest"
	"cloud.google.com/go/spanner/spansql"
	"google.golang.org/api/option"
	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

const database = "projects/p/instances/i/databases/d"

// spannerFake is spannertest with table T (K STRING, V INT64) holding row
// k = 1, behind a bufconntest.Proxy.
func spannerFake(t *testing.T) *bufconntest.Proxy {
	t.Helper()
	srv, err := spannertest.NewServer("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	ddl, err := spansql.ParseDDL("", "CREATE TABLE T (K STRING(MAX) NOT NULL, V INT64) PRIMARY KEY (K)")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.UpdateDDL(ddl); err != nil {
		t.Fatal(err)
	}
	proxy := bufconntest.NewProxy(t, srv.Addr)
	if _, err := spannerClient(t, nil, proxy.Addr).Apply(t.Context(), []*spanner.Mutation{
		spanner.InsertOrUpdate("T", []string{"K", "V"}, []any{"k", 1}),
	}); err != nil {
		t.Fatal(err)
	}
	return proxy
}

// spannerClient is a Spanner client of the fake at addr with the platform's
// options, its metrics off (they would be sent to Cloud Monitoring).
func spannerClient(t *testing.T, platform []option.ClientOption, addr string) *spanner.Client {
	t.Helper()
	c, err := spanner.NewClientWithConfig(t.Context(), database, spanner.ClientConfig{DisableNativeMetrics: true}, with(platform, addr)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestSpannerCommit: the client's main write path, Apply, whose Commit is
// refused with RESOURCE_EXHAUSTED for 1 s. The client retries Commit by
// itself; with the standard options it is the only layer (before issue
// 21, 32–40 attempts for 7–8 alone in 2 s), and the write is applied.
func TestSpannerCommit(t *testing.T) {
	t.Parallel()
	run := func(platform []option.ClientOption) (int, int64) {
		proxy := spannerFake(t)
		c := spannerClient(t, platform, proxy.Addr)
		proxy.FailWith(failFor("/Commit", time.Second, codes.ResourceExhausted))
		before := proxy.Attempts("/Commit")
		if _, err := c.Apply(t.Context(), []*spanner.Mutation{
			spanner.Update("T", []string{"K", "V"}, []any{"k", 2}),
		}); err != nil {
			t.Fatalf("Apply: %v", err)
		}
		row, err := c.Single().ReadRow(t.Context(), "T", spanner.Key{"k"}, []string{"V"})
		if err != nil {
			t.Fatal(err)
		}
		var v int64
		if err := row.Column(0, &v); err != nil {
			t.Fatal(err)
		}
		return proxy.Attempts("/Commit") - before, v
	}
	alone, v := run(nil)
	if v != 2 {
		t.Errorf("alone: V = %d after Apply, want 2", v)
	}
	platform, r := counted(t)
	n, v := run(platform)
	if v != 2 {
		t.Errorf("standard options: V = %d after Apply, want 2", v)
	}
	checkClientOnly(t, "Commit refused for 1 s", "/Commit", r, alone, n)
}

// TestSpannerRead: the client's main read path, a read whose StreamingRead
// meets a 1 s outage. The client retries it by itself and stays the only
// layer with the standard options.
func TestSpannerRead(t *testing.T) {
	t.Parallel()
	run := func(platform []option.ClientOption) int {
		proxy := spannerFake(t)
		c := spannerClient(t, platform, proxy.Addr)
		proxy.FailWith(unavailableFor("/StreamingRead", time.Second))
		row, err := c.Single().ReadRow(t.Context(), "T", spanner.Key{"k"}, []string{"V"})
		if err != nil {
			t.Fatalf("ReadRow: %v", err)
		}
		var v int64
		if err := row.Column(0, &v); err != nil || v != 1 {
			t.Errorf("V = %d (%v), want 1", v, err)
		}
		return proxy.Attempts("/StreamingRead")
	}
	alone := run(nil)
	platform, r := counted(t)
	n := run(platform)
	checkClientOnly(t, "StreamingRead in a 1 s outage", "/StreamingRead", r, alone, n)
}

// TestSpannerReadGeneratedStub: StreamingRead through the generated stub,
// which retries nothing, meeting UNAVAILABLE before its first answer: the
// library retries it, a read, and the row arrives. (spannertest serves the
// streaming read only.)
func TestSpannerReadGeneratedStub(t *testing.T) {
	proxy := spannerFake(t)
	sp := spannerpb.NewSpannerClient(stubConn(t, proxy.Addr))
	session, err := sp.CreateSession(t.Context(), &spannerpb.CreateSessionRequest{Database: database})
	if err != nil {
		t.Fatal(err)
	}
	proxy.FailWith(unavailableFirst("/StreamingRead", 1))
	stream, err := sp.StreamingRead(t.Context(), &spannerpb.ReadRequest{
		Session: session.GetName(), Table: "T", Columns: []string{"V"},
		KeySet: &spannerpb.KeySet{All: true},
	})
	if err != nil {
		t.Fatalf("StreamingRead: %v", err)
	}
	var values int
	for {
		part, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("after %d values: %v", values, err)
		}
		values += len(part.GetValues())
	}
	if n := proxy.Attempts("/StreamingRead"); n != 2 || values != 1 {
		t.Errorf("%d attempts, %d values; want 2 attempts and the row's one value", n, values)
	}
}
