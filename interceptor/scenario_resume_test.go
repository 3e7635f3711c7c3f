package interceptor_test

// What issue 43 measured, through the library: a server stream without a
// resume rule whose server restarts mid-stream, over loopback TCP.

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/logtail"
)

// TestStreamRestartWithoutResume: a stream of 1 000 records whose server
// restarts once the caller has 300 gives the caller those 300, then
// UNAVAILABLE, after one open: it committed with its first record, so it
// is not retried (no message is delivered twice), and without a resume
// rule it is not resumed either.
func TestStreamRestartWithoutResume(t *testing.T) {
	t.Parallel()
	// The server holds the stream after 300 records; the test restarts it
	// once the caller has them all.
	srv := logtail.NewServerTCP(t, logtail.Options{Records: 1000, Script: logtail.Faults(logtail.Fault{After: 300, Hang: true})})
	rec := &recorder{}
	cc, err := grpc.NewClient("passthrough:///"+srv.Addr(), append(interceptor.DialOptions(grpcbackoff.DefaultPolicy(), interceptor.WithObserver(rec)),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := logtail.NewLogTailClient(cc).Tail(ctx, &logtail.TailRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var recs []*logtail.Record
	for {
		r, err := s.Recv()
		if err != nil {
			if status.Code(err) != codes.Unavailable {
				t.Errorf("the stream ended with %v, want UNAVAILABLE", err)
			}
			t.Logf("%d records, then %v", len(recs), err)
			break
		}
		recs = append(recs, r)
		if len(recs) == 300 {
			srv.Restart()
		}
	}
	if err := logtail.Check(recs, 0, 300, 8); err != nil {
		t.Error(err)
	}
	if n := len(srv.Opens()); n != 1 || len(rec.retries) != 0 {
		t.Errorf("%d opens, %d retries; want 1 and none", n, len(rec.retries))
	}
}
