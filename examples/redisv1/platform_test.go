package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/gaxretry"
	"github.com/platformkit/grpcbackoff/interceptor"
)

// The platform set-up against Pub/Sub's in-process fake, whose GetTopic
// always answers UNAVAILABLE: the client's own retry is handed over to the
// interceptor, so the call makes exactly the Policy's attempts and ends with
// a *grpcbackoff.Error, well before its 3 s deadline.
func Example_platform() {
	fake := pstest.NewServer(pstest.WithErrorInjection("GetTopic", codes.Unavailable, "fake outage"))
	defer fake.Close()
	ctx := context.Background()

	p := grpcbackoff.DefaultPolicy()
	p.Initial, p.Max, p.MaxAttempts = 10*time.Millisecond, 50*time.Millisecond, 4 // quick, for the example
	retries := 0
	platform, err := gaxretry.ClientOptions(p, interceptor.WithOnRetry(func(interceptor.Retry) { retries++ }))
	if err != nil {
		panic(err)
	}
	endpoint := []option.ClientOption{option.WithEndpoint(fake.Addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials()))}
	rc, ps, err := clients(ctx, "my-project", platform, endpoint...)
	if err != nil {
		panic(err)
	}
	defer rc.Close()
	defer ps.Close()

	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = ps.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: "projects/my-project/topics/orders"})
	var ge *grpcbackoff.Error
	if errors.As(err, &ge) {
		fmt.Printf("GetTopic: %d attempts (%d retries), %s, last code %v\n", ge.Attempts, retries, ge.Reason, ge.GRPCStatus().Code())
	} else {
		fmt.Println("GetTopic:", err)
	}
	// Output:
	// GetTopic: 4 attempts (3 retries), attempts exhausted, last code Unavailable
}
