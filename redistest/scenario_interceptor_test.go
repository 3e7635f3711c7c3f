package redistest_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/redis/apiv1/redispb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/redistest"
)

// TestRedisClientPerMethod runs a real cloud.google.com/go/redis/apiv1
// client through a Retrier against the fake: reads are retried, the
// CreateInstance mutation is not, whether that is said with options or with
// a service config.
func TestRedisClientPerMethod(t *testing.T) {
	ms := time.Millisecond
	p := exactPolicy()
	p.Initial = 100 * ms
	p.MaxAttempts = 4
	sc := scParse(t, `{"methodConfig": [
		{"name": [{"service": "google.cloud.redis.v1.CloudRedis", "method": "CreateInstance"}]},
		{"name": [{}], "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.2s", "maxBackoff": "10s",
			"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`)
	cases := []struct {
		name string
		opts []interceptor.Option
		// the waits before the two retries of GetInstance, at least and at most
		wantMin, wantMax []time.Duration
	}{
		{"options", opt1(interceptor.WithoutRetryFor(redistest.MethodCreateInstance)),
			[]time.Duration{100 * ms, 200 * ms}, []time.Duration{100 * ms, 200 * ms}},
		// 200 ms, then 400 ms, times U[0.8, 1.2] (see serviceconfig.Parse).
		{"service config", opt1(interceptor.WithServiceConfig(sc)),
			[]time.Duration{160 * ms, 320 * ms}, []time.Duration{240 * ms, 480 * ms}},
	}
	const parent = "projects/p/locations/l"
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, err := interceptor.New(p, tc.opts...)
				if err != nil {
					t.Fatal(err)
				}
				srv := redistest.NewServer()
				defer srv.Close()
				ctx := t.Context()
				c := srv.Client(ctx, option.WithGRPCDialOption(grpc.WithUnaryInterceptor(r.Unary())))

				op, err := c.CreateInstance(ctx, &redispb.CreateInstanceRequest{Parent: parent, InstanceId: "cache",
					Instance: &redispb.Instance{Tier: redispb.Instance_BASIC, MemorySizeGb: 1}})
				if err != nil {
					t.Fatalf("CreateInstance(cache): %v", err)
				}
				inst, err := op.Wait(ctx)
				if err != nil {
					t.Fatalf("CreateInstance(cache).Wait: %v", err)
				}

				// A read: two failures, then success on attempt 3.
				srv.FailNext(redistest.MethodGetInstance, 2, codes.Unavailable)
				if _, err := c.GetInstance(ctx, &redispb.GetInstanceRequest{Name: inst.GetName()}); err != nil {
					t.Fatalf("GetInstance after 2 failures: %v, want success", err)
				}
				as := srv.AttemptsFor(redistest.MethodGetInstance)
				if len(as) != 3 {
					t.Fatalf("GetInstance: server saw %d attempts, want 3", len(as))
				}
				for i := 1; i < len(as); i++ {
					if gap := as[i].Time.Sub(as[i-1].Time); gap < tc.wantMin[i-1] || gap > tc.wantMax[i-1] {
						t.Errorf("GetInstance: wait before retry %d = %v, want within [%v, %v]", i, gap, tc.wantMin[i-1], tc.wantMax[i-1])
					}
				}

				// Past MaxAttempts, the error keeps its code through the
				// client's own error type and counts the attempts.
				srv.ResetAttempts()
				srv.FailNext(redistest.MethodGetInstance, 10, codes.Unavailable)
				_, err = c.GetInstance(ctx, &redispb.GetInstanceRequest{Name: inst.GetName()})
				var e *grpcbackoff.Error
				if status.Code(err) != codes.Unavailable || !errors.As(err, &e) || e.Attempts != 4 || e.Reason != grpcbackoff.ReasonExhausted {
					t.Errorf("GetInstance after 10 failures: err = %v, want UNAVAILABLE after 4 attempts, exhausted", err)
				}
				if n := len(srv.AttemptsFor(redistest.MethodGetInstance)); n != 4 {
					t.Errorf("GetInstance after 10 failures: server saw %d attempts, want 4", n)
				}

				// The mutation: one failure, and no retry.
				srv.ResetAttempts()
				srv.FailNext(redistest.MethodCreateInstance, 1, codes.Unavailable)
				_, err = c.CreateInstance(ctx, &redispb.CreateInstanceRequest{Parent: parent, InstanceId: "other",
					Instance: &redispb.Instance{Tier: redispb.Instance_BASIC, MemorySizeGb: 1}})
				if status.Code(err) != codes.Unavailable || errors.As(err, &e) {
					t.Errorf("CreateInstance after 1 failure: err = %v, want the server's UNAVAILABLE unchanged", err)
				}
				if n := len(srv.AttemptsFor(redistest.MethodCreateInstance)); n != 1 {
					t.Errorf("CreateInstance: server saw %d attempts, want exactly 1", n)
				}
			})
		})
	}
}
