package redistest_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	redis "cloud.google.com/go/redis/apiv1"
	"cloud.google.com/go/redis/apiv1/redispb"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/redistest"
)

// TestRedisClientFrozenServer: the real Cloud Redis client (600 s timeouts)
// against a server that hangs every call arriving in its first 30 s, then
// answers again. With AttemptTimeout 10 s each hung attempt is cut exactly
// 10 s after it started and retried (DEADLINE_EXCEEDED is not among the
// Codes), and the call succeeds at 37 to 40 s (the README's figure: cut at
// 10, 21–22 and 33–35 s, each retry 1–2, 2–3, 4–5 s later). Without it (the default), the
// one attempt holds the call for the client's whole 600 s timeout.
func TestRedisClientFrozenServer(t *testing.T) {
	const thaw = 30 * time.Second
	t.Run("AttemptTimeout 10 s", func(t *testing.T) {
		for range 20 { // fresh jitter each time
			synctest.Test(t, func(t *testing.T) {
				p := grpcbackoff.DefaultPolicy()
				p.AttemptTimeout = 10 * time.Second
				srv, c := newClient(t, p)
				srv.Freeze()
				time.AfterFunc(thaw, srv.Thaw)
				start := time.Now()
				if err := get(t.Context(), c); err != nil {
					t.Fatalf("GetInstance = %v, want success once the server answers", err)
				}
				if took := time.Since(start); took < 37*time.Second || took > 40*time.Second {
					t.Errorf("the call took %v, want 37 to 40s", took)
				}
				as := srv.AttemptsFor(redistest.MethodGetInstance)
				if len(as) < 2 {
					t.Fatalf("the server saw %d attempts, want at least 2", len(as))
				}
				var starts []time.Duration
				for _, a := range as {
					starts = append(starts, a.Time.Sub(start))
				}
				t.Logf("attempts started at %v; success after %v", starts, time.Since(start))
				for i, a := range as {
					at := a.Time.Sub(start)
					switch last := i == len(as)-1; {
					case !last && (at >= thaw || a.Answered.Sub(a.Time) != 10*time.Second):
						t.Errorf("attempt %d started at %v and ended %v later, want a start before %v, cut after exactly 10s", i+1, at, a.Answered.Sub(a.Time), thaw)
					case last && (at < thaw || a.Code != codes.OK || a.Answered != a.Time):
						t.Errorf("last attempt started at %v, answered %v after with %v; want after %v, at once, OK", at, a.Answered.Sub(a.Time), a.Code, thaw)
					}
				}
			})
		}
	})
	t.Run("default: no AttemptTimeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv, c := newClient(t, grpcbackoff.DefaultPolicy())
			srv.Freeze()
			time.AfterFunc(thaw, srv.Thaw)
			start := time.Now()
			err := get(t.Context(), c)
			if took := time.Since(start); took != 600*time.Second {
				t.Errorf("the call took %v, want the client's whole 600s timeout", took)
			}
			if status.Code(err) != codes.DeadlineExceeded {
				t.Errorf("err = %v, want DEADLINE_EXCEEDED", err)
			}
			var e *grpcbackoff.Error
			if errors.As(err, &e) {
				t.Errorf("err = %v, want gRPC's error unchanged (one attempt, never retried)", err)
			}
			if n := len(srv.AttemptsFor(redistest.MethodGetInstance)); n != 1 {
				t.Errorf("the server saw %d attempts, want 1", n)
			}
		})
	})
}

// TestRedisClientFrozenServerHedged: the same freeze, with the README's
// hedging of ListInstances (2 attempts, 50 ms apart) on the README's
// DialOptions. Each hedged attempt is bounded by AttemptTimeout too, and the
// failures of a round answer to the Policy: cut, backoff, a new round. The
// call is answered within 60 s; before issue 20, the hedges dropped the
// AttemptTimeout and the call held the client's whole 600 s.
func TestRedisClientFrozenServerHedged(t *testing.T) {
	const thaw = 30 * time.Second
	for range 10 { // fresh jitter each time
		synctest.Test(t, func(t *testing.T) {
			p := grpcbackoff.DefaultPolicy()
			p.AttemptTimeout = 10 * time.Second
			r, err := interceptor.New(p, interceptor.WithHedging(redistest.MethodListInstances,
				grpcbackoff.Hedging{MaxAttempts: 2, Delay: 50 * time.Millisecond}))
			if err != nil {
				t.Fatal(err)
			}
			srv := redistest.NewServer()
			t.Cleanup(srv.Close)
			opts := srv.ClientOptions()
			for _, o := range r.DialOptions() {
				opts = append(opts, option.WithGRPCDialOption(o))
			}
			c, err := redis.NewCloudRedisClient(t.Context(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			srv.Freeze()
			time.AfterFunc(thaw, srv.Thaw)
			start := time.Now()
			it := c.ListInstances(t.Context(), &redispb.ListInstancesRequest{Parent: parent})
			if _, err := it.Next(); err != iterator.Done {
				t.Fatalf("ListInstances: %v, want an empty list once the server answers", err)
			}
			took := time.Since(start)
			as := srv.AttemptsFor(redistest.MethodListInstances)
			var starts []time.Duration
			for _, a := range as {
				starts = append(starts, a.Time.Sub(start))
			}
			t.Logf("attempts started at %v; answered after %v", starts, took)
			if took >= 60*time.Second {
				t.Errorf("the call took %v, want less than 60s", took)
			}
			if len(as) > p.MaxAttempts {
				t.Errorf("%d attempts, more than MaxAttempts %d", len(as), p.MaxAttempts)
			}
			for i, a := range as {
				if at := a.Time.Sub(start); at < thaw && a.Answered.Sub(a.Time) != 10*time.Second {
					t.Errorf("attempt %d started at %v and ended %v later, want it cut after exactly 10s", i+1, at, a.Answered.Sub(a.Time))
				}
			}
		})
	}
}
