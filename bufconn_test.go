package grpcbackoff_test

// End to end over bufconn: the Memorystore recipe carried out by
// interceptor.DialOptions, the common set-up, against a scripted server
// answering Cloud Redis's GetInstance (google.cloud.redis.v1.CloudRedis, its
// real method name and messages on the wire, from the project's own subset
// of the API in internal/cloudredis; the server is bufconntest's) inside a
// synctest bubble, so every delay is exact and free and a goroutine left
// behind fails the test.
//
// The full fake, with the real Cloud Redis client, is the redistest module's;
// the Cloud Redis client would add google.golang.org/genproto to what every
// module importing the library downloads.

import (
	"context"
	"errors"
	"io"
	"math"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
	"github.com/platformkit/grpcbackoff/internal/cloudredis"
)

// redisInstance is the instance GetInstance answers with.
var redisInstance = &cloudredis.Instance{Name: instance, Host: "10.0.0.3", Port: 6379,
	State: cloudredis.Instance_READY, Tier: cloudredis.Instance_BASIC, MemorySizeGb: 1}

const instance = "projects/p/locations/us-central1/instances/cache"

// failing is a Script whose first failures attempts fail with code, with a
// RetryInfo of retryDelay when it is set, and whose later attempts succeed:
// GetInstance with redisInstance, a server stream with one response.
func failing(failures int, code codes.Code, retryDelay time.Duration) bufconntest.Script {
	st := status.New(code, "scripted failure")
	if retryDelay > 0 {
		st, _ = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retryDelay)})
	}
	fail, ok := bufconntest.Fail(st.Err()), bufconntest.Step{Recv: bufconntest.UntilHalfClose, Send: 1, Reply: redisInstance}
	return func(_ string, n int) bufconntest.Step {
		if n < failures {
			return fail
		}
		return ok
	}
}

// down is a Script whose every attempt fails with UNAVAILABLE.
func down() bufconntest.Script { return failing(math.MaxInt, codes.Unavailable, 0) }

// gaps returns the times between the attempts srv saw.
func gaps(srv *bufconntest.Server) []time.Duration {
	var at []time.Time
	for _, a := range srv.All() {
		at = append(at, a.At)
	}
	return bufconntest.Gaps(at)
}

// recipe is DefaultPolicy without jitter, so that every delay is exact.
func recipe() grpcbackoff.Policy {
	p := grpcbackoff.DefaultPolicy()
	p.Jitter = 0
	return p
}

// newRedis serves, over bufconn, a server whose attempts follow script
// (bufconntest's, which serves Cloud Redis's GetInstance too), and returns
// it with a connection set up as the README says, closed when the test
// ends.
func newRedis(t *testing.T, p grpcbackoff.Policy, script bufconntest.Script) (*bufconntest.Server, *grpc.ClientConn) {
	t.Helper()
	srv := bufconntest.NewServer(t, script)
	return srv, srv.Conn(t, interceptor.DialOptions(p)...)
}

// getInstance is the call the tests make.
func getInstance(ctx context.Context, cc *grpc.ClientConn) error {
	inst, err := cloudredis.NewCloudRedisClient(cc).GetInstance(ctx, &cloudredis.GetInstanceRequest{Name: instance})
	if err == nil && inst.GetHost() != "10.0.0.3" {
		return errors.New("GetInstance answered an instance without its host")
	}
	return err
}

func TestRecipeOverBufconn(t *testing.T) {
	cases := []struct {
		name       string
		failures   int
		code       codes.Code
		retryDelay time.Duration
		wantCode   codes.Code
		wantGaps   []time.Duration
	}{
		{"no failure", 0, codes.Unavailable, 0, codes.OK, nil},
		{"three UNAVAILABLE", 3, codes.Unavailable, 0, codes.OK, bufconntest.Seconds(1, 2, 4)},
		{"RESOURCE_EXHAUSTED", 2, codes.ResourceExhausted, 0, codes.OK, bufconntest.Seconds(1, 2)},
		{"seven: the cap, then at the cap", 7, codes.Unavailable, 0, codes.OK, bufconntest.Seconds(1, 2, 4, 8, 16, 32, 32)},
		{"NOT_FOUND is not retried", 1, codes.NotFound, 0, codes.NotFound, nil},
		{"INTERNAL is not retried", 1, codes.Internal, 0, codes.Internal, nil},
		{"RetryInfo longer than the backoff is waited for", 2, codes.ResourceExhausted, 5 * time.Second, codes.OK, bufconntest.Seconds(5, 5)},
		{"RetryInfo shorter than the backoff is not", 2, codes.ResourceExhausted, 300 * time.Millisecond, codes.OK, bufconntest.Seconds(1, 2)},
		{"RetryInfo past MaxHintDelay ends the retries", 1, codes.Unavailable, time.Hour, codes.Unavailable, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv, cc := newRedis(t, recipe(), failing(tc.failures, tc.code, tc.retryDelay))
				err := getInstance(t.Context(), cc)
				if status.Code(err) != tc.wantCode {
					t.Errorf("GetInstance: code %v (%v), want %v", status.Code(err), err, tc.wantCode)
				}
				if got := gaps(srv); !slices.Equal(got, tc.wantGaps) {
					t.Errorf("gaps between attempts = %v, want %v", got, tc.wantGaps)
				}
			})
		})
	}
}

func TestRecipeGivesUpAfterMaxAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, cc := newRedis(t, recipe(), down())
		start := time.Now()
		err := getInstance(t.Context(), cc)
		// 1+2+4+8+16+32+32 s between 8 attempts.
		if got := time.Since(start); got != 95*time.Second {
			t.Errorf("gave up after %v, want 95s", got)
		}
		var e *grpcbackoff.Error
		if !errors.As(err, &e) || e.Attempts != 8 || e.Reason != grpcbackoff.ReasonExhausted || status.Code(err) != codes.Unavailable {
			t.Errorf("GetInstance = %v, want UNAVAILABLE after 8 attempts, exhausted", err)
		}
	})
}

func TestRecipeNeverSleepsPastTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, cc := newRedis(t, recipe(), down())
		// Attempts at 0, 1, 3 and 7 s; the next wait (8 s) would end past
		// the deadline, so the call returns at 7 s with the last real error.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		start := time.Now()
		err := getInstance(ctx, cc)
		var e *grpcbackoff.Error
		if got := time.Since(start); got != 7*time.Second {
			t.Errorf("returned after %v, want 7s", got)
		}
		if !errors.As(err, &e) || e.Attempts != 4 || e.Reason != grpcbackoff.ReasonDeadline || status.Code(err) != codes.Unavailable {
			t.Errorf("GetInstance = %v, want UNAVAILABLE after 4 attempts, Reason Deadline", err)
		}
	})
}

func TestRecipeCancelEndsTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, cc := newRedis(t, recipe(), down())
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(2500*time.Millisecond, cancel)
		start := time.Now()
		err := getInstance(ctx, cc)
		if got := time.Since(start); got != 2500*time.Millisecond || status.Code(err) != codes.Canceled {
			t.Errorf("GetInstance = %v after %v, want CANCELED at 2.5s", err, got)
		}
	})
}

func TestRecipeRetriesServerStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, cc := newRedis(t, recipe(), failing(2, codes.Unavailable, 0))
		// StreamingOutputCall changes nothing, but says so nowhere: stated,
		// or it would be treated as a write (interceptor.Safety).
		s, err := testgrpc.NewTestServiceClient(cc).StreamingOutputCall(t.Context(), &testgrpc.StreamingOutputCallRequest{}, interceptor.CallIdempotent())
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			_, err = s.Recv()
			if err != nil {
				break
			}
			n++
		}
		if err != io.EOF || n != 1 {
			t.Errorf("stream ended with %v after %d messages, want io.EOF after 1", err, n)
		}
		if got, want := gaps(srv), bufconntest.Seconds(1, 2); !slices.Equal(got, want) {
			t.Errorf("gaps between attempts = %v, want %v", got, want)
		}
	})
}
