package redistest_test

import (
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/redis/apiv1/redispb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/redistest"
)

// TestRedisClientHedgedRead runs a real Cloud Redis client whose
// GetInstance is hedged after 50 ms: when the first attempt is slow (1 s),
// the hedge answers, the caller gets the instance at 50 ms, and the slow
// attempt is canceled.
func TestRedisClientHedgedRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const delay = 50 * time.Millisecond
		r, err := interceptor.New(grpcbackoff.DefaultPolicy(),
			interceptor.WithHedging(redistest.MethodGetInstance, grpcbackoff.Hedging{MaxAttempts: 2, Delay: delay}))
		if err != nil {
			t.Fatal(err)
		}
		srv := redistest.NewServer()
		defer srv.Close()
		ctx := t.Context()
		c := srv.Client(ctx, option.WithGRPCDialOption(grpc.WithUnaryInterceptor(r.Unary())))
		op, err := c.CreateInstance(ctx, &redispb.CreateInstanceRequest{Parent: "projects/p/locations/l", InstanceId: "cache",
			Instance: &redispb.Instance{Tier: redispb.Instance_BASIC, MemorySizeGb: 1}})
		if err != nil {
			t.Fatal(err)
		}
		inst, err := op.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}

		srv.SetLatency(time.Second) // for the first attempt
		time.AfterFunc(delay/2, func() { srv.SetLatency(0) })
		start := time.Now()
		got, err := c.GetInstance(ctx, &redispb.GetInstanceRequest{Name: inst.GetName()})
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != delay || got.GetName() != inst.GetName() || got.GetHost() != inst.GetHost() {
			t.Errorf("GetInstance = %s at %s after %v, want %s at %s after %v", got.GetName(), got.GetHost(), took, inst.GetName(), inst.GetHost(), delay)
		}
		synctest.Wait()
		as := srv.AttemptsFor(redistest.MethodGetInstance)
		if len(as) != 2 {
			t.Fatalf("server saw %d GetInstance attempts, want 2", len(as))
		}
		if as[0].Code != codes.Canceled || as[0].Answered.Sub(start) != delay {
			t.Errorf("attempt 1 ended with %v after %v, want CANCELED after %v", as[0].Code, as[0].Answered.Sub(start), delay)
		}
		if as[1].Code != codes.OK || as[1].Time.Sub(start) != delay || !slices.Equal(as[1].Metadata.Get(interceptor.PreviousAttemptsKey), []string{"1"}) {
			t.Errorf("attempt 2 = %+v, want OK, sent at %v with %s 1", as[1], delay, interceptor.PreviousAttemptsKey)
		}
	})
}

// TestHedgingRefusedWhereNotIdempotent checks that New refuses hedging for
// a Cloud Redis method its API marks unsafe to send twice (FailoverInstance,
// a custom POST) and for the whole service, which has such methods, and
// accepts it for GetInstance (a GET) and where the caller vouches for it.
func TestHedgingRefusedWhereNotIdempotent(t *testing.T) {
	h := grpcbackoff.Hedging{MaxAttempts: 2, Delay: 50 * time.Millisecond}
	const failover = "/google.cloud.redis.v1.CloudRedis/FailoverInstance"
	for _, name := range []string{failover, "/google.cloud.redis.v1.CloudRedis/"} {
		_, err := interceptor.New(grpcbackoff.DefaultPolicy(), interceptor.WithHedging(name, h))
		if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "not idempotent") {
			t.Errorf("New(WithHedging(%q)) = %v, want an error naming it as not idempotent", name, err)
		}
	}
	if _, err := interceptor.New(grpcbackoff.DefaultPolicy(), interceptor.WithHedging(redistest.MethodGetInstance, h)); err != nil {
		t.Errorf("New(WithHedging(GetInstance)) = %v, want no error", err)
	}
	if _, err := interceptor.New(grpcbackoff.DefaultPolicy(), interceptor.WithHedging(failover, h),
		interceptor.WithSafety(failover, interceptor.Idempotent)); err != nil {
		t.Errorf("New(WithHedging(FailoverInstance), WithSafety(Idempotent)) = %v, want no error", err)
	}
}
