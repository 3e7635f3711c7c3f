package main

import (
	"context"
	"fmt"

	"cloud.google.com/go/pubsub/v2"
	redis "cloud.google.com/go/redis/apiv1"
	"google.golang.org/api/option"

	"github.com/platformkit/grpcbackoff/gaxretry"
)

// clients builds two clients from one slice of platform options, made by
// gaxretry.ClientOptions for every Google Cloud gRPC client of a service
// (extra is for the endpoint and credentials). One Retrier serves both, with
// a retry budget per backend, and methods known not to be idempotent are not
// retried after a failure that may have been applied. Cloud Redis, which has
// no retry of its own, needs nothing more; Pub/Sub retries by itself, so its
// retries are handed over to the interceptor with gaxretry.Adopt, or each of
// its attempts would make ours.
func clients(ctx context.Context, project string, platform []option.ClientOption, extra ...option.ClientOption) (*redis.CloudRedisClient, *pubsub.Client, error) {
	opts := append(append([]option.ClientOption(nil), platform...), extra...)
	rc, err := redis.NewCloudRedisClient(ctx, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("redisv1: Cloud Redis client: %w", err)
	}
	ps, err := pubsub.NewClient(ctx, project, opts...)
	if err != nil {
		rc.Close()
		return nil, nil, fmt.Errorf("redisv1: Pub/Sub client: %w", err)
	}
	for _, co := range []any{ps.TopicAdminClient.CallOptions, ps.SubscriptionAdminClient.CallOptions} {
		if err := gaxretry.Adopt(co); err != nil {
			rc.Close()
			ps.Close()
			return nil, nil, err
		}
	}
	return rc, ps, nil
}
