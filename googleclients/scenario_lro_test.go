package googleclients_test

import (
	"testing"
	"time"

	redis "cloud.google.com/go/redis/apiv1"
	"cloud.google.com/go/redis/apiv1/redispb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff/internal/bufconntest"
	"github.com/platformkit/grpcbackoff/redistest"
)

// redisFake is redistest behind a bufconntest.Proxy on loopback TCP, and a Cloud
// Redis client of it with the platform's options.
func redisFake(t *testing.T, platform []option.ClientOption) (*redis.CloudRedisClient, *bufconntest.Proxy) {
	t.Helper()
	srv := redistest.NewServer()
	t.Cleanup(srv.Close)
	proxy := bufconntest.NewProxy(t, "redistest", grpc.WithContextDialer(srv.Dialer()))
	c, err := redis.NewCloudRedisClient(t.Context(), with(platform, proxy.Addr)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, proxy
}

// TestRedisOperationWait: the Cloud Redis client's main write path, a
// CreateInstance whose operation is then waited for, op.Wait, with
// GetOperation in a 1.5 s outage. op.Wait polls through the client's own
// long-running-operations client, which retries GetOperation by itself:
// with the standard options it stays the only layer (before issue 21, 24–32
// attempts for 4–5 alone in a 3 s outage), and the instance is created.
func TestRedisOperationWait(t *testing.T) {
	t.Parallel()
	run := func(platform []option.ClientOption) int {
		c, proxy := redisFake(t, platform)
		op, err := c.CreateInstance(t.Context(), &redispb.CreateInstanceRequest{Parent: parent, InstanceId: "cache",
			Instance: &redispb.Instance{Tier: redispb.Instance_BASIC, MemorySizeGb: 1}})
		if err != nil {
			t.Fatal(err)
		}
		proxy.FailWith(unavailableFor("/GetOperation", 1500*time.Millisecond))
		// Waiting on an operation by name, as a process that resumes it
		// does, polls it at least once.
		inst, err := c.CreateInstanceOperation(op.Name()).Wait(t.Context())
		if err != nil || inst.GetName() != parent+"/instances/cache" {
			t.Fatalf("Wait: %v, %v", inst, err)
		}
		return proxy.Attempts("/GetOperation")
	}
	alone := run(nil)
	platform, r := counted(t)
	n := run(platform)
	checkClientOnly(t, "GetOperation in a 1.5 s outage", "/GetOperation", r, alone, n)
}

// TestRedisGetInstance: the Cloud Redis client retries nothing by itself;
// with the standard options the library does. GetInstance in a 1 s outage
// fails at once alone, and succeeds with the standard options.
func TestRedisGetInstance(t *testing.T) {
	t.Parallel()
	run := func(platform []option.ClientOption) (int, error) {
		c, proxy := redisFake(t, platform)
		name := createInstance(t, c, "cache")
		proxy.FailWith(unavailableFor("/GetInstance", 500*time.Millisecond))
		_, err := c.GetInstance(t.Context(), &redispb.GetInstanceRequest{Name: name})
		return proxy.Attempts("/GetInstance"), err
	}
	if n, err := run(nil); n != 1 || status.Code(err) != codes.Unavailable {
		t.Errorf("alone: %d attempts, err %v; want 1 and UNAVAILABLE", n, err)
	}
	if n, err := run(standard(t)); n < 2 || n > quick().MaxAttempts || err != nil {
		t.Errorf("standard options: %d attempts, err %v; want 2 to %d and success", n, err, quick().MaxAttempts)
	}
}
