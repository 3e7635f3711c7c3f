package gaxretry_test

import (
	"context"

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
	rc, err := redis.NewCloudRedisClient(ctx, opts...) // no retry of its own: nothing more
	if err != nil {
		return err
	}
	ps, err := pubsub.NewClient(ctx, project, opts...)
	if err != nil {
		return err
	}
	err = gaxretry.Adopt(ps.TopicAdminClient.CallOptions) // Pub/Sub's own retries, handed over
	_, _ = rc, ps
	return err
}
