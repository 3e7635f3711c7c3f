package googleclients_test

import (
	"context"
	"errors"

	"cloud.google.com/go/pubsub/v2"
	redis "cloud.google.com/go/redis/apiv1"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/gaxretry"
)

// The README's snippet for every Google Cloud client, compiled; the root
// package's TestReadmeSnippetsCompile checks that it stands here.
var _ = readmeEveryClient

func readmeEveryClient(ctx context.Context, project string) error {
	opts, err := gaxretry.ClientOptions(grpcbackoff.DefaultPolicy())
	if err != nil {
		return err
	}
	rc, err := redis.NewCloudRedisClient(ctx, opts...)
	if err != nil {
		return err
	}
	ps, err := pubsub.NewClient(ctx, project, opts...)
	if err != nil {
		return err
	}
	err = errors.Join(gaxretry.Adopt(ps.TopicAdminClient.CallOptions), // optional: our Policy, budget
		gaxretry.Adopt(ps.SubscriptionAdminClient.CallOptions)) // and metrics for the admin calls
	_, _ = rc, ps
	return err
}
