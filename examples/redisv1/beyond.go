package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	redis "cloud.google.com/go/redis/apiv1"
	"cloud.google.com/go/redis/apiv1/redispb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/gaxretry"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/redistest"
)

// beyond tells two things past the recipe, each against fresh fakes: a read
// hedged against a slow server, and the platform set-up that gives one slice
// of options to every Google Cloud client, here Cloud Redis and Pub/Sub.
func beyond(ctx context.Context, p grpcbackoff.Policy, scale float64, out io.Writer) error {
	fmt.Fprintln(out, "\nBeyond the recipe:")
	if err := hedgedRead(ctx, p, scale, out); err != nil {
		return err
	}
	return platformSetUp(ctx, p, out)
}

// hedgedRead reads an instance through a client that hedges GetInstance,
// while the server is slow to answer the first attempt.
func hedgedRead(ctx context.Context, p grpcbackoff.Policy, scale float64, out io.Writer) error {
	delay, slow := scaled(500*time.Millisecond, scale), scaled(5*time.Second, scale)
	fmt.Fprintf(out, "\na. GetInstance through a client that hedges it after %s (interceptor.WithHedging), while the server\n"+
		"   takes %s to answer the first attempt.\n", secs(delay), secs(slow))
	srv := redistest.NewServer()
	defer srv.Close()
	r, err := interceptor.New(p, interceptor.WithHedging(redistest.MethodGetInstance, grpcbackoff.Hedging{MaxAttempts: 2, Delay: delay}))
	if err != nil {
		return err
	}
	c, err := redis.NewCloudRedisClient(ctx, append(srv.ClientOptions(), gaxretry.RetrierClientOptions(r)...)...)
	if err != nil {
		return fmt.Errorf("redisv1: hedged client: %w", err)
	}
	defer c.Close()
	op, err := c.CreateInstance(ctx, &redispb.CreateInstanceRequest{Parent: parent, InstanceId: "cache-h",
		Instance: &redispb.Instance{Tier: redispb.Instance_BASIC, MemorySizeGb: 1}})
	if err == nil {
		_, err = op.Wait(ctx)
	}
	if err != nil {
		return fmt.Errorf("redisv1: hedged read: creating the instance: %w", err)
	}

	srv.SetLatency(slow) // for the first attempt only: set back once it arrived
	arrived := make(chan struct{})
	go func() {
		defer close(arrived)
		for len(srv.AttemptsFor(redistest.MethodGetInstance)) == 0 && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		srv.SetLatency(0)
	}()
	defer func() { <-arrived }()
	start := time.Now()
	inst, err := c.GetInstance(ctx, &redispb.GetInstanceRequest{Name: parent + "/instances/cache-h"})
	if err != nil {
		return fmt.Errorf("redisv1: hedged read: %w", err)
	}
	took := time.Since(start)
	as := srv.AttemptsFor(redistest.MethodGetInstance)
	if len(as) != 2 {
		return fmt.Errorf("redisv1: hedged read: the server saw %d attempts, want 2", len(as))
	}
	fmt.Fprintf(out, "   -> got %s (%s) after %s, from the hedge; the slow first attempt was canceled.\n"+
		"      The server saw 2 attempts, the hedge with %s %q\n",
		path.Base(inst.GetName()), inst.GetState(), secs(took), interceptor.PreviousAttemptsKey,
		strings.Join(as[1].Metadata.Get(interceptor.PreviousAttemptsKey), ","))
	return nil
}

// platformSetUp gives one slice of options, from gaxretry.ClientOptions, to a
// Cloud Redis client and a Pub/Sub client (see clients), against Pub/Sub's
// in-process fake whose GetTopic always answers UNAVAILABLE.
func platformSetUp(ctx context.Context, p grpcbackoff.Policy, out io.Writer) error {
	p.MaxAttempts = 4
	fmt.Fprintf(out, "\nb. One slice of options for every Google Cloud client: gaxretry.ClientOptions, given to a Cloud Redis\n"+
		"   and a Pub/Sub client; gaxretry.Adopt hands Pub/Sub's own retry over to the interceptor. Pub/Sub's\n"+
		"   GetTopic always answers UNAVAILABLE, under a %d-attempt policy.\n", p.MaxAttempts)
	fake := pstest.NewServer(pstest.WithErrorInjection("GetTopic", codes.Unavailable, "fake outage"))
	defer fake.Close()
	platform, err := gaxretry.ClientOptions(p)
	if err != nil {
		return err
	}
	endpoint := []option.ClientOption{option.WithEndpoint(fake.Addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials()))}
	rc, ps, err := clients(ctx, project, platform, endpoint...)
	if err != nil {
		return err
	}
	defer rc.Close()
	defer ps.Close()
	start := time.Now()
	_, err = ps.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: "projects/" + project + "/topics/orders"})
	var ge *grpcbackoff.Error
	if !errors.As(err, &ge) {
		return fmt.Errorf("redisv1: GetTopic = %v, want a *grpcbackoff.Error", err)
	}
	fmt.Fprintf(out, "   -> GetTopic: %d attempts over %s, %q, code %v: the Policy's attempts, not the client's\n"+
		"      retries times ours\n", ge.Attempts, secs(time.Since(start)), ge.Reason.String(), codeName(ge.GRPCStatus().Code()))
	return nil
}
