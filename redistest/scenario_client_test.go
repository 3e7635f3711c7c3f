package redistest_test

// End-to-end: the real cloud.google.com/go/redis/apiv1 client, our unary
// interceptor installed the way the README says, and the redistest fake over
// bufconn, all inside a synctest bubble, so every delay is exact and free.

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/platformkit/grpcbackoff/internal/bufconntest"

	redis "cloud.google.com/go/redis/apiv1"
	"cloud.google.com/go/redis/apiv1/redispb"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/api/option"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/redistest"
)

const (
	parent   = "projects/p/locations/us-central1"
	instance = parent + "/instances/cache"
)

// exactPolicy is the default policy without jitter, so that delays are exact.
func exactPolicy() grpcbackoff.Policy {
	p := grpcbackoff.DefaultPolicy()
	p.Jitter = 0
	return p
}

// newClient starts a fake holding one instance and returns it with a real
// Cloud Redis client that retries with p, installed as the README says. Both
// are closed when the test ends.
func newClient(t *testing.T, p grpcbackoff.Policy, opts ...interceptor.Option) (*redistest.Server, *redis.CloudRedisClient) {
	t.Helper()
	srv := redistest.NewServer()
	t.Cleanup(srv.Close)
	ic := interceptor.Unary(p, append([]interceptor.Option{interceptor.WithoutThrottle()}, opts...)...)
	c, err := redis.NewCloudRedisClient(t.Context(), append(srv.ClientOptions(),
		option.WithGRPCDialOption(grpc.WithUnaryInterceptor(ic)))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	op, err := c.CreateInstance(t.Context(), &redispb.CreateInstanceRequest{
		Parent: parent, InstanceId: "cache",
		Instance: &redispb.Instance{Tier: redispb.Instance_BASIC, MemorySizeGb: 1},
	})
	if err == nil {
		_, err = op.Wait(t.Context())
	}
	if err != nil {
		t.Fatal(err)
	}
	srv.ResetAttempts()
	return srv, c
}

func get(ctx context.Context, c *redis.CloudRedisClient, opts ...gax.CallOption) error {
	_, err := c.GetInstance(ctx, &redispb.GetInstanceRequest{Name: instance}, opts...)
	return err
}

// gaps returns the times between the attempts the server saw for method.
func gaps(srv *redistest.Server, method string) []time.Duration {
	as := srv.AttemptsFor(method)
	var g []time.Duration
	for i := 1; i < len(as); i++ {
		g = append(g, as[i].Time.Sub(as[i-1].Time))
	}
	return g
}

func TestRedisClientRetriesWithTheRecipe(t *testing.T) {
	cases := []struct {
		name     string
		failures int
		code     codes.Code
		wantGaps []time.Duration
	}{
		{"no failure", 0, codes.OK, nil},
		{"three UNAVAILABLE", 3, codes.Unavailable, bufconntest.Seconds(1, 2, 4)},
		{"RESOURCE_EXHAUSTED", 2, codes.ResourceExhausted, bufconntest.Seconds(1, 2)},
		{"seven: the cap, then at the cap", 7, codes.Unavailable, bufconntest.Seconds(1, 2, 4, 8, 16, 32, 32)},
		{"NOT_FOUND is not retried", 1, codes.NotFound, nil},
		{"INTERNAL is not retried", 1, codes.Internal, nil},
		{"DEADLINE_EXCEEDED from the server is not retried", 1, codes.DeadlineExceeded, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv, c := newClient(t, exactPolicy())
				if tc.failures > 0 {
					srv.FailNext(redistest.MethodGetInstance, tc.failures, tc.code)
				}
				err := get(t.Context(), c)
				wantCode := codes.OK
				if tc.wantGaps == nil && tc.failures > 0 {
					wantCode = tc.code
				}
				if got := status.Code(err); got != wantCode {
					t.Errorf("GetInstance code = %v, want %v (%v)", got, wantCode, err)
				}
				if got := gaps(srv, redistest.MethodGetInstance); !slices.Equal(got, tc.wantGaps) {
					t.Errorf("gaps between attempts = %v, want %v", got, tc.wantGaps)
				}
			})
		})
	}
}

func TestRedisClientGivesUpAfterMaxAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, c := newClient(t, exactPolicy())
		if err := srv.Inject(redistest.Fault{Method: redistest.MethodGetInstance, Code: codes.Unavailable, Count: 100, Message: "maintenance"}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err := get(t.Context(), c)
		if n := len(srv.AttemptsFor(redistest.MethodGetInstance)); n != 8 {
			t.Errorf("attempts = %d, want MaxAttempts (8)", n)
		}
		// 1+2+4+8+16+32+32 s.
		if got := time.Since(start); got != 95*time.Second {
			t.Errorf("gave up after %v, want 95s", got)
		}
		if status.Code(err) != codes.Unavailable {
			t.Errorf("status.Code(err) = %v, want Unavailable", status.Code(err))
		}
		var e *grpcbackoff.Error
		if !errors.As(err, &e) || e.Attempts != 8 || e.Reason != grpcbackoff.ReasonExhausted || e.Elapsed != 95*time.Second {
			t.Errorf("errors.As(*grpcbackoff.Error) = %+v, want 8 attempts over 95s, exhausted", e)
		}
		if msg := status.Convert(err).Message(); !strings.Contains(msg, "maintenance") || !strings.Contains(msg, "8 attempts over 1m35s") {
			t.Errorf("message = %q, want the server's message and the attempts", msg)
		}
	})
}

func TestRedisClientKeepsStatusDetails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, c := newClient(t, exactPolicy())
		// RetryInfo of 2 s on every attempt: the details survive retries
		// and the real client's error wrapping.
		srv.Inject(redistest.Fault{Method: redistest.MethodGetInstance, Code: codes.ResourceExhausted, Count: 100, RetryDelay: 2 * time.Second})
		err := get(t.Context(), c)
		st, ok := status.FromError(err)
		if !ok || st.Code() != codes.ResourceExhausted {
			t.Fatalf("status.FromError(err) = %v, %v; want RESOURCE_EXHAUSTED", st, ok)
		}
		var ri *errdetails.RetryInfo
		for _, d := range st.Details() {
			if v, ok := d.(*errdetails.RetryInfo); ok {
				ri = v
			}
		}
		if ri == nil || ri.GetRetryDelay().AsDuration() != 2*time.Second {
			t.Errorf("details = %v, want the server's RetryInfo of 2s", st.Details())
		}
		// RetryInfo 2 s is longer than 1 s, shorter than 4 s.
		if got, want := gaps(srv, redistest.MethodGetInstance), bufconntest.Seconds(2, 2, 4, 8, 16, 32, 32); !slices.Equal(got, want) {
			t.Errorf("gaps = %v, want %v", got, want)
		}
	})
}

func TestRedisClientHonoursRetryInfo(t *testing.T) {
	cases := []struct {
		name     string
		delay    time.Duration
		wantGaps []time.Duration
		wantCode codes.Code
	}{
		{"longer than the backoff", 5 * time.Second, bufconntest.Seconds(5), codes.OK},
		{"shorter than the backoff", 200 * time.Millisecond, bufconntest.Seconds(1), codes.OK},
		{"longer than Max: not retried", time.Hour, nil, codes.ResourceExhausted},
		{"negative: ignored", -time.Second, bufconntest.Seconds(1), codes.OK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv, c := newClient(t, exactPolicy())
				srv.Inject(redistest.Fault{Method: redistest.MethodGetInstance, Code: codes.ResourceExhausted, Count: 1,
					RetryDelay: tc.delay, RetryDelaySet: true})
				err := get(t.Context(), c)
				if status.Code(err) != tc.wantCode {
					t.Errorf("code = %v, want %v", status.Code(err), tc.wantCode)
				}
				if got := gaps(srv, redistest.MethodGetInstance); !slices.Equal(got, tc.wantGaps) {
					t.Errorf("gaps = %v, want %v", got, tc.wantGaps)
				}
			})
		})
	}
}

func TestRedisClientDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, c := newClient(t, exactPolicy())
		srv.Down()
		// Attempts at 0, 1, 3 and 7 s; the next wait (8 s) would end past
		// the deadline at 10 s, so the call returns at 7 s with UNAVAILABLE
		// rather than sleeping into DEADLINE_EXCEEDED.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		start := time.Now()
		err := get(ctx, c)
		if got := time.Since(start); got != 7*time.Second {
			t.Errorf("returned after %v, want 7s", got)
		}
		if status.Code(err) != codes.Unavailable {
			t.Errorf("code = %v, want the last real error, Unavailable (%v)", status.Code(err), err)
		}
		var e *grpcbackoff.Error
		if !errors.As(err, &e) || e.Reason != grpcbackoff.ReasonDeadline || e.Attempts != 4 {
			t.Errorf("error = %+v, want 4 attempts, Reason Deadline", e)
		}
	})
}

func TestRedisClientCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, c := newClient(t, exactPolicy())
		srv.Down()
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(2500*time.Millisecond, cancel)
		start := time.Now()
		err := get(ctx, c)
		if got := time.Since(start); got != 2500*time.Millisecond {
			t.Errorf("returned after %v, want 2.5s, at the cancel", got)
		}
		if status.Code(err) != codes.Canceled {
			t.Errorf("code = %v, want Canceled", status.Code(err))
		}
		if n := len(srv.AttemptsFor(redistest.MethodGetInstance)); n != 2 {
			t.Errorf("attempts = %d, want 2 (at 0 s and 1 s)", n)
		}
	})
}

func TestRedisClientServerRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, c := newClient(t, exactPolicy())
		srv.Down()
		time.AfterFunc(10*time.Second, srv.Up)
		start := time.Now()
		if err := get(t.Context(), c); err != nil {
			t.Fatalf("GetInstance = %v, want success once the server is back", err)
		}
		// Attempts at 0, 1, 3, 7, 15 s: the first after the server came back.
		if got := time.Since(start); got != 15*time.Second {
			t.Errorf("succeeded after %v, want 15s", got)
		}
	})
}

func TestRedisClientPerCallOptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, c := newClient(t, exactPolicy())
		srv.Down()
		err := get(t.Context(), c, gax.WithGRPCOptions(interceptor.NoRetry()))
		if n := len(srv.AttemptsFor(redistest.MethodGetInstance)); n != 1 || status.Code(err) != codes.Unavailable {
			t.Errorf("NoRetry: %d attempts, code %v; want 1 attempt, Unavailable", n, status.Code(err))
		}
		srv.ResetAttempts()
		get(t.Context(), c, gax.WithGRPCOptions(interceptor.CallMaxAttempts(3)))
		if n := len(srv.AttemptsFor(redistest.MethodGetInstance)); n != 3 {
			t.Errorf("CallMaxAttempts(3): %d attempts, want 3", n)
		}
	})
}

// TestCallOptionsWithoutInterceptor checks that our call options are
// harmless on a client that has no retry interceptor.
func TestCallOptionsWithoutInterceptor(t *testing.T) {
	srv := redistest.NewServer()
	defer srv.Close()
	c := srv.Client(t.Context())
	op, err := c.CreateInstance(t.Context(), &redispb.CreateInstanceRequest{
		Parent: parent, InstanceId: "cache",
		Instance: &redispb.Instance{Tier: redispb.Instance_BASIC, MemorySizeGb: 1},
	}, gax.WithGRPCOptions(interceptor.NoRetry(), interceptor.CallMaxAttempts(2), interceptor.CallPolicy(exactPolicy())))
	if err != nil {
		t.Fatalf("CreateInstance with our call options and no interceptor: %v", err)
	}
	if _, err := op.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestRedisClientTellsServerAboutRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, c := newClient(t, exactPolicy())
		srv.FailNext(redistest.MethodGetInstance, 2, codes.Unavailable)
		if err := get(t.Context(), c); err != nil {
			t.Fatal(err)
		}
		for i, a := range srv.AttemptsFor(redistest.MethodGetInstance) {
			got := strings.Join(a.Metadata.Get(interceptor.PreviousAttemptsKey), ",")
			want := []string{"", "1", "2"}[i]
			if got != want {
				t.Errorf("attempt %d: %s = %q, want %q", i+1, interceptor.PreviousAttemptsKey, got, want)
			}
		}
	})
}

// TestJitterIsUniformAndFresh makes many calls that fail once with the
// default policy (jitter on) and checks the first wait is 1 s + U[0, 1 s]:
// within bounds, not constant, with the mean and spread of a uniform draw.
func TestJitterIsUniformAndFresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, c := newClient(t, grpcbackoff.DefaultPolicy())
		const n = 400
		var xs []float64 // the jitter part of each wait, in seconds
		for range n {
			srv.ResetAttempts()
			srv.FailNext(redistest.MethodGetInstance, 1, codes.Unavailable)
			if err := get(t.Context(), c); err != nil {
				t.Fatal(err)
			}
			g := gaps(srv, redistest.MethodGetInstance)
			if len(g) != 1 || g[0] < time.Second || g[0] > 2*time.Second {
				t.Fatalf("wait = %v, want one in [1s, 2s]", g)
			}
			xs = append(xs, (g[0] - time.Second).Seconds())
		}
		var sum, sq float64
		distinct := map[float64]bool{}
		var bins [4]int
		for _, x := range xs {
			sum += x
			sq += x * x
			distinct[x] = true
			bins[min(int(x*4), 3)]++
		}
		mean := sum / n
		variance := sq/n - mean*mean
		// U[0,1]: mean 1/2 (sd of the mean 1/sqrt(12n) = 0.0144), variance 1/12.
		if math.Abs(mean-0.5) > 6/math.Sqrt(12*n) {
			t.Errorf("mean jitter = %.3fs, want 0.5s", mean)
		}
		if math.Abs(variance-1.0/12) > 0.025 {
			t.Errorf("jitter variance = %.4f, want 1/12 (0.0833)", variance)
		}
		if len(distinct) < n-5 {
			t.Errorf("%d distinct waits in %d calls: the jitter is not drawn afresh", len(distinct), n)
		}
		for i, b := range bins {
			if b < n/4-60 || b > n/4+60 {
				t.Errorf("quarter %d of the jitter range holds %d of %d waits, want about %d", i, b, n, n/4)
			}
		}
	})
}

func TestRedisClientHonoursPushback(t *testing.T) {
	cases := []struct {
		pushback string
		wantGaps []time.Duration
		wantCode codes.Code
	}{
		{"3000", bufconntest.Seconds(3), codes.OK},
		{"0", bufconntest.Seconds(1), codes.OK}, // a hint never shortens the policy's wait
		{"-1", nil, codes.Unavailable},
		{"soon", nil, codes.Unavailable},
		{"99999999999", nil, codes.Unavailable}, // longer than Max
	}
	for _, tc := range cases {
		t.Run(tc.pushback, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv, c := newClient(t, exactPolicy())
				srv.Inject(redistest.Fault{Method: redistest.MethodGetInstance, Code: codes.Unavailable, Count: 1, Pushback: tc.pushback})
				err := get(t.Context(), c)
				if status.Code(err) != tc.wantCode {
					t.Errorf("code = %v, want %v", status.Code(err), tc.wantCode)
				}
				if got := gaps(srv, redistest.MethodGetInstance); !slices.Equal(got, tc.wantGaps) {
					t.Errorf("gaps = %v, want %v", got, tc.wantGaps)
				}
				var e *grpcbackoff.Error
				if tc.wantGaps == nil && (!errors.As(err, &e) || e.Reason != grpcbackoff.ReasonServerRefused) {
					t.Errorf("err = %v, want a *grpcbackoff.Error with Reason ServerRefused", err)
				}
			})
		})
	}
}
