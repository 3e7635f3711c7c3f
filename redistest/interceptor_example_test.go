package redistest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	redis "cloud.google.com/go/redis/apiv1"
	"cloud.google.com/go/redis/apiv1/redispb"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/redistest"
)

// fastPolicy is the Memorystore recipe at 1/100 time scale, without jitter,
// so that the examples run fast and print the same every time.
func fastPolicy() grpcbackoff.Policy {
	p := grpcbackoff.DefaultPolicy()
	p.Initial, p.Max, p.Jitter = 10*time.Millisecond, 320*time.Millisecond, 0
	return p
}

// The standard dial option for a Cloud Redis client: its calls are retried
// with the Memorystore recipe. Here the client talks to the in-process fake,
// which fails the first two GetInstance calls.
func Example_unaryInterceptor() {
	srv := redistest.NewServer()
	defer srv.Close()
	ctx := context.Background()

	c, err := redis.NewCloudRedisClient(ctx, append(srv.ClientOptions(),
		option.WithGRPCDialOption(grpc.WithUnaryInterceptor(interceptor.Unary(fastPolicy()))))...)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	op, err := c.CreateInstance(ctx, &redispb.CreateInstanceRequest{
		Parent: "projects/p/locations/us-central1", InstanceId: "cache",
		Instance: &redispb.Instance{Tier: redispb.Instance_BASIC, MemorySizeGb: 1},
	})
	if err != nil {
		panic(err)
	}
	inst, err := op.Wait(ctx)
	if err != nil {
		panic(err)
	}

	srv.FailNext(redistest.MethodGetInstance, 2, codes.Unavailable)
	got, err := c.GetInstance(ctx, &redispb.GetInstanceRequest{Name: inst.GetName()})
	fmt.Println(got.GetState(), err)
	fmt.Println("attempts the server saw:", len(srv.AttemptsFor(redistest.MethodGetInstance)))
	// Output:
	// READY <nil>
	// attempts the server saw: 3
}

// The error after retries keeps the server's code and says how many
// attempts were made, and why retrying stopped.
func Example_gaveUp() {
	srv := redistest.NewServer()
	defer srv.Close()
	p := fastPolicy()
	p.MaxAttempts = 3
	client := redispb.NewCloudRedisClient(srv.Conn(interceptor.DialOptions(p)...))

	srv.Down()
	_, err := client.GetInstance(context.Background(), &redispb.GetInstanceRequest{Name: "projects/p/locations/l/instances/x"})
	fmt.Println(status.Code(err))
	var e *grpcbackoff.Error
	if errors.As(err, &e) {
		fmt.Println(e.Attempts, e.Reason)
	}
	// Output:
	// Unavailable
	// 3 attempts exhausted
}

// New returns configuration errors instead of panicking, for policies read
// at run time; every bad field is named with its value.
func Example_retrier() {
	p := grpcbackoff.DefaultPolicy()
	p.Max = 500 * time.Millisecond
	_, err := interceptor.New(p, interceptor.WithBufferLimit(-1))
	fmt.Println(err)
	// Output:
	// grpcbackoff: Max (500ms) is less than Initial (1s)
	// interceptor: opts[0]: WithBufferLimit(-1): the limit must not be negative
}

// Per-method policies, and a mutation that is never retried.
func Example_withMethod() {
	srv := redistest.NewServer()
	defer srv.Close()
	reads := fastPolicy()
	reads.MaxAttempts = 4
	r, err := interceptor.New(fastPolicy(),
		interceptor.WithMethod("/google.cloud.redis.v1.CloudRedis/", reads),
		interceptor.WithoutRetryFor(redistest.MethodFailoverInstance))
	if err != nil {
		panic(err)
	}
	client := redispb.NewCloudRedisClient(srv.Conn(r.DialOptions()...))
	ctx := context.Background()

	srv.Down()
	client.GetInstance(ctx, &redispb.GetInstanceRequest{Name: "projects/p/locations/l/instances/x"})
	client.FailoverInstance(ctx, &redispb.FailoverInstanceRequest{Name: "projects/p/locations/l/instances/x"})
	fmt.Println("GetInstance attempts:", len(srv.AttemptsFor(redistest.MethodGetInstance)))
	fmt.Println("FailoverInstance attempts:", len(srv.AttemptsFor(redistest.MethodFailoverInstance)))
	// Output:
	// GetInstance attempts: 4
	// FailoverInstance attempts: 1
}

// One call can opt out of retrying; with a cloud.google.com/go client, call
// options go through gax.WithGRPCOptions.
func Example_noRetry() {
	srv := redistest.NewServer()
	defer srv.Close()
	ctx := context.Background()
	c, err := redis.NewCloudRedisClient(ctx, append(srv.ClientOptions(),
		option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(interceptor.Unary(fastPolicy()))))...)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	srv.Down()
	_, err = c.GetInstance(ctx, &redispb.GetInstanceRequest{Name: "projects/p/locations/l/instances/x"},
		gax.WithGRPCOptions(interceptor.NoRetry()))
	fmt.Println(status.Code(err), len(srv.Attempts()))
	// Output:
	// Unavailable 1
}
