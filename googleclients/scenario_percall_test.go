package googleclients_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	redis "cloud.google.com/go/redis/apiv1"
	"cloud.google.com/go/redis/apiv1/redispb"
	secretmanager "cloud.google.com/go/secretmanager/apiv1"
	"cloud.google.com/go/secretmanager/apiv1/secretmanagerpb"
	gax "github.com/googleapis/gax-go/v2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/gaxretry"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// Issue 42: a per-call gax.WithRetry never makes two layers, with or
// without Adopt. The trial: Secret Manager's GetSecret given a per-call
// Retryer of 3 attempts on UNAVAILABLE, in an outage of the call's whole
// 2 s deadline, with the platform's options (8 attempts): 24 attempts on
// the wire (3 × 8), 10 after Adopt.

// perCallPolicy is the platform's Policy of the trial, 8 attempts, fast
// enough that they end by MaxAttempts within the 2 s deadline.
func perCallPolicy() grpcbackoff.Policy {
	p := grpcbackoff.DefaultPolicy()
	p.Initial, p.Max, p.Jitter = 20*time.Millisecond, 100*time.Millisecond, 0
	return p
}

// attemptsRetryer is the trial's per-call gax Retryer: max attempts in
// all, on code, 10 ms apart.
type attemptsRetryer struct {
	max, n int
	code   codes.Code
}

func (r *attemptsRetryer) Retry(err error) (time.Duration, bool) {
	r.n++
	if status.Code(err) != r.code || r.n >= r.max {
		return 0, false
	}
	return 10 * time.Millisecond, true
}

// perCallClient is a client of the trial and its call with per-call options.
type perCallClient struct {
	name string
	call func(ctx context.Context, opts []option.ClientOption, adopt bool, perCall gax.CallOption) (closer io.Closer, err error)
}

var perCallClients = []perCallClient{
	{"Secret Manager GetSecret", func(ctx context.Context, opts []option.ClientOption, adopt bool, perCall gax.CallOption) (io.Closer, error) {
		c, err := secretmanager.NewClient(ctx, opts...)
		if err != nil {
			return nil, err
		}
		if adopt {
			if err := gaxretry.Adopt(c.CallOptions); err != nil {
				return c, err
			}
		}
		_, err = c.GetSecret(ctx, &secretmanagerpb.GetSecretRequest{Name: "projects/p/secrets/s"}, perCall)
		return c, err
	}},
	{"Cloud Redis GetInstance", func(ctx context.Context, opts []option.ClientOption, adopt bool, perCall gax.CallOption) (io.Closer, error) {
		c, err := redis.NewCloudRedisClient(ctx, opts...)
		if err != nil {
			return nil, err
		}
		if adopt {
			if err := gaxretry.Adopt(c.CallOptions); err != nil {
				return c, err
			}
		}
		_, err = c.GetInstance(ctx, &redispb.GetInstanceRequest{Name: "projects/p/locations/l/instances/i"}, perCall)
		return c, err
	}},
}

// failingFake serves every method over a bufconn listener, failing each
// attempt with code, until the test ends.
func failingFake(t *testing.T, code codes.Code) (*bufconn.Listener, *atomic.Int32) {
	lis := bufconntest.Listen()
	var attempts atomic.Int32
	bufconntest.Serve(t, grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		attempts.Add(1)
		if err := ss.RecvMsg(new(emptypb.Empty)); err != nil {
			return err
		}
		return status.Error(code, "fake outage")
	})), lis)
	return lis, &attempts
}

// TestPerCallRetryOneLayer: with a per-call gax.WithRetry, in an outage of
// UNAVAILABLE (which that Retryer retries, and these clients' CallOptions
// do not) or of RESOURCE_EXHAUSTED (which it does not): adopted, the
// Retryer is seen, and what it retries is its alone, each of its attempts
// one on the wire (3); what it does not retry is the library's (8). Not
// adopted, the library cannot see it before its first resend: its retries
// across the client's attempts stay within MaxAttempts, at most the
// client's attempts + MaxAttempts − 1 on the wire (10), and every attempt
// of the client is sent.
func TestPerCallRetryOneLayer(t *testing.T) {
	p := perCallPolicy()
	for _, c := range perCallClients {
		for _, adopt := range []bool{false, true} {
			for _, code := range []codes.Code{codes.Unavailable, codes.ResourceExhausted} {
				t.Run(fmt.Sprintf("%s/adopt %v/%v", c.name, adopt, code), func(t *testing.T) {
					t.Parallel()
					synctest.Test(t, func(t *testing.T) {
						lis, wire := failingFake(t, code)
						own := newOwnAttempts()
						platform, err := gaxretry.ClientOptions(p)
						if err != nil {
							t.Fatal(err)
						}
						opts := append(append([]option.ClientOption{
							option.WithEndpoint("passthrough:///percall"),
							option.WithoutAuthentication(),
							option.WithTelemetryDisabled(),
							option.WithGRPCDialOption(grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) })),
							option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
						}, own.options()...), platform...)
						ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
						defer cancel()
						perCall := gax.WithRetry(func() gax.Retryer { return &attemptsRetryer{max: 3, code: codes.Unavailable} })
						closer, err := c.call(ctx, opts, adopt, perCall)
						if closer != nil {
							defer closer.Close()
						}
						l := layers{wire: int(wire.Load()), own: own.of("")}
						t.Logf("%v: err %v", l, err)
						if status.Code(err) != code {
							t.Errorf("err %v; want %v", err, code)
						}
						switch {
						case code == codes.ResourceExhausted:
							if l.own != 1 || l.wire != p.MaxAttempts {
								t.Errorf("%v; want MaxAttempts (%d) on the wire, 1 of the client: the per-call Retryer does not retry the code", l, p.MaxAttempts)
							}
						case adopt:
							if l.own != 3 || l.wire != 3 {
								t.Errorf("%v; want 3 and 3: the per-call Retryer's code is its alone", l)
							}
						default:
							if l.own != 3 || l.wire > l.own+p.MaxAttempts-1 {
								t.Errorf("%v; want the client's 3 attempts each sent, at most %d on the wire (not %d)", l, 3+p.MaxAttempts-1, 3*p.MaxAttempts)
							}
						}
					})
				})
			}
		}
	}
}
