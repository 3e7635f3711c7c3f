package redistest_test

import (
	"context"
	"fmt"
	"path"

	"cloud.google.com/go/redis/apiv1/redispb"
	"github.com/platformkit/grpcbackoff/redistest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func Example() {
	srv := redistest.NewServer()
	defer srv.Close()
	ctx := context.Background()
	client := srv.Client(ctx) // a real cloud.google.com/go/redis/apiv1 client

	op, err := client.CreateInstance(ctx, &redispb.CreateInstanceRequest{
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
	fmt.Println(inst.GetName(), inst.GetState(), inst.GetPort())

	// The next GetInstance fails once, then the fake answers normally.
	srv.FailNext(redistest.MethodGetInstance, 1, codes.Unavailable)
	for range 2 {
		_, err := client.GetInstance(ctx, &redispb.GetInstanceRequest{Name: inst.GetName()})
		fmt.Println("GetInstance:", status.Code(err))
	}

	for _, a := range srv.Attempts() {
		fmt.Println(path.Base(a.Method), a.Code)
	}
	// Output:
	// projects/my-project/locations/us-central1/instances/cache READY 6379
	// GetInstance: Unavailable
	// GetInstance: OK
	// CreateInstance OK
	// GetInstance Unavailable
	// GetInstance OK
}
