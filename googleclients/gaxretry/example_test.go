package gaxretry_test

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/redis/apiv1/redispb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/gaxretry"
	"github.com/platformkit/grpcbackoff/redistest"
)

// A cloud.google.com/go client that sets its retries per method with gax
// CallOptions: here GetInstance gets a Policy, and CreateInstance, a
// mutation, keeps the client's default of no retry.
func ExampleCallOption() {
	srv := redistest.NewServer()
	defer srv.Close()
	ctx := context.Background()
	c := srv.Client(ctx) // a real cloud.google.com/go/redis/apiv1 client

	p := grpcbackoff.DefaultPolicy()
	p.Initial = time.Millisecond // small delays, for the example
	p.Jitter = time.Millisecond
	p.MaxAttempts = 4
	co, err := gaxretry.CallOption(p)
	if err != nil {
		panic(err)
	}
	// Appended to the defaults, which set the method's timeout.
	c.CallOptions.GetInstance = append(c.CallOptions.GetInstance, co)

	op, err := c.CreateInstance(ctx, &redispb.CreateInstanceRequest{
		Parent:     "projects/my-project/locations/us-central1",
		InstanceId: "cache",
		Instance:   &redispb.Instance{Tier: redispb.Instance_BASIC, MemorySizeGb: 1},
	})
	if err != nil {
		panic(err)
	}
	inst, err := op.Wait(ctx)
	if err != nil {
		panic(err)
	}

	srv.FailNext(redistest.MethodGetInstance, 2, codes.Unavailable)
	_, err = c.GetInstance(ctx, &redispb.GetInstanceRequest{Name: inst.GetName()})
	fmt.Println("GetInstance:", status.Code(err), "after", len(srv.AttemptsFor(redistest.MethodGetInstance)), "attempts")

	srv.FailNext(redistest.MethodCreateInstance, 1, codes.Unavailable)
	_, err = c.CreateInstance(ctx, &redispb.CreateInstanceRequest{
		Parent:     "projects/my-project/locations/us-central1",
		InstanceId: "other",
		Instance:   &redispb.Instance{Tier: redispb.Instance_BASIC, MemorySizeGb: 1},
	})
	fmt.Println("CreateInstance:", status.Code(err), "after", len(srv.AttemptsFor(redistest.MethodCreateInstance))-1, "attempt")
	// Output:
	// GetInstance: OK after 3 attempts
	// CreateInstance: Unavailable after 1 attempt
}
