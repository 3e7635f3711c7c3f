package opentelemetry_test

// Issue 43: a resumed server stream is recorded as a call that retried
// (gRFC A96): its resumes are its retries, its waits its retry delay.

import (
	"io"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
	"github.com/platformkit/grpcbackoff/internal/logtail"
	"github.com/platformkit/grpcbackoff/opentelemetry"
)

// TestResumeMetrics: a Tail that resumes four times (after 100 records,
// 100 more, then twice at once: waits of 1, 1, 2 and 4 s) and then
// delivers the rest is a call of 4 retries and 8 s of retry delay; one that
// delivers 10 records and then fails on every open gives up after
// MaxAttempts (5) opens in a row, 4 retries and 15 s of waits.
func TestResumeMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, mp := newReader()
		u := codes.Unavailable
		srv := logtail.NewServer(t, logtail.Options{Records: 1000, Every: 10 * time.Millisecond, Script: logtail.Faults(
			logtail.Fail(100, u), logtail.Fail(100, codes.ResourceExhausted), logtail.Fail(0, u), logtail.Fail(0, u),
			logtail.Fault{}, // the first call's last open: the rest
			logtail.Fail(10, u), logtail.Fail(0, u), logtail.Fail(0, u), logtail.Fail(0, u), logtail.Fail(0, u)),
		})
		p := bufconntest.Exact()
		p.MaxAttempts = 5
		next := func(_ int64, r *logtail.Record) int64 { return r.GetOffset() + 1 }
		reopen := func(req *logtail.TailRequest, next int64) (*logtail.TailRequest, error) {
			req.Offset = next
			return req, nil
		}
		c := srv.Client(t, interceptor.DialOptions(p, interceptor.WithoutThrottle(),
			interceptor.WithResume(logtail.LogTail_Tail_FullMethodName, next, reopen),
			newRecorder(t, opentelemetry.Options{MeterProvider: mp}).Option())...)
		tail := func() (int, error) {
			s, err := c.Tail(t.Context(), &logtail.TailRequest{})
			if err != nil {
				return 0, err
			}
			for n := 0; ; n++ {
				if _, err := s.Recv(); err == io.EOF {
					return n, nil
				} else if err != nil {
					return n, err
				}
			}
		}
		if n, err := tail(); n != 1000 || err != nil {
			t.Fatalf("the first Tail: %d records, %v; want 1000 and the end", n, err)
		}
		if n, err := tail(); n != 10 || err == nil {
			t.Fatalf("the second Tail: %d records, %v; want 10, then a failure", n, err)
		}
		const labels = "grpc.method=grpcbackoff.logtail.v1.LogTail/Tail grpc.target=passthrough:///bufconn"
		got := collect(t, reader)
		check(t, got, opentelemetry.MetricCallRetries, countBounds, map[string]string{labels: "n=2 sum=8 min=4 max=4 <=4:2"})
		check(t, got, opentelemetry.MetricCallRetryDelay, opentelemetry.LatencyBuckets, map[string]string{labels: "n=2 sum=23 min=8 max=15 <=10:1 <=20:1"})
		check(t, got, opentelemetry.MetricCallGaveUp, nil, map[string]string{
			"grpc.method=grpcbackoff.logtail.v1.LogTail/Tail grpc.status=UNAVAILABLE grpc.target=passthrough:///bufconn grpcbackoff.reason=exhausted": "1",
		})
	})
}
