package interceptor_test

// Issue 43 beside the other features, as a platform team installs them:
// the standard Policy with AttemptTimeout and the budget, a service
// config's retryPolicy. In virtual time over bufconn. (opentelemetry's
// TestResumeMetrics has the A96 metrics, googleclients' the Google
// clients' own resumption.)

import (
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/logtail"
	"github.com/platformkit/grpcbackoff/serviceconfig"
)

// TestResumeDefaultPolicyAttemptTimeout: DialOptions(DefaultPolicy()) with
// an AttemptTimeout of 5 s, the budget on: open 0 delivers 300 records and
// fails; the resume (after 1–2 s, the run's first wait) hangs and is cut
// 5 s after it opened; the next (after 2–3 s, the run's second) delivers
// the rest. The committed opens are never cut, though each lasts longer
// than the timeout (3 s, 7 s).
func TestResumeDefaultPolicyAttemptTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := logtail.NewServer(t, paced(1000, logtail.Faults(logtail.Fail(300, codes.Unavailable), logtail.Fault{Hang: true})))
		p := grpcbackoff.DefaultPolicy()
		p.AttemptTimeout = 5 * time.Second
		rec := &recorder{}
		c := srv.Client(t, interceptor.DialOptions(p, (&nextOffset{}).option(tailMethod), interceptor.WithObserver(rec))...)
		r := runTail(t.Context(), c, &logtail.TailRequest{}, tailHow{})
		if r.Err != nil {
			t.Fatalf("the stream ended with %v after %d records", r.Err, len(r.Offsets))
		}
		checkRecords(t, r, 0, 1000)
		opens := srv.Opens()
		if got := openOffsets(opens); !slices.Equal(got, []int64{0, 300, 300}) {
			t.Fatalf("opens asked for %v, want [0 300 300]", got)
		}
		checkPreviousAttempts(t, opens)
		if cut := opens[1].End.Sub(opens[1].At); cut != p.AttemptTimeout {
			t.Errorf("the silent resume was cut after %v, want the AttemptTimeout, %v", cut, p.AttemptTimeout)
		}
		for i, rg := range [][2]time.Duration{{time.Second, 2 * time.Second}, {2 * time.Second, 3 * time.Second}} {
			if wait := opens[i+1].At.Sub(opens[i].End); wait < rg[0] || wait > rg[1] {
				t.Errorf("wait before open %d = %v, want in [%v, %v]", i+1, wait, rg[0], rg[1])
			}
		}
		if len(rec.ends) != 1 || rec.ends[0].Attempts != 3 || rec.ends[0].Code != codes.OK {
			t.Errorf("OnEnd told %+v, want one success after 3 attempts", rec.ends)
		}
	})
}

// TestResumeServiceConfig: a service config's retryPolicy for the service
// is the Policy its resumes follow (and states its methods safe to send
// again: no mark needed): after each open that delivered records, the
// first wait of a run, initialBackoff with grpc-go's jitter (80–120 ms); a
// code it does not list is passed through after the records delivered.
func TestResumeServiceConfig(t *testing.T) {
	sc, err := serviceconfig.Parse([]byte(`{"methodConfig": [{
		"name": [{"service": "grpcbackoff.logtail.v1.LogTail"}],
		"retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2,
			"retryableStatusCodes": ["UNAVAILABLE"]}
	}]}`))
	if err != nil {
		t.Fatal(err)
	}
	r := newRetrier(t, grpcbackoff.DefaultPolicy(), interceptor.WithServiceConfig(sc), interceptor.WithoutThrottle(), (&nextOffset{}).option(tailMethod))
	if s := r.Explain(tailMethod).String(); !strings.Contains(s, "up to 2 attempts on UNAVAILABLE") || r.Explain(tailMethod).Resume != tailMethod {
		t.Errorf("Explain(Tail) = %s, want the service config's 2 attempts and the rule", s)
	}
	t.Run("resumed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// Three opens in a row deliver and fail: each resume is the
			// first retry of its run, under maxAttempts 2.
			srv := logtail.NewServer(t, paced(1000, logtail.Faults(
				logtail.Fail(100, codes.Unavailable), logtail.Fail(100, codes.Unavailable), logtail.Fail(100, codes.Unavailable))))
			res := runTail(t.Context(), logtail.NewLogTailClient(srv.Conn(t, r.DialOptions()...)), &logtail.TailRequest{}, tailHow{})
			if res.Err != nil {
				t.Fatalf("the stream ended with %v after %d records", res.Err, len(res.Offsets))
			}
			checkRecords(t, res, 0, 1000)
			opens := srv.Opens()
			if len(opens) != 4 {
				t.Fatalf("%d opens, want 4", len(opens))
			}
			for i := 1; i < len(opens); i++ {
				if wait := opens[i].At.Sub(opens[i-1].End); wait < 80*time.Millisecond || wait > 120*time.Millisecond {
					t.Errorf("wait before open %d = %v, want the initialBackoff, 100ms, ±20%%", i, wait)
				}
			}
		})
	})
	t.Run("a code it does not list", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := logtail.NewServer(t, paced(1000, logtail.Faults(logtail.Fail(100, codes.ResourceExhausted))))
			res := runTail(t.Context(), logtail.NewLogTailClient(srv.Conn(t, r.DialOptions()...)), &logtail.TailRequest{}, tailHow{})
			checkRecords(t, res, 0, 100)
			if st := status.Convert(res.Err); st.Code() != codes.ResourceExhausted || st.Message() != "logtail: failed after 100 records" || len(srv.Opens()) != 1 {
				t.Errorf("err = %v after %d opens, want the server's RESOURCE_EXHAUSTED unchanged after 1", res.Err, len(srv.Opens()))
			}
		})
	})
}
