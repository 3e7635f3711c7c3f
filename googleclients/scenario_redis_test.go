package googleclients_test

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	redis "cloud.google.com/go/redis/apiv1"
	"cloud.google.com/go/redis/apiv1/redispb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/gaxretry"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/redistest"
)

const parent = "projects/p/locations/l"

// createInstance creates an instance through c and returns its name.
func createInstance(t *testing.T, c *redis.CloudRedisClient, id string) string {
	t.Helper()
	op, err := c.CreateInstance(t.Context(), &redispb.CreateInstanceRequest{Parent: parent, InstanceId: id,
		Instance: &redispb.Instance{Tier: redispb.Instance_BASIC, MemorySizeGb: 1}})
	if err != nil {
		t.Fatalf("CreateInstance(%s): %v", id, err)
	}
	inst, err := op.Wait(t.Context())
	if err != nil {
		t.Fatalf("CreateInstance(%s).Wait: %v", id, err)
	}
	return inst.GetName()
}

func gaps(as []redistest.Attempt) []time.Duration {
	var g []time.Duration
	for i := 1; i < len(as); i++ {
		g = append(g, as[i].Time.Sub(as[i-1].Time))
	}
	return g
}

// TestRedisClientCallOptions sets a per-method gax CallOption on a real
// cloud.google.com/go/redis/apiv1 client: GetInstance is retried as the
// Policy says, CreateInstance, left alone, is not.
func TestRedisClientCallOptions(t *testing.T) {
	ms := time.Millisecond
	p := grpcbackoff.DefaultPolicy()
	p.Initial = 100 * ms
	p.Max = time.Second
	p.Jitter = 0
	p.MaxAttempts = 3
	co, err := gaxretry.CallOption(p)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		faults   []redistest.Fault
		wantCode codes.Code
		wantGaps []time.Duration
	}{
		{"two failures", []redistest.Fault{{Code: codes.Unavailable, Count: 2}}, codes.OK, []time.Duration{100 * ms, 200 * ms}},
		{"exhausted", []redistest.Fault{{Code: codes.Unavailable, Count: 5}}, codes.Unavailable, []time.Duration{100 * ms, 200 * ms}},
		{"not retryable", []redistest.Fault{{Code: codes.FailedPrecondition, Count: 1}}, codes.FailedPrecondition, nil},
		{"RetryInfo", []redistest.Fault{{Code: codes.ResourceExhausted, Count: 1, RetryDelay: 700 * ms}}, codes.OK, []time.Duration{700 * ms}},
		{"RetryInfo past Max", []redistest.Fault{{Code: codes.Unavailable, Count: 1, RetryDelay: time.Minute}}, codes.OK, []time.Duration{time.Minute}},
		{"RetryInfo past MaxHintDelay", []redistest.Fault{{Code: codes.Unavailable, Count: 1, RetryDelay: time.Hour}}, codes.Unavailable, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := redistest.NewServer()
				defer srv.Close()
				c := srv.Client(t.Context())
				// Appended, so that the client's default timeout stays.
				c.CallOptions.GetInstance = append(c.CallOptions.GetInstance, co)
				name := createInstance(t, c, "cache")

				for _, f := range tc.faults {
					f.Method = redistest.MethodGetInstance
					if err := srv.Inject(f); err != nil {
						t.Fatal(err)
					}
				}
				_, err := c.GetInstance(t.Context(), &redispb.GetInstanceRequest{Name: name})
				if status.Code(err) != tc.wantCode {
					t.Errorf("GetInstance: err = %v, want code %v", err, tc.wantCode)
				}
				as := srv.AttemptsFor(redistest.MethodGetInstance)
				if got := gaps(as); len(as) != len(tc.wantGaps)+1 || fmt.Sprint(got) != fmt.Sprint(tc.wantGaps) {
					t.Errorf("GetInstance: %d attempts %v apart, want %d attempts %v apart", len(as), got, len(tc.wantGaps)+1, tc.wantGaps)
				}

				// CreateInstance has no retry of ours: one failure is final.
				srv.FailNext(redistest.MethodCreateInstance, 1, codes.Unavailable)
				_, err = c.CreateInstance(t.Context(), &redispb.CreateInstanceRequest{Parent: parent, InstanceId: "other",
					Instance: &redispb.Instance{Tier: redispb.Instance_BASIC, MemorySizeGb: 1}})
				if status.Code(err) != codes.Unavailable {
					t.Errorf("CreateInstance: err = %v, want UNAVAILABLE", err)
				}
				if n := len(srv.AttemptsFor(redistest.MethodCreateInstance)); n != 2 { // the first created "cache"
					t.Errorf("CreateInstance: server saw %d attempts, want 2 (one per call)", n)
				}
			})
		})
	}
}

// TestNeverBoth: a gax Retryer of gaxretry.CallOption over the interceptor
// cannot multiply the attempts. Cloud Redis retries nothing by itself, so
// the Retrier retries its calls; gaxretry.CallOption added to its
// CallOptions marks its calls, and the Retrier leaves the codes its Retryer
// retries to it: one layer, 3 attempts reach the server, not 3 × 3. (Before
// issue 33 the Retrier retried them too, then refused gax's attempts at
// once with the error it gave up with: 3 attempts, the Retrier's error;
// re-derived for issue 26: it showed 3 × 3 = 9.)
func TestNeverBoth(t *testing.T) {
	p := grpcbackoff.DefaultPolicy()
	p.Initial = 10 * time.Millisecond
	p.Jitter = 0
	p.MaxAttempts = 3
	synctest.Test(t, func(t *testing.T) {
		srv := redistest.NewServer()
		defer srv.Close()
		// Each on its own is 3 attempts.
		gaxOnly := srv.Client(t.Context())
		gaxOnly.CallOptions.GetInstance = append(gaxOnly.CallOptions.GetInstance, gaxretry.MustCallOption(p))
		interceptorOnly := srv.Client(t.Context(), option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(interceptor.Unary(p))))
		both := srv.Client(t.Context(), option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(interceptor.Unary(p))))
		both.CallOptions.GetInstance = append(both.CallOptions.GetInstance, gaxretry.MustCallOption(p))

		srv.Down()
		for _, tc := range []struct {
			name string
			c    *redis.CloudRedisClient
			want int
		}{
			{"gaxretry", gaxOnly, 3},
			{"interceptor", interceptorOnly, 3},
			{"both", both, 3},
		} {
			srv.ResetAttempts()
			_, err := tc.c.GetInstance(t.Context(), &redispb.GetInstanceRequest{Name: parent + "/instances/a"})
			if status.Code(err) != codes.Unavailable {
				t.Errorf("%s: GetInstance: err = %v, want UNAVAILABLE", tc.name, err)
			}
			synctest.Wait()
			if n := len(srv.AttemptsFor(redistest.MethodGetInstance)); n != tc.want {
				t.Errorf("%s: server saw %d attempts, want %d", tc.name, n, tc.want)
			}
			// The last error is the server's, which gax's Retryer gave up
			// with: the interceptor made one attempt of each.
			var e *grpcbackoff.Error
			if tc.name == "both" && errors.As(err, &e) {
				t.Errorf("%s: err = %v, want the server's error, handed back by the interceptor", tc.name, err)
			}
		}
	})
}
