package googleclients_test

// Resume rules (interceptor.WithResume, issue 43) beside the Google Cloud
// clients: a client that resumes a stream by itself keeps it, and a rule in
// the platform's standard options for another method changes nothing of
// the client's calls.

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"cloud.google.com/go/firestore/apiv1/firestorepb"
	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"google.golang.org/api/option"

	"github.com/platformkit/grpcbackoff/gaxretry"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/logtail"
)

// errUnsupported is what the rules here say of a resume: they are refused,
// or never asked.
var errUnsupported = errors.New("unsupported")

// TestResumeRuleForAClientsOwnResumption: New refuses a rule for a method
// whose Google Cloud client resumes its streams by itself (Bigtable's
// ReadRows, Spanner's ExecuteStreamingSql): the rule would resume them
// under the client, whose own state of the stream (a row half received,
// the rows held until the next resume token) does not expect it, nor
// would the client's resume then be the only one. A method whose client
// retries only the opening of its streams (Firestore's RunQuery, the
// generated client's) leaves the open stream to the Retrier: its rule is
// taken.
func TestResumeRuleForAClientsOwnResumption(t *testing.T) {
	readRows := interceptor.WithResume("/google.bigtable.v2.Bigtable/ReadRows",
		func(last string, resp *bigtablepb.ReadRowsResponse) string { return last },
		func(req *bigtablepb.ReadRowsRequest, last string) (*bigtablepb.ReadRowsRequest, error) {
			return nil, errUnsupported
		})
	executeSQL := interceptor.WithResume("/google.spanner.v1.Spanner/ExecuteStreamingSql",
		func(tok []byte, rs *spannerpb.PartialResultSet) []byte { return bytes.Clone(rs.GetResumeToken()) },
		func(req *spannerpb.ExecuteSqlRequest, tok []byte) (*spannerpb.ExecuteSqlRequest, error) {
			return nil, errUnsupported
		})
	for name, o := range map[string]interceptor.Option{"Bigtable ReadRows": readRows, "Spanner ExecuteStreamingSql": executeSQL} {
		_, err := gaxretry.ClientOptions(quick(), o)
		if err == nil || !strings.Contains(err.Error(), "a Google Cloud client retries the streams of") ||
			!strings.Contains(err.Error(), "call the method through that client") {
			t.Errorf("%s: ClientOptions = %v, want the rule refused, naming the client's own resumption", name, err)
		}
		if _, err := interceptor.New(quick(), o); err == nil {
			t.Errorf("%s: New took the rule", name)
		}
	}
	runQuery := interceptor.WithResume("/google.firestore.v1.Firestore/RunQuery",
		func(n int, _ *firestorepb.RunQueryResponse) int { return n + 1 },
		func(req *firestorepb.RunQueryRequest, _ int) (*firestorepb.RunQueryRequest, error) {
			return nil, errUnsupported
		})
	if _, err := gaxretry.ClientOptions(quick(), runQuery); err != nil {
		t.Errorf("RunQuery: ClientOptions = %v, want the rule taken: its client retries only the opening", err)
	}
}

// TestBigtableReadRowsBesideARule: the platform's standard options carry a
// resume rule for a service of the platform's own (a log's Tail); the
// Bigtable client's ReadRows, cut after 3 rows, is resumed by the client
// alone, as without the rule: every row once, no retry of the Retrier's.
func TestBigtableReadRowsBesideARule(t *testing.T) {
	t.Parallel()
	tail := interceptor.WithResume(logtail.LogTail_Tail_FullMethodName,
		func(_ int64, r *logtail.Record) int64 { return r.GetOffset() + 1 },
		func(req *logtail.TailRequest, next int64) (*logtail.TailRequest, error) {
			req.Offset = next
			return req, nil
		})
	run := func(platform []option.ClientOption) (int, []string, error) {
		proxy := bigtableFake(t, cutReadRowsAfter(3), nil)
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
	r := &retried{n: make(map[string]int)}
	n, keys, err := run(standard(t, tail, interceptor.WithObserver(r)))
	if err != nil {
		t.Fatalf("standard options with a rule: %v", err)
	}
	if fmt.Sprint(keys) != fmt.Sprint(aloneKeys) || len(keys) != 10 {
		t.Errorf("rows %v with the standard options, %v alone; want r0..r9 once each", keys, aloneKeys)
	}
	if n != alone {
		t.Errorf("%d ReadRows opens with the standard options and a rule, %d alone", n, alone)
	}
	checkClientOnly(t, "ReadRows cut after 3 rows, beside a rule", "/ReadRows", r, alone, n)
}
