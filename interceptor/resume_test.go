package interceptor_test

// Issue 43: resumable server streams, through the public API, on
// internal/logtail's log-tailing service over bufconn in a synctest bubble
// (resume_tcp_test.go has the real restarts).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
	"github.com/platformkit/grpcbackoff/internal/logtail"
)

// paced is a log of n records, one every 10 ms.
func paced(n int, script logtail.Script) logtail.Options {
	return logtail.Options{Records: n, Every: 10 * time.Millisecond, Script: script}
}

// TestResumeOnce: a Tail of 1 000 records, one every 10 ms, whose open
// fails with UNAVAILABLE after 300 (at 3 s) is reopened after the
// Policy's first backoff (1 s) from offset 300, with the attempt's number;
// the caller sees the 1 000 records once each, in order, and the end at
// 11 s. Installed every way a caller can.
func TestResumeOnce(t *testing.T) {
	for how, install := range installs {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := logtail.NewServer(t, paced(1000, logtail.Faults(logtail.Fail(300, codes.Unavailable))))
				rule := &nextOffset{}
				c := srv.Client(t, install(bufconntest.Exact(), interceptor.WithoutThrottle(), rule.option(tailMethod))...)
				start := time.Now()
				r := runTail(t.Context(), c, &logtail.TailRequest{}, tailHow{})
				if r.Err != nil {
					t.Fatalf("the stream ended with %v after %d records, want the resume hidden", r.Err, len(r.Offsets))
				}
				checkRecords(t, r, 0, 1000)
				opens := srv.Opens()
				if got, want := openStarts(opens, start), bufconntest.Seconds(0, 4); !slices.Equal(got, want) {
					t.Errorf("opens at %v, want %v (the failure at 3 s, then the Policy's 1 s)", got, want)
				}
				if got := openOffsets(opens); !slices.Equal(got, []int64{0, 300}) {
					t.Errorf("opens asked for offsets %v, want [0 300]", got)
				}
				checkPreviousAttempts(t, opens)
				if got := r.End.Sub(start); got != 11*time.Second {
					t.Errorf("the stream ended after %v, want 11s", got)
				}
				if n := rule.reopens.Load(); n != 1 {
					t.Errorf("reopen called %d times, want 1", n)
				}
				if n := rule.records.Load(); n != 1000 {
					t.Errorf("record called %d times, want once per message, 1000", n)
				}
			})
		})
	}
}

// severalScript: open 0 fails after 100 records, open 1 after 100 more
// (RESOURCE_EXHAUSTED), opens 2 and 3 at once, open 4 delivers the rest.
var severalScript = logtail.Faults(
	logtail.Fail(100, codes.Unavailable),
	logtail.Fail(100, codes.ResourceExhausted),
	logtail.Fail(0, codes.Unavailable),
	logtail.Fail(0, codes.Unavailable),
)

// TestResumeSeveral: the backoff and MaxAttempts start again after an
// open that delivered a message: the waits are 1 s (after open 0's 100
// records), 1 s (after open 1's), then 2 s and 4 s (after opens that
// delivered none), at exact times without jitter and in the Policy's
// ranges with it (1–2 s, 1–2 s, 2–3 s, 4–5 s). The observers and the
// logger are told of each resume as of a retry, and of the end.
func TestResumeSeveral(t *testing.T) {
	t.Run("exact", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := logtail.NewServer(t, paced(1000, severalScript))
			rule := &nextOffset{}
			rec := &recorder{}
			logs := &logCapture{}
			c := srv.Client(t, interceptor.DialOptions(bufconntest.Exact(), interceptor.WithoutThrottle(), rule.option(tailMethod),
				interceptor.WithObserver(rec), interceptor.WithLogger(slog.New(logs)))...)
			start := time.Now()
			r := runTail(t.Context(), c, &logtail.TailRequest{}, tailHow{})
			if r.Err != nil {
				t.Fatalf("the stream ended with %v after %d records", r.Err, len(r.Offsets))
			}
			checkRecords(t, r, 0, 1000)
			opens := srv.Opens()
			if got, want := openStarts(opens, start), bufconntest.Seconds(0, 2, 4, 6, 10); !slices.Equal(got, want) {
				t.Errorf("opens at %v, want %v", got, want)
			}
			if got := openOffsets(opens); !slices.Equal(got, []int64{0, 100, 200, 200, 200}) {
				t.Errorf("opens asked for offsets %v, want [0 100 200 200 200]", got)
			}
			checkPreviousAttempts(t, opens)
			if got := r.End.Sub(start); got != 18*time.Second {
				t.Errorf("the stream ended after %v, want 18s", got)
			}
			if got := r.Trailer.Get(logtail.OpenKey); !slices.Equal(got, []string{"4"}) {
				t.Errorf("Trailer() %s = %q, want the last open's, 4", logtail.OpenKey, got)
			}
			if got := r.Header.Get(logtail.OpenKey); !slices.Equal(got, []string{"0"}) {
				t.Errorf("Header() %s = %q, want the first open's, 0", logtail.OpenKey, got)
			}

			var retries []string
			for _, x := range rec.retries {
				retries = append(retries, fmt.Sprintf("%d:%v:%v:%v", x.Attempt, x.Code, x.Delay, x.Throttled))
			}
			if want := []string{"1:Unavailable:1s:false", "2:ResourceExhausted:1s:false", "3:Unavailable:2s:false", "4:Unavailable:4s:false"}; !slices.Equal(retries, want) {
				t.Errorf("OnRetry told %v, want %v", retries, want)
			}
			if len(rec.ends) != 1 {
				t.Fatalf("OnEnd told %d times, want once", len(rec.ends))
			}
			if e := rec.ends[0]; e.Method != tailMethod || e.Code != codes.OK || e.Attempts != 5 || e.Delay != 8*time.Second || e.Reason != grpcbackoff.ReasonNone || e.GaveUp() {
				t.Errorf("OnEnd told %+v, want OK, 5 attempts, 8s of waits, no Reason", e)
			}
			var logged []string
			for _, l := range logs.lines {
				logged = append(logged, strings.TrimSuffix(l, " ctx=<nil>"))
			}
			m := "method=" + tailMethod
			want := []string{
				"INFO grpcbackoff: retrying " + m + " attempt=1 code=Unavailable delay=1s",
				"INFO grpcbackoff: retrying " + m + " attempt=2 code=ResourceExhausted delay=1s",
				"INFO grpcbackoff: retrying " + m + " attempt=3 code=Unavailable delay=2s",
				"INFO grpcbackoff: retrying " + m + " attempt=4 code=Unavailable delay=4s",
			}
			if !slices.Equal(logged, want) {
				t.Errorf("logged:\n%s\nwant:\n%s", strings.Join(logged, "\n"), strings.Join(want, "\n"))
			}
		})
	})
	t.Run("jitter", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := logtail.NewServer(t, paced(1000, severalScript))
			c := srv.Client(t, interceptor.DialOptions(grpcbackoff.DefaultPolicy(), interceptor.WithoutThrottle(), (&nextOffset{}).option(tailMethod))...)
			r := runTail(t.Context(), c, &logtail.TailRequest{}, tailHow{})
			if r.Err != nil {
				t.Fatalf("the stream ended with %v", r.Err)
			}
			checkRecords(t, r, 0, 1000)
			opens := srv.Opens()
			if len(opens) != 5 {
				t.Fatalf("%d opens, want 5", len(opens))
			}
			ranges := [][2]float64{{1, 2}, {1, 2}, {2, 3}, {4, 5}}
			for i, rg := range ranges {
				wait := opens[i+1].At.Sub(opens[i].End)
				if wait < bufconntest.Seconds(rg[0])[0] || wait > bufconntest.Seconds(rg[1])[0] {
					t.Errorf("wait %d = %v, want in [%vs, %vs]", i+1, wait, rg[0], rg[1])
				}
			}
		})
	})
}

// TestResumeMaxAttempts: MaxAttempts bounds the opens in a row that
// deliver nothing; opens that deliver never use it up; MaxAttempts 1
// (the Policy's or CallMaxAttempts) allows no resume.
func TestResumeMaxAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Open 0 delivers 50, opens 1 and 2 nothing: the third open in a
		// row since the last that delivered is the last of MaxAttempts 3.
		srv := logtail.NewServer(t, paced(1000, logtail.Faults(
			logtail.Fail(50, codes.Unavailable), logtail.Fail(0, codes.Unavailable), logtail.Fail(0, codes.Unavailable))))
		p := bufconntest.Exact()
		p.MaxAttempts = 3
		c := srv.Client(t, interceptor.DialOptions(p, interceptor.WithoutThrottle(), (&nextOffset{}).option(tailMethod))...)
		start := time.Now()
		r := runTail(t.Context(), c, &logtail.TailRequest{}, tailHow{})
		checkRecords(t, r, 0, 50)
		checkFinal(t, r.Err, codes.Unavailable, 3, grpcbackoff.ReasonExhausted)
		if got := r.End.Sub(start); got != 3500*time.Millisecond {
			t.Errorf("gave up after %v, want 3.5s (0.5 s of records, waits of 1 s and 2 s)", got)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		// Six opens each deliver 10 records and fail, under MaxAttempts 2:
		// each resume is the first retry of its run.
		var faults []logtail.Fault
		for range 6 {
			faults = append(faults, logtail.Fail(10, codes.Unavailable))
		}
		srv := logtail.NewServer(t, paced(100, logtail.Faults(faults...)))
		p := bufconntest.Exact()
		p.MaxAttempts = 2
		c := srv.Client(t, interceptor.DialOptions(p, interceptor.WithoutThrottle(), (&nextOffset{}).option(tailMethod))...)
		r := runTail(t.Context(), c, &logtail.TailRequest{}, tailHow{})
		if r.Err != nil {
			t.Fatalf("the stream ended with %v, want every open that delivered to start MaxAttempts again", r.Err)
		}
		checkRecords(t, r, 0, 100)
		if n := len(srv.Opens()); n != 7 {
			t.Errorf("%d opens, want 7", n)
		}
	})
	for name, setup := range map[string]func(p *grpcbackoff.Policy) []grpc.CallOption{
		"Policy.MaxAttempts 1": func(p *grpcbackoff.Policy) []grpc.CallOption { p.MaxAttempts = 1; return nil },
		"CallMaxAttempts(1)":   func(*grpcbackoff.Policy) []grpc.CallOption { return opt(interceptor.CallMaxAttempts(1)) },
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := logtail.NewServer(t, paced(1000, logtail.Faults(logtail.Fail(300, codes.Unavailable))))
				p := bufconntest.Exact()
				callOpts := setup(&p)
				rule := &nextOffset{}
				c := srv.Client(t, interceptor.DialOptions(p, interceptor.WithoutThrottle(), rule.option(tailMethod))...)
				r := runTail(t.Context(), c, &logtail.TailRequest{}, tailHow{}, callOpts...)
				checkRecords(t, r, 0, 300)
				checkFinal(t, r.Err, codes.Unavailable, 1, grpcbackoff.ReasonExhausted)
				if n, m := len(srv.Opens()), rule.reopens.Load(); n != 1 || m != 0 {
					t.Errorf("%d opens, reopen called %d times; want 1 and 0", n, m)
				}
			})
		})
	}
}

// refusingBudget is a SharedBudget that pays for the first allow retries,
// and counts what it is asked.
type refusingBudget struct {
	allow        int32
	asked, spent atomic.Int32
}

func (b *refusingBudget) Allow(time.Time) bool {
	b.asked.Add(1)
	if b.spent.Load() >= b.allow {
		return false
	}
	b.spent.Add(1)
	return true
}
func (b *refusingBudget) AllowLongRun(now time.Time) bool { return b.Allow(now) }
func (b *refusingBudget) Started()                        {}
func (b *refusingBudget) Succeeded()                      {}
func (b *refusingBudget) State(time.Time) interceptor.SharedBudgetState {
	return interceptor.SharedBudgetState{Name: "refusing"}
}

// TestResumeBudget: the retry budget pays for every resume, and one it
// cannot pay for ends the stream with the failure (ReasonThrottled), the
// observers told of the refusal.
func TestResumeBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := logtail.NewServer(t, paced(1000, logtail.Faults(logtail.Fail(100, codes.Unavailable), logtail.Fail(100, codes.Unavailable))))
		b := &refusingBudget{allow: 1}
		rec := &recorder{}
		c := srv.Client(t, interceptor.DialOptions(bufconntest.Exact(), (&nextOffset{}).option(tailMethod), interceptor.WithObserver(rec),
			interceptor.WithSharedBudget(func(string, grpcbackoff.Throttle) interceptor.SharedBudget { return b }))...)
		r := runTail(t.Context(), c, &logtail.TailRequest{}, tailHow{})
		checkRecords(t, r, 0, 200)
		checkFinal(t, r.Err, codes.Unavailable, 2, grpcbackoff.ReasonThrottled)
		if asked, spent := b.asked.Load(), b.spent.Load(); asked != 2 || spent != 1 {
			t.Errorf("the budget was asked %d times and paid %d, want 2 and 1: each resume asks once", asked, spent)
		}
		if len(rec.retries) != 2 || rec.retries[0].Throttled || !rec.retries[1].Throttled {
			t.Errorf("OnRetry told %+v, want a resume, then a refused one", rec.retries)
		}
	})
}

// dueBudget is a DeferredBudget (as the fleetbudget module's are): it
// is told of a resume when it is decided (Want), pays for it when it is due
// (Allow, refusing past allow), and counts the opens' successes.
type dueBudget struct {
	refusingBudget
	wants     []time.Time // the due times Want was told
	allows    []time.Time // when Allow was asked
	succeeded atomic.Int32
}

func (b *dueBudget) Want(_, due time.Time, _ bool) bool { b.wants = append(b.wants, due); return true }
func (b *dueBudget) Allow(now time.Time) bool {
	b.allows = append(b.allows, now)
	return b.refusingBudget.Allow(now)
}
func (b *dueBudget) Succeeded() { b.succeeded.Add(1) }

// TestResumeDeferredBudget: a budget that pays when the retry is due
// (DeferredBudget) is told of each resume as it is decided, and pays for it
// after its wait: the resume at 2 s (1 s after the failure) is paid then;
// the retry of its open, which fails at once, refused at its due time, 4 s
// (the run's second wait, 2 s), ends the stream there (ReasonThrottled).
// The budget heard of a success for the open that delivered.
func TestResumeDeferredBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := logtail.NewServer(t, paced(1000, logtail.Faults(logtail.Fail(100, codes.Unavailable), logtail.Fail(0, codes.Unavailable))))
		b := &dueBudget{refusingBudget: refusingBudget{allow: 1}}
		rec := &recorder{}
		c := srv.Client(t, interceptor.DialOptions(bufconntest.Exact(), (&nextOffset{}).option(tailMethod), interceptor.WithObserver(rec),
			interceptor.WithSharedBudget(func(string, grpcbackoff.Throttle) interceptor.SharedBudget { return b }))...)
		start := time.Now()
		r := runTail(t.Context(), c, &logtail.TailRequest{}, tailHow{})
		checkRecords(t, r, 0, 100)
		checkFinal(t, r.Err, codes.Unavailable, 2, grpcbackoff.ReasonThrottled)
		if got, want := openStarts(srv.Opens(), start), bufconntest.Seconds(0, 2); !slices.Equal(got, want) {
			t.Errorf("opens at %v, want %v", got, want)
		}
		since := func(ts []time.Time) (out []time.Duration) {
			for _, at := range ts {
				out = append(out, at.Sub(start))
			}
			return out
		}
		if got, want := since(b.wants), bufconntest.Seconds(2, 4); !slices.Equal(got, want) {
			t.Errorf("Want told of resumes due at %v, want %v", got, want)
		}
		if got, want := since(b.allows), bufconntest.Seconds(2, 4); !slices.Equal(got, want) {
			t.Errorf("Allow asked at %v, want %v: each resume paid when due", got, want)
		}
		if got := r.End.Sub(start); got != 4*time.Second {
			t.Errorf("the stream ended after %v, want 4s: at the refusal", got)
		}
		if n := b.succeeded.Load(); n != 1 {
			t.Errorf("the budget heard of %d successes, want 1: the open that delivered", n)
		}
		if len(rec.retries) != 2 || rec.retries[0].Throttled || !rec.retries[1].Throttled {
			t.Errorf("OnRetry told %+v, want a resume, then a refused retry", rec.retries)
		}
	})
}

// TestResumeDeadline: no wait that cannot end before the caller's
// deadline: a stream whose resume would start at or past it ends at the
// failure, with the records delivered and ReasonDeadline.
func TestResumeDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := logtail.NewServer(t, paced(1000, logtail.Faults(logtail.Fail(50, codes.Unavailable))))
		c := srv.Client(t, interceptor.DialOptions(bufconntest.Exact(), interceptor.WithoutThrottle(), (&nextOffset{}).option(tailMethod))...)
		ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
		defer cancel()
		start := time.Now()
		r := runTail(ctx, c, &logtail.TailRequest{}, tailHow{})
		checkRecords(t, r, 0, 50)
		checkFinal(t, r.Err, codes.Unavailable, 1, grpcbackoff.ReasonDeadline)
		if got := r.End.Sub(start); got != 500*time.Millisecond {
			t.Errorf("the stream ended after %v, want 500ms: at the failure, the 1 s wait ending at the deadline", got)
		}
		if n := len(srv.Opens()); n != 1 {
			t.Errorf("%d opens, want 1", n)
		}
	})
}

// TestResumeServerHints: pushback and RetryInfo set a resume's wait as a
// retry's; pushback −1 (a retry guard's) and a RetryInfo past
// MaxHintDelay refuse it (ReasonServerRefused): the caller gets the
// failure after the records delivered.
func TestResumeServerHints(t *testing.T) {
	st, err := status.New(codes.Unavailable, "busy").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	long, err := status.New(codes.Unavailable, "busy").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(grpcbackoff.MaxHintDelay + time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	down := status.Error(codes.Unavailable, "down")
	cases := []struct {
		name  string
		fault logtail.Fault
		wait  time.Duration // 0: refused
	}{
		{"pushback 5000 ms", logtail.Fault{After: 100, Err: down, Trailer: metadata.Pairs("grpc-retry-pushback-ms", "5000")}, 5 * time.Second},
		{"pushback -1", logtail.Fault{After: 100, Err: down, Trailer: metadata.Pairs("grpc-retry-pushback-ms", "-1")}, 0},
		{"RetryInfo 5 s", logtail.Fault{After: 100, Err: st.Err()}, 5 * time.Second},
		{"RetryInfo past MaxHintDelay", logtail.Fault{After: 100, Err: long.Err()}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := logtail.NewServer(t, paced(200, logtail.Faults(tc.fault)))
				c := srv.Client(t, interceptor.DialOptions(bufconntest.Exact(), interceptor.WithoutThrottle(), (&nextOffset{}).option(tailMethod))...)
				r := runTail(t.Context(), c, &logtail.TailRequest{}, tailHow{})
				opens := srv.Opens()
				if tc.wait == 0 {
					checkRecords(t, r, 0, 100)
					checkFinal(t, r.Err, codes.Unavailable, 1, grpcbackoff.ReasonServerRefused)
					if len(opens) != 1 {
						t.Errorf("%d opens, want 1", len(opens))
					}
					return
				}
				if r.Err != nil {
					t.Fatalf("the stream ended with %v", r.Err)
				}
				checkRecords(t, r, 0, 200)
				if len(opens) != 2 || opens[1].At.Sub(opens[0].End) != tc.wait {
					t.Errorf("opens %+v, want a resume %v after the failure", opens, tc.wait)
				}
			})
		})
	}
}

// TestResumeNoRetry: NoRetry leaves a stream to gRPC: the failure goes to
// the caller as the server sent it, after the records delivered.
func TestResumeNoRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := logtail.NewServer(t, paced(1000, logtail.Faults(logtail.Fail(300, codes.Unavailable))))
		rule := &nextOffset{}
		c := srv.Client(t, interceptor.DialOptions(bufconntest.Exact(), interceptor.WithoutThrottle(), rule.option(tailMethod))...)
		r := runTail(t.Context(), c, &logtail.TailRequest{}, tailHow{}, interceptor.NoRetry())
		checkRecords(t, r, 0, 300)
		if st := status.Convert(r.Err); st.Code() != codes.Unavailable || st.Message() != "logtail: failed after 300 records" {
			t.Errorf("err = %v, want the server's UNAVAILABLE unchanged", r.Err)
		}
		if n := len(srv.Opens()); n != 1 || rule.records.Load() != 0 {
			t.Errorf("%d opens, %d records recorded; want 1 and none: NoRetry leaves the stream to gRPC", n, rule.records.Load())
		}
	})
}

// TestResumeSafety: a resume sends the method again, after the server
// answered and acted on it (its records came). A call stated NotIdempotent
// is not resumed, whatever the code, even a RESOURCE_EXHAUSTED of the
// server's own, which before an answer says nothing was applied: the
// caller gets the failure as the server sent it, after the records. Before
// its first answer it is retried as any call stated so: after the server's
// own trailers-only RESOURCE_EXHAUSTED, and not after its UNAVAILABLE.
func TestResumeSafety(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fault  logtail.Fault
		opens  int
		failed bool // the caller gets the fault's error after its records
	}{
		{"UNAVAILABLE after 300 records", logtail.Fail(300, codes.Unavailable), 1, true},
		{"RESOURCE_EXHAUSTED after 300 records", logtail.Fail(300, codes.ResourceExhausted), 1, true},
		{"RESOURCE_EXHAUSTED after the headers", logtail.Fault{Header: true, Err: status.Error(codes.ResourceExhausted, "logtail: failed after 0 records")}, 1, true},
		{"RESOURCE_EXHAUSTED, trailers only", logtail.Fail(0, codes.ResourceExhausted), 2, false},
		{"UNAVAILABLE, trailers only", logtail.Fail(0, codes.Unavailable), 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := logtail.NewServer(t, paced(1000, logtail.Faults(tc.fault)))
				rule := &nextOffset{}
				c := srv.Client(t, interceptor.DialOptions(bufconntest.Exact(), interceptor.WithoutThrottle(), rule.option(tailMethod))...)
				r := runTail(t.Context(), c, &logtail.TailRequest{}, tailHow{}, interceptor.CallNotIdempotent())
				if n := len(srv.Opens()); n != tc.opens || rule.reopens.Load() != 0 {
					t.Errorf("%d opens, reopen called %d times; want %d and none", n, rule.reopens.Load(), tc.opens)
				}
				if !tc.failed {
					if r.Err != nil {
						t.Fatalf("the stream ended with %v, want it retried", r.Err)
					}
					checkRecords(t, r, 0, 1000)
					return
				}
				checkRecords(t, r, 0, int64(tc.fault.After))
				if st, want := status.Convert(r.Err), status.Convert(tc.fault.Err); st.Code() != want.Code() || st.Message() != want.Message() {
					t.Errorf("err = %v, want the server's %v unchanged", r.Err, tc.fault.Err)
				}
			})
		})
	}
}

// TestResumeCallPolicy: a call's own Policy sets a resume's wait as a
// retry's; the rule, which is the method's, still applies.
func TestResumeCallPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := logtail.NewServer(t, paced(1000, logtail.Faults(logtail.Fail(300, codes.Unavailable))))
		c := srv.Client(t, interceptor.DialOptions(bufconntest.Exact(), interceptor.WithoutThrottle(), (&nextOffset{}).option(tailMethod))...)
		slow := bufconntest.Exact()
		slow.Initial = 3 * time.Second
		r := runTail(t.Context(), c, &logtail.TailRequest{}, tailHow{}, interceptor.CallPolicy(slow))
		if r.Err != nil {
			t.Fatalf("the stream ended with %v", r.Err)
		}
		checkRecords(t, r, 0, 1000)
		if opens := srv.Opens(); len(opens) != 2 || opens[1].At.Sub(opens[0].End) != 3*time.Second {
			t.Errorf("opens %+v, want a resume 3 s after the failure (the call's Policy)", opens)
		}
	})
}

// TestResumeOtherGoTypes: a call whose messages are not the rule's Go
// types (the same message as another type: dynamicpb, a second generated
// copy) is told, or not resumed: a request that is not a Req makes SendMsg
// return INTERNAL naming the rule, nothing sent; a response that is not a
// Resp stops the stream's resuming, its failure going to the caller.
func TestResumeOtherGoTypes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := logtail.NewServer(t, paced(100, logtail.Faults(logtail.Fail(10, codes.Unavailable))))
		cc := srv.Conn(t, interceptor.DialOptions(bufconntest.Exact(), interceptor.WithoutThrottle(), (&nextOffset{}).option(tailMethod))...)
		desc := &logtail.LogTail_ServiceDesc.Streams[0]
		s, err := cc.NewStream(t.Context(), desc, tailMethod)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SendMsg(&logtail.StatRequest{}); status.Code(err) != codes.Internal || !strings.Contains(err.Error(), tailMethod) {
			t.Errorf("SendMsg(a StatRequest) = %v, want INTERNAL naming the rule", err)
		}

		s, err = cc.NewStream(t.Context(), desc, tailMethod)
		if err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(s.SendMsg(&logtail.TailRequest{}), s.CloseSend()); err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			err = s.RecvMsg(new(logtail.StatResponse)) // the same wire, another type
			if err != nil {
				break
			}
			n++
		}
		if st := status.Convert(err); n != 10 || st.Code() != codes.Unavailable || st.Message() != "logtail: failed after 10 records" {
			t.Errorf("%d messages, then %v; want 10, then the server's UNAVAILABLE unchanged", n, err)
		}
		if opens := srv.Opens(); len(opens) != 1 {
			t.Errorf("%d opens reached the server, want 1 (the first stream sent nothing)", len(opens))
		}
	})
}

// TestResumeExplain: Explain says a method's server streams resume, and
// whose rule it is.
func TestResumeExplain(t *testing.T) {
	r := newRetrier(t, bufconntest.Exact(), (&nextOffset{}).option(tailMethod), (&nextOffset{}).option(logService))
	if s := r.Explain(tailMethod).String(); !strings.Contains(s, `resumed (WithResume for "`+tailMethod+`")`) || !strings.Contains(s, "MaxAttempts counting the opens in a row that deliver none") {
		t.Errorf("Explain(Tail) = %s, want it to say the method's own rule resumes its streams", s)
	}
	if s := r.Explain(scanMethod).String(); !strings.Contains(s, `resumed (WithResume for "`+logService+`")`) {
		t.Errorf("Explain(Scan) = %s, want it to say the service's rule resumes its streams", s)
	}
	plain := newRetrier(t, bufconntest.Exact())
	if s := plain.Explain(tailMethod).String(); strings.Contains(s, "resumed") {
		t.Errorf("Explain(Tail) without a rule = %s, want no resume", s)
	}
}

// TestResumeBeforeAnyMessage: a failure before the stream commits is
// today's retry, with the original request; one after the headers and
// before any record is resumed with the original request too: reopen is
// not called, there being no token.
func TestResumeBeforeAnyMessage(t *testing.T) {
	for name, fault := range map[string]logtail.Fault{
		"trailers only":     logtail.Fail(0, codes.Unavailable),
		"after the headers": {Header: true, Err: status.Error(codes.Unavailable, "down")},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := logtail.NewServer(t, paced(100, logtail.Faults(fault)))
				rule := &nextOffset{}
				c := srv.Client(t, interceptor.DialOptions(bufconntest.Exact(), interceptor.WithoutThrottle(), rule.option(tailMethod))...)
				start := time.Now()
				r := runTail(t.Context(), c, &logtail.TailRequest{Offset: 20, Limit: 50}, tailHow{})
				if r.Err != nil {
					t.Fatalf("the stream ended with %v", r.Err)
				}
				checkRecords(t, r, 20, 70)
				opens := srv.Opens()
				if len(opens) != 2 || opens[1].Offset != 20 || opens[1].Limit != 50 || opens[1].At.Sub(start) != time.Second {
					t.Errorf("opens %+v, want a second with the original request after 1 s", opens)
				}
				if n := rule.reopens.Load(); n != 0 {
					t.Errorf("reopen called %d times, want 0", n)
				}
			})
		})
	}
}

// TestResumeAttemptTimeout: a resumed open whose server does not answer
// is cut after AttemptTimeout and retried, as any attempt: open 0
// delivers 100 records (1 s), open 1 (at 2 s) hangs and is cut at 7 s,
// open 2 (after the run's second wait, 2 s) delivers the rest.
func TestResumeAttemptTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := logtail.NewServer(t, paced(1000, logtail.Faults(logtail.Fail(100, codes.Unavailable), logtail.Fault{Hang: true})))
		p := bufconntest.Exact()
		p.AttemptTimeout = 5 * time.Second
		c := srv.Client(t, interceptor.DialOptions(p, interceptor.WithoutThrottle(), (&nextOffset{}).option(tailMethod))...)
		start := time.Now()
		r := runTail(t.Context(), c, &logtail.TailRequest{}, tailHow{})
		if r.Err != nil {
			t.Fatalf("the stream ended with %v", r.Err)
		}
		checkRecords(t, r, 0, 1000)
		if got, want := openStarts(srv.Opens(), start), bufconntest.Seconds(0, 2, 9); !slices.Equal(got, want) {
			t.Errorf("opens at %v, want %v", got, want)
		}
	})
}

// TestResumeRuleRefuses: a rule that says it cannot resume passes the
// server's failure through unchanged; one that says the stream is complete
// (io.EOF) ends it as a success; one that returns neither a request nor an
// error ends it with INTERNAL, naming the rule.
func TestResumeRuleRefuses(t *testing.T) {
	failure := logtail.Fail(300, codes.Unavailable)
	t.Run("cannot", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := logtail.NewServer(t, paced(1000, logtail.Faults(failure)))
			rec := &recorder{}
			var asked atomic.Int32
			c := srv.Client(t, interceptor.DialOptions(bufconntest.Exact(), interceptor.WithoutThrottle(), interceptor.WithObserver(rec),
				interceptor.WithResume(tailMethod, func(_ int64, r *logtail.Record) int64 { return r.GetOffset() + 1 },
					func(*logtail.TailRequest, int64) (*logtail.TailRequest, error) {
						asked.Add(1)
						return nil, errors.ErrUnsupported
					}))...)
			r := runTail(t.Context(), c, &logtail.TailRequest{}, tailHow{})
			checkRecords(t, r, 0, 300)
			if st := status.Convert(r.Err); st.Code() != codes.Unavailable || st.Message() != "logtail: failed after 300 records" {
				t.Errorf("err = %v, want the server's UNAVAILABLE unchanged", r.Err)
			}
			var e *grpcbackoff.Error
			if errors.As(r.Err, &e) {
				t.Errorf("err is a *grpcbackoff.Error (%v), want the server's own", e)
			}
			if n, a := len(srv.Opens()), asked.Load(); n != 1 || a != 1 {
				t.Errorf("%d opens, the rule asked %d times; want 1 and 1", n, a)
			}
			if len(rec.retries) != 0 || len(rec.ends) != 1 || rec.ends[0].Reason != grpcbackoff.ReasonNotRetryable || rec.ends[0].GaveUp() {
				t.Errorf("observers told %+v, %+v; want no retry, an end with ReasonNotRetryable that did not give up", rec.retries, rec.ends)
			}
		})
	})
	t.Run("cannot, after a resume", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// Open 0 fails after 300 records and is resumed; open 1 fails
			// after 300 more, and the rule cannot resume it: the server's
			// failure itself, though a resume came before (issue 43).
			srv := logtail.NewServer(t, paced(1000, logtail.Faults(failure, failure)))
			var asked atomic.Int32
			c := srv.Client(t, interceptor.DialOptions(bufconntest.Exact(), interceptor.WithoutThrottle(),
				interceptor.WithResume(tailMethod, func(_ int64, r *logtail.Record) int64 { return r.GetOffset() + 1 },
					func(req *logtail.TailRequest, next int64) (*logtail.TailRequest, error) {
						if asked.Add(1) > 1 {
							return nil, errors.ErrUnsupported
						}
						req.Offset = next
						return req, nil
					}))...)
			r := runTail(t.Context(), c, &logtail.TailRequest{}, tailHow{})
			checkRecords(t, r, 0, 600)
			var e *grpcbackoff.Error
			if st := status.Convert(r.Err); st.Code() != codes.Unavailable || errors.As(r.Err, &e) {
				t.Errorf("err = %v, want the server's UNAVAILABLE unchanged", r.Err)
			}
			if n, a := len(srv.Opens()), asked.Load(); n != 2 || a != 2 {
				t.Errorf("%d opens, the rule asked %d times; want 2 and 2", n, a)
			}
		})
	})
	t.Run("complete", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// The open fails once it sent all 300 records of its range.
			srv := logtail.NewServer(t, paced(1000, logtail.Faults(failure)))
			rule := &nextOffset{}
			c := srv.Client(t, interceptor.DialOptions(bufconntest.Exact(), interceptor.WithoutThrottle(), rule.option(tailMethod))...)
			r := runTail(t.Context(), c, &logtail.TailRequest{Limit: 300}, tailHow{})
			if r.Err != nil {
				t.Errorf("the stream ended with %v, want io.EOF: the rule said it is complete", r.Err)
			}
			checkRecords(t, r, 0, 300)
			if n := len(srv.Opens()); n != 1 {
				t.Errorf("%d opens, want 1", n)
			}
		})
	})
	t.Run("nil request", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := logtail.NewServer(t, paced(1000, logtail.Faults(failure)))
			c := srv.Client(t, interceptor.DialOptions(bufconntest.Exact(), interceptor.WithoutThrottle(),
				interceptor.WithResume(tailMethod, func(_ int64, r *logtail.Record) int64 { return r.GetOffset() + 1 },
					func(*logtail.TailRequest, int64) (*logtail.TailRequest, error) { return nil, nil }))...)
			r := runTail(t.Context(), c, &logtail.TailRequest{}, tailHow{})
			checkRecords(t, r, 0, 300)
			if st := status.Convert(r.Err); st.Code() != codes.Internal || !strings.Contains(st.Message(), tailMethod) {
				t.Errorf("err = %v, want INTERNAL naming the rule", r.Err)
			}
		})
	})
}

type rulePanic struct{ where string }

// TestResumeRulePanics: a panic in record or reopen is raised on the
// caller's goroutine, in its RecvMsg, with its value, and again by every
// later operation; the stream leaves no goroutine behind, and the budget
// was asked to pay for no resume.
func TestResumeRulePanics(t *testing.T) {
	for _, where := range []string{"record", "reopen"} {
		t.Run(where, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := logtail.NewServer(t, paced(1000, logtail.Faults(logtail.Fail(300, codes.Unavailable))))
				b := &refusingBudget{allow: 100}
				r := newRetrier(t, bufconntest.Exact(),
					interceptor.WithSharedBudget(func(string, grpcbackoff.Throttle) interceptor.SharedBudget { return b }),
					interceptor.WithResume(tailMethod,
						func(_ int64, rec *logtail.Record) int64 {
							if where == "record" && rec.GetOffset() == 100 {
								panic(rulePanic{where})
							}
							return rec.GetOffset() + 1
						},
						func(*logtail.TailRequest, int64) (*logtail.TailRequest, error) { panic(rulePanic{where}) }))
				c := srv.Client(t, r.DialOptions()...)
				if _, err := c.Stat(t.Context(), &logtail.StatRequest{}); err != nil { // the connection and its goroutines
					t.Fatal(err)
				}
				synctest.Wait()
				before := bubbleGoroutines()
				s, err := c.Tail(t.Context(), &logtail.TailRequest{})
				if err != nil {
					t.Fatal(err)
				}
				n := 0
				got := raised(func() {
					for {
						if _, err := s.Recv(); err != nil {
							t.Errorf("Recv = %v after %d records, want the rule's panic", err, n)
							return
						}
						n++
					}
				})
				if got != (rulePanic{where}) {
					t.Fatalf("the caller got the panic %v, want %v", got, rulePanic{where})
				}
				if want := map[string]int{"record": 100, "reopen": 300}[where]; n != want {
					t.Errorf("the panic came after %d records, want %d", n, want)
				}
				if again := raised(func() { _, _ = s.Recv() }); again != (rulePanic{where}) {
					t.Errorf("a later Recv raised %v, want the rule's panic again", again)
				}
				synctest.Wait()
				for id, g := range bubbleGoroutines() {
					if _, ok := before[id]; !ok {
						t.Errorf("a goroutine of the stream is left:\n%s", g)
					}
				}
				if asked := b.asked.Load(); asked != 0 {
					t.Errorf("the budget was asked %d times, want 0: no resume was made", asked)
				}
			})
		})
	}
}

// TestResumeRefusedByNew: New refuses, each with an error naming it, a
// rule for a method that is not a server stream, of other types, unknown
// to the registry, known not to be idempotent, or with a bad name or a
// nil function; all at once.
func TestResumeRefusedByNew(t *testing.T) {
	rule := &nextOffset{}
	recordAsRequest := interceptor.WithResume(tailMethod, func(int64, *logtail.Record) int64 { return 0 },
		func(r *logtail.Record, _ int64) (*logtail.Record, error) { return r, nil })
	opts := []interceptor.Option{
		rule.option("/grpcbackoff.logtail.v1.LogTail/Sync"),
		rule.option("/grpcbackoff.logtail.v1.LogTail/Write"),
		rule.option("/grpcbackoff.logtail.v1.LogTail/Stat"),
		rule.option("/pkg.Unknown/Tail"),
		recordAsRequest,
		rule.option("grpcbackoff.logtail.v1.LogTail/Tail"),
		interceptor.WithResume[*logtail.TailRequest, *logtail.Record, int64](tailMethod, nil, rule.reopen),
		rule.option(scanMethod),
		interceptor.WithSafety(scanMethod, interceptor.NotIdempotent),
	}
	_, err := interceptor.New(bufconntest.Exact(), opts...)
	if err == nil {
		t.Fatal("New accepted every rule")
	}
	for _, want := range []string{
		`interceptor: opts[0]: WithResume("/grpcbackoff.logtail.v1.LogTail/Sync"): the method is a bidi stream: only a server stream`,
		`interceptor: opts[1]: WithResume("/grpcbackoff.logtail.v1.LogTail/Write"): the method is a client stream`,
		`interceptor: opts[2]: WithResume("/grpcbackoff.logtail.v1.LogTail/Stat"): the method is unary`,
		`interceptor: opts[3]: WithResume("/pkg.Unknown/Tail"): no descriptor of the service pkg.Unknown is registered`,
		`interceptor: opts[4]: WithResume("` + tailMethod + `"): the method takes grpcbackoff.logtail.v1.TailRequest and returns a stream of grpcbackoff.logtail.v1.Record; the rule's types are grpcbackoff.logtail.v1.Record and grpcbackoff.logtail.v1.Record`,
		`interceptor: opts[5]: method name "grpcbackoff.logtail.v1.LogTail/Tail"`,
		`interceptor: opts[6]: WithResume("` + tailMethod + `"): record and reopen must not be nil`,
		`interceptor: WithResume("` + scanMethod + `"): ` + scanMethod + ` is known not to be idempotent, and a resume sends it again: if resuming it is safe, say so with WithSafety`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("New's error lacks %q; it is:\n%v", want, err)
		}
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != 8 {
		t.Errorf("New's error has %d lines, want 8:\n%v", n, err)
	}
	// A service's rule covers its server streams of the rule's types, and
	// is not refused for the methods of other kinds it does not cover.
	if _, err := interceptor.New(bufconntest.Exact(), rule.option(logService)); err != nil {
		t.Errorf("New refused a rule for the service: %v", err)
	}
	// A server stream nothing else marks is taken as safe to open again by
	// its rule, which opens it again by design, and Explain says so; one
	// known not to be idempotent is refused, naming the rule.
	const unmarked = "/grpc.testing.TestService/StreamingOutputCall"
	streaming := interceptor.WithResume(unmarked, func(n int, _ *testgrpc.StreamingOutputCallResponse) int { return n + 1 },
		func(r *testgrpc.StreamingOutputCallRequest, _ int) (*testgrpc.StreamingOutputCallRequest, error) {
			return r, nil
		})
	if r, err := interceptor.New(bufconntest.Exact(), streaming); err != nil {
		t.Errorf("New of a rule for an unmarked method: %v, want it taken as safe to open again", err)
	} else if d := r.Explain(unmarked); d.Safety != interceptor.Idempotent || !strings.HasPrefix(d.Source, "resumed by a rule (WithResume)") {
		t.Errorf("Explain(%s): Safety %v from %q, want Idempotent from its resume rule", unmarked, d.Safety, d.Source)
	}
	if _, err := interceptor.New(bufconntest.Exact(), streaming, interceptor.WithSafety(unmarked, interceptor.NotIdempotent)); err == nil ||
		!strings.Contains(err.Error(), `WithResume("`+unmarked+`"): `+unmarked+` is known not to be idempotent`) {
		t.Errorf("New of a rule for a method stated not idempotent: %v, want it refused, naming the rule", err)
	}
	if _, err := interceptor.New(bufconntest.Exact(), streaming, testService); err != nil {
		t.Errorf("New refused a rule for a method stated idempotent: %v", err)
	}
}

// TestResumeOtherMethodsUnchanged: a Retrier with a rule for Tail treats
// every other method as before: Scan, which has none, hands a failure
// after records to the caller after one open, and the TestService's three
// kinds of stream are retried until they commit, and not after.
func TestResumeOtherMethodsUnchanged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := logtail.NewServer(t, paced(1000, logtail.Faults(logtail.Fail(300, codes.Unavailable))))
		rule := &nextOffset{}
		c := srv.Client(t, interceptor.DialOptions(bufconntest.Exact(), interceptor.WithoutThrottle(), rule.option(tailMethod), testService)...)
		r := runTail(t.Context(), c, &logtail.TailRequest{}, tailHow{Scan: true})
		checkRecords(t, r, 0, 300)
		if st := status.Convert(r.Err); st.Code() != codes.Unavailable || st.Message() != "logtail: failed after 300 records" {
			t.Errorf("Scan: err = %v, want the server's UNAVAILABLE unchanged", r.Err)
		}
		if n := len(srv.Opens()); n != 1 || rule.records.Load() != 0 {
			t.Errorf("Scan: %d opens, %d records recorded; want 1 and none", n, rule.records.Load())
		}
	})
	for _, k := range streamKinds {
		t.Run(k.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				down := status.Error(codes.Unavailable, "down")
				srv := bufconntest.NewServer(t, func(id string, n int) bufconntest.Step {
					if id == "committed" {
						return bufconntest.Step{Header: true, Recv: bufconntest.UntilHalfClose, Send: 2, Err: down}
					}
					return []bufconntest.Step{failWith(codes.Unavailable), failWith(codes.Unavailable), bufconntest.Succeed(3)}[min(n, 2)]
				})
				c := srv.Client(t, interceptor.DialOptions(bufconntest.Exact(), interceptor.WithoutThrottle(), (&nextOffset{}).option(tailMethod), testService)...)
				msgs := callerMessages(k)
				r := runCall(callerContext(t), c, k, msgs, howToRun{})
				if r.Err != nil || !slices.Equal(r.Got, expectedResponses(k, msgs, 3)) {
					t.Errorf("retried: got %q, %v; want %q", r.Got, r.Err, expectedResponses(k, msgs, 3))
				}
				if got, want := attemptGaps(srv.Attempts("")), bufconntest.Seconds(1, 2); !slices.Equal(got, want) {
					t.Errorf("gaps = %v, want %v", got, want)
				}
				ctx := metadata.AppendToOutgoingContext(callerContext(t), bufconntest.StreamKey, "committed")
				r = runCall(ctx, c, k, msgs, howToRun{})
				if status.Code(r.Err) != codes.Unavailable || len(srv.Attempts("committed")) != 1 {
					t.Errorf("committed: %v after %d attempts, want UNAVAILABLE after 1", r.Err, len(srv.Attempts("committed")))
				}
			})
		})
	}
}

// TestResumeHeader: Header returns the first open's headers, at once
// during a resume's wait and after a resume, and waits for them only
// before the first record, as a plain stream's does.
func TestResumeHeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := logtail.NewServer(t, paced(1000, logtail.Faults(logtail.Fail(300, codes.Unavailable))))
		c := srv.Client(t, interceptor.DialOptions(bufconntest.Exact(), interceptor.WithoutThrottle(), (&nextOffset{}).option(tailMethod))...)
		start := time.Now()
		s, err := c.Tail(t.Context(), &logtail.TailRequest{})
		if err != nil {
			t.Fatal(err)
		}
		md, err := s.Header()
		if err != nil || !slices.Equal(md.Get(logtail.OpenKey), []string{"0"}) || time.Since(start) != 10*time.Millisecond {
			t.Errorf("Header() = %v, %v after %v; want open 0's, when its first record came (10ms)", md, err, time.Since(start))
		}
		var during metadata.MD
		var at time.Duration
		var wg sync.WaitGroup
		time.AfterFunc(3500*time.Millisecond-time.Since(start), func() { // during the wait from 3 s to 4 s
			wg.Go(func() {
				during, _ = s.Header()
				at = time.Since(start)
			})
		})
		r := tailResult{}
		for {
			m, err := s.Recv()
			if err != nil {
				r.Err = err
				break
			}
			r.Offsets = append(r.Offsets, m.GetOffset())
		}
		wg.Wait()
		if r.Err != io.EOF {
			t.Fatalf("the stream ended with %v", r.Err)
		}
		checkRecords(t, r, 0, 1000)
		if !slices.Equal(during.Get(logtail.OpenKey), []string{"0"}) || at != 3500*time.Millisecond {
			t.Errorf("Header() during the wait = %v at %v, want open 0's at once (3.5s)", during, at)
		}
		if md, _ := s.Header(); !slices.Equal(md.Get(logtail.OpenKey), []string{"0"}) {
			t.Errorf("Header() after the end = %v, want open 0's", md)
		}
		if tr := s.Trailer(); !slices.Equal(tr.Get(logtail.OpenKey), []string{"1"}) {
			t.Errorf("Trailer() after the end = %v, want open 1's", tr)
		}
	})
}

// TestResumeContext: Context does not stop resuming; it is the library's
// own context, the same one after a resume, with the caller's values and
// a peer, done once the stream ends.
func TestResumeContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := logtail.NewServer(t, paced(1000, logtail.Faults(logtail.Fail(300, codes.Unavailable))))
		c := srv.Client(t, interceptor.DialOptions(bufconntest.Exact(), interceptor.WithoutThrottle(), (&nextOffset{}).option(tailMethod))...)
		type key struct{}
		var ctx1, ctx2 context.Context
		r := runTail(context.WithValue(t.Context(), key{}, "v"), c, &logtail.TailRequest{}, tailHow{OnRecv: func(n int, s grpc.ClientStream) {
			switch n {
			case 1:
				ctx1 = s.Context()
			case 301:
				ctx2 = s.Context()
			}
		}})
		if r.Err != nil {
			t.Fatalf("the stream ended with %v after %d records: Context must not stop resuming", r.Err, len(r.Offsets))
		}
		checkRecords(t, r, 0, 1000)
		if ctx1 == nil || ctx1 != ctx2 {
			t.Fatalf("Context() after the first record and after the resume: %v, %v; want one context", ctx1, ctx2)
		}
		select {
		case <-ctx1.Done():
			if ctx1.Err() != context.Canceled {
				t.Errorf("Context().Err() = %v, want context.Canceled once the stream ended", ctx1.Err())
			}
		default:
			t.Error("Context() is not done once the stream ended")
		}
		if ctx1.Value(key{}) != "v" {
			t.Error("Context() lost the caller's values")
		}
		if p, ok := peer.FromContext(ctx1); !ok || p.Addr == nil {
			t.Errorf("Context() has no peer (%v)", p)
		}
	})
}

// addrConn is a connection that names its far end addr, as a TCP one
// would.
type addrConn struct {
	net.Conn
	addr net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.addr }

// TestResumeContextPeer: the peer of Context is the first open's, after a
// resume on another server too. Server A (10.0.0.1) stops after 300
// records; the ClientConn's next connection goes to B (10.0.0.2).
func TestResumeContextPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := logtail.NewServer(t, paced(1000, logtail.Faults(logtail.Fault{After: 300, Stop: true})))
		b := logtail.NewServer(t, paced(1000, nil))
		var dials atomic.Int32
		dial := func(ctx context.Context) (net.Conn, error) {
			srv, ip := a, net.IPv4(10, 0, 0, 1)
			if dials.Add(1) > 1 {
				srv, ip = b, net.IPv4(10, 0, 0, 2)
			}
			c, err := srv.Dialer()(ctx)
			if err != nil {
				return nil, err
			}
			return addrConn{c, &net.TCPAddr{IP: ip, Port: 443}}, nil
		}
		cc := bufconntest.Dial(t, dial, interceptor.DialOptions(bufconntest.Exact(), interceptor.WithoutThrottle(), (&nextOffset{}).option(tailMethod))...)
		var first, later context.Context
		r := runTail(t.Context(), logtail.NewLogTailClient(cc), &logtail.TailRequest{}, tailHow{OnRecv: func(n int, s grpc.ClientStream) {
			switch n {
			case 1:
				first = s.Context()
			case 1000:
				later = s.Context()
			}
		}})
		if r.Err != nil {
			t.Fatalf("the stream ended with %v after %d records", r.Err, len(r.Offsets))
		}
		checkRecords(t, r, 0, 1000)
		if len(b.Opens()) != 1 {
			t.Fatalf("server B had %d opens, want the resumed one", len(b.Opens()))
		}
		for name, ctx := range map[string]context.Context{"after the first record": first, "after the resume": later} {
			if p, ok := peer.FromContext(ctx); !ok || p.Addr.String() != "10.0.0.1:443" {
				t.Errorf("Context() %s has the peer %v, want the first open's, 10.0.0.1:443", name, p)
			}
		}
	})
}

// TestResumeCloseSendAndCancel: CloseSend during a resume's wait returns
// at once, and the stream goes on; a cancellation during the wait ends
// it at once (ReasonCanceled), as does its ClientConn's closing.
func TestResumeCloseSendAndCancel(t *testing.T) {
	t.Run("CloseSend", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := logtail.NewServer(t, paced(1000, logtail.Faults(logtail.Fail(300, codes.Unavailable))))
			c := srv.Client(t, interceptor.DialOptions(bufconntest.Exact(), interceptor.WithoutThrottle(), (&nextOffset{}).option(tailMethod))...)
			start := time.Now()
			var closeErr error
			var at time.Duration
			var wg sync.WaitGroup
			r := runTail(t.Context(), c, &logtail.TailRequest{}, tailHow{OnRecv: func(n int, s grpc.ClientStream) {
				if n == 300 {
					time.AfterFunc(500*time.Millisecond, func() { // at 3.5 s, in the wait
						wg.Go(func() {
							closeErr = s.CloseSend()
							at = time.Since(start)
						})
					})
				}
			}})
			wg.Wait()
			if r.Err != nil {
				t.Fatalf("the stream ended with %v", r.Err)
			}
			checkRecords(t, r, 0, 1000)
			if closeErr != nil || at != 3500*time.Millisecond {
				t.Errorf("CloseSend() = %v at %v, want nil at once (3.5s)", closeErr, at)
			}
		})
	})
	for _, how := range []string{"cancel", "close the ClientConn"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := logtail.NewServer(t, paced(1000, logtail.Faults(logtail.Fail(300, codes.Unavailable))))
				cc := srv.Conn(t, interceptor.DialOptions(bufconntest.Exact(), interceptor.WithoutThrottle(), (&nextOffset{}).option(tailMethod))...)
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				stop := cancel
				if how != "cancel" {
					stop = func() { _ = cc.Close() }
				}
				start := time.Now()
				time.AfterFunc(3500*time.Millisecond, stop) // in the wait from 3 s to 4 s
				r := runTail(ctx, logtail.NewLogTailClient(cc), &logtail.TailRequest{}, tailHow{})
				checkRecords(t, r, 0, 300)
				checkFinal(t, r.Err, codes.Canceled, 1, grpcbackoff.ReasonCanceled)
				if got := r.End.Sub(start); got != 3500*time.Millisecond {
					t.Errorf("the stream ended after %v, want 3.5s: at once", got)
				}
				if n := len(srv.Opens()); n != 1 {
					t.Errorf("%d opens, want 1", n)
				}
			})
		})
	}
}

// TestResumeProperty: whatever the faults (where, which code, headers
// first or not), a stream that resumes gives the caller every record once,
// in order.
func TestResumeProperty(t *testing.T) {
	codesRetried := []codes.Code{codes.Unavailable, codes.ResourceExhausted}
	for seed := range uint64(30) {
		rnd := rand.New(rand.NewPCG(seed, 43))
		var faults []logtail.Fault
		for range rnd.IntN(6) {
			faults = append(faults, logtail.Fault{After: rnd.IntN(60), Header: rnd.IntN(2) == 0,
				Err: status.Error(codesRetried[rnd.IntN(2)], "scripted")})
		}
		from, limit := int64(rnd.IntN(50)), int64(rnd.IntN(200))
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := logtail.NewServer(t, logtail.Options{Records: 200, Every: time.Duration(rnd.IntN(3)) * time.Millisecond, Script: logtail.Faults(faults...)})
				p := bufconntest.Exact()
				p.MaxAttempts = 20
				c := srv.Client(t, interceptor.DialOptions(p, interceptor.WithoutThrottle(), (&nextOffset{}).option(tailMethod))...)
				r := runTail(t.Context(), c, &logtail.TailRequest{Offset: from, Limit: limit}, tailHow{})
				if r.Err != nil {
					t.Fatalf("faults %+v: the stream ended with %v", faults, r.Err)
				}
				to := int64(200)
				if limit > 0 {
					to = min(to, from+limit)
				}
				checkRecords(t, r, from, to)
				checkPreviousAttempts(t, srv.Opens())
			})
		})
	}
}

// TestResumeHeap: a resumable stream keeps its request and its token, not
// its messages: a stream of 100 000 records of 1 KiB (100 MB), resumed
// half way, holds no more than a small constant once it ended, against
// the heap before it (the connection made and idle both times; the caller
// reuses one message and checks each record as it comes).
func TestResumeHeap(t *testing.T) {
	if raceEnabled {
		t.Skip("a heap's growth: run without -race (the README's test command)")
	}
	const n, size = 100_000, 1 << 10
	srv := logtail.NewServer(t, logtail.Options{Records: n, Size: size, Script: logtail.Faults(logtail.Fault{}, logtail.Fail(n/2, codes.Unavailable))})
	p := bufconntest.Exact()
	p.Initial, p.Max = time.Millisecond, time.Millisecond
	c := srv.Client(t, interceptor.DialOptions(p, interceptor.WithoutThrottle(), (&nextOffset{}).option(tailMethod))...)
	heap := func() int64 {
		runtime.GC()
		runtime.GC() // the pools' victims too
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	read := func(limit int64) grpc.ClientStream {
		s, err := c.Tail(t.Context(), &logtail.TailRequest{Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		m := new(logtail.Record)
		for next := int64(0); ; next++ {
			err := s.RecvMsg(m)
			if err == io.EOF {
				if next != limit {
					t.Fatalf("the stream ended after %d records, want %d", next, limit)
				}
				return s
			}
			if err != nil {
				t.Fatalf("the stream ended with %v after %d records", err, next)
			}
			if m.GetOffset() != next || len(m.GetData()) != size {
				t.Fatalf("record %d (%d B) received where %d was due", m.GetOffset(), len(m.GetData()), next)
			}
		}
	}
	read(1_000) // the connection, its buffers and pools, as they stay
	before := heap()
	s := read(n)
	after := heap()
	runtime.KeepAlive(s)
	if len(srv.Opens()) != 3 {
		t.Errorf("%d opens, want 3: the warm-up, then the stream and its resume", len(srv.Opens()))
	}
	grown := after - before
	t.Logf("heap in use before the stream: %d B; once its %d records of %d B were read: %d B (%+d B)", before, n, size, after, grown)
	if grown > 256<<10 {
		t.Errorf("the heap grew by %d B over %d records of %d B, want at most 256 KiB: the stream keeps messages", grown, n, size)
	}
}

// TestResumeRecvAllocs: the rule's record costs a receive no allocation:
// receiving from a stream with a rule allocates, in the whole process
// (client and server), as much as from one without
// (bench's BenchmarkResumeRecv and BenchmarkIsolatedResumeRecv have the
// figures).
func TestResumeRecvAllocs(t *testing.T) {
	rule := &nextOffset{}
	perMessage := func(withRule bool) float64 {
		srv := logtail.NewServer(t, logtail.Options{Records: 1 << 20, Size: 1 << 10})
		opts := []interceptor.Option{interceptor.WithoutThrottle()}
		if withRule {
			opts = append(opts, rule.option(scanMethod))
		}
		c := srv.Client(t, interceptor.DialOptions(bufconntest.Exact(), opts...)...)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		s, err := c.Scan(ctx, &logtail.TailRequest{})
		if err != nil {
			t.Fatal(err)
		}
		m := new(logtail.Record)
		return testing.AllocsPerRun(5_000, func() {
			if err := s.RecvMsg(m); err != nil {
				t.Fatal(err)
			}
		})
	}
	none, with := perMessage(false), perMessage(true)
	t.Logf("allocations per message received: %v without a rule, %v with one", none, with)
	if n := rule.records.Load(); n < 5_000 {
		t.Fatalf("the rule recorded %d messages, want every one received (5 001)", n)
	}
	if with > none+0.5 {
		t.Errorf("a receive allocates %v times with a rule, %v without: record must add none", with, none)
	}
}
