package googleclients_test

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"cloud.google.com/go/redis/apiv1/redispb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/gaxretry"
	"github.com/platformkit/grpcbackoff/redistest"
)

// gaxretry.CallOption: a cloud.google.com/go client that sets its retries
// per method with gax CallOptions: here GetInstance gets a Policy, and
// CreateInstance, a mutation, keeps the client's default of no retry.
func Example_gaxretryCallOption() {
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

// gaxretry.ClientOptions: the platform's options for every client of a
// process, here a Cloud Redis client, which retries nothing by itself,
// against the in-process fake, whose GetInstance fails twice: the library
// retries it.
func Example_gaxretryClientOptions() {
	p := grpcbackoff.DefaultPolicy()
	p.Initial, p.Jitter = 10*time.Millisecond, 0 // fast, for the example
	opts, err := gaxretry.ClientOptions(p)
	if err != nil {
		panic(err)
	}

	srv := redistest.NewServer()
	defer srv.Close()
	ctx := context.Background()
	rc := srv.Client(ctx, opts...)
	op, err := rc.CreateInstance(ctx, &redispb.CreateInstanceRequest{Parent: "projects/p/locations/l", InstanceId: "cache",
		Instance: &redispb.Instance{Tier: redispb.Instance_BASIC, MemorySizeGb: 1}})
	if err != nil {
		panic(err)
	}
	inst, err := op.Wait(ctx)
	if err != nil {
		panic(err)
	}

	srv.FailNext(redistest.MethodGetInstance, 2, codes.Unavailable)
	inst, err = rc.GetInstance(ctx, &redispb.GetInstanceRequest{Name: inst.GetName()})
	fmt.Println(inst.GetName(), err)
	fmt.Println(len(srv.AttemptsFor(redistest.MethodGetInstance)), "attempts")
	// Output:
	// projects/p/locations/l/instances/cache <nil>
	// 3 attempts
}

// gaxretry.Adopt hands a generated client's retries over to the library,
// here those of Pub/Sub's two admin clients; the publisher and subscriber
// keep their own either way.
func Example_gaxretryAdopt() {
	srv := pstest.NewServer()
	defer srv.Close()
	opts, err := gaxretry.ClientOptions(grpcbackoff.DefaultPolicy())
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	ps, err := pubsub.NewClient(ctx, "proj", append(opts, fakeEndpoint(srv.Addr)...)...)
	if err != nil {
		panic(err)
	}
	defer ps.Close()
	if err := gaxretry.Adopt(ps.TopicAdminClient.CallOptions); err != nil {
		panic(err)
	}
	if err := gaxretry.Adopt(ps.SubscriptionAdminClient.CallOptions); err != nil {
		panic(err)
	}

	topic, err := ps.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/proj/topics/orders"})
	fmt.Println(topic.GetName(), err)
	// Output:
	// projects/proj/topics/orders <nil>
}
