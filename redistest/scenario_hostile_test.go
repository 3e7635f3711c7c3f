package redistest_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/platformkit/grpcbackoff/internal/bufconntest"

	"cloud.google.com/go/redis/apiv1/redispb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/redistest"
)

const year = 365 * 24 * time.Hour

// hostilePolicy waits exactly 1, 2, 4 and 8 s between five attempts, 15 s in
// all, well within the 30 s deadline of the hostile calls.
func hostilePolicy() grpcbackoff.Policy {
	p := grpcbackoff.DefaultPolicy()
	p.Max, p.Jitter, p.MaxAttempts = 8*time.Second, 0, 5
	return p
}

// exhaustedGaps are the gaps of a call that uses all five attempts.
var exhaustedGaps = bufconntest.Seconds(1, 2, 4, 8)

func sum(ds []time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t
}

// TestHostileRedisClient puts the hostile hints in front of the real Cloud
// Redis client, with the interceptor installed as the README says, and the
// default retry throttle.
func TestHostileRedisClient(t *testing.T) {
	cases := []struct {
		name   string
		fault  redistest.Fault
		gaps   []time.Duration
		reason grpcbackoff.Reason
	}{
		{"RetryInfo 100 years", redistest.Fault{RetryDelay: 100 * year}, nil, grpcbackoff.ReasonServerRefused},
		{"RetryInfo −1 s", redistest.Fault{RetryDelay: -time.Second, RetryDelaySet: true}, exhaustedGaps, grpcbackoff.ReasonExhausted},
		{"RetryInfo 0 s", redistest.Fault{RetryDelaySet: true}, exhaustedGaps, grpcbackoff.ReasonExhausted},
		{"RetryInfo = Max", redistest.Fault{RetryDelay: 8 * time.Second}, bufconntest.Seconds(8, 8, 8), grpcbackoff.ReasonDeadline},
		{"pushback 0 forever", redistest.Fault{Pushback: "0"}, exhaustedGaps, grpcbackoff.ReasonExhausted},
		{"pushback −1", redistest.Fault{Pushback: "-1"}, nil, grpcbackoff.ReasonServerRefused},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := redistest.NewServer()
				t.Cleanup(srv.Close)
				c := srv.Client(t.Context(), option.WithGRPCDialOption(grpc.WithUnaryInterceptor(interceptor.Unary(hostilePolicy()))))
				f := tc.fault
				f.Method, f.Code, f.Count = redistest.MethodGetInstance, codes.Unavailable, 1000
				if err := srv.Inject(f); err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()
				start := time.Now()
				_, err := c.GetInstance(ctx, &redispb.GetInstanceRequest{Name: "projects/p/locations/l/instances/i"})
				if got, want := time.Since(start), sum(tc.gaps); got != want {
					t.Errorf("GetInstance returned after %v, want %v", got, want)
				}
				as := srv.AttemptsFor(redistest.MethodGetInstance)
				var g []time.Duration
				for i := 1; i < len(as); i++ {
					g = append(g, as[i].Time.Sub(as[i-1].Time))
				}
				if !slices.Equal(g, tc.gaps) {
					t.Errorf("gaps between attempts = %v, want %v", g, tc.gaps)
				}
				var e *grpcbackoff.Error
				if !errors.As(err, &e) || e.Attempts != len(as) || e.Reason != tc.reason || status.Code(err) != codes.Unavailable {
					t.Errorf("GetInstance = %v, want UNAVAILABLE after %d attempts, %v", err, len(as), tc.reason)
				}
			})
		})
	}
}
