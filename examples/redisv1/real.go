package main

import (
	"context"
	"fmt"
	"io"
	"path"
	"time"

	redis "cloud.google.com/go/redis/apiv1"
	"cloud.google.com/go/redis/apiv1/redispb"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/gaxretry"
	"github.com/platformkit/grpcbackoff/interceptor"
)

// realTimeout bounds the whole run against the real API. Creating an
// instance usually takes a few minutes, deleting it one or two.
const realTimeout = 30 * time.Minute

// runReal lists the instances of cfg.project in cfg.location through the
// real Cloud Redis API, with Application Default Credentials and
// DefaultPolicy; with cfg.create it also creates, reads and deletes an
// instance. Nothing is injected: retries happen only if the API asks for them.
func runReal(ctx context.Context, cfg config, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, realTimeout)
	defer cancel()
	p := grpcbackoff.DefaultPolicy()
	rep := newReporter(out)
	retrier, err := interceptor.New(p, interceptor.WithOnRetry(rep.onRetry))
	if err != nil {
		return err
	}
	// The platform set-up (see clients in platform.go), with a reporter.
	c, err := redis.NewCloudRedisClient(ctx, gaxretry.RetrierClientOptions(retrier)...)
	if err != nil {
		return fmt.Errorf("redisv1: creating the Cloud Redis client (are Application Default Credentials set up? gcloud auth application-default login): %w", err)
	}
	defer c.Close()
	start := time.Now()

	parent := "projects/" + cfg.project + "/locations/" + cfg.location
	fmt.Fprintln(out, "Cloud Redis v1 client (cloud.google.com/go/redis/apiv1) against the real API, with Application Default Credentials,")
	fmt.Fprintln(out, "with the platform options gaxretry.RetrierClientOptions(retrier).")
	fmt.Fprint(out, describe(p, 1))

	if err := listReal(ctx, c, parent, out); err != nil {
		return err
	}
	if cfg.create {
		if err := createReal(ctx, c, parent, cfg.instance, out); err != nil {
			return err
		}
	}
	t := rep.totals()
	fmt.Fprintf(out, "\nsummary: %d retries, %s spent waiting to retry, %d retries refused by the throttle, %s in all\n",
		t.retries, secs(t.waited), t.throttled, secs(time.Since(start)))
	return nil
}

func listReal(ctx context.Context, c *redis.CloudRedisClient, parent string, out io.Writer) error {
	fmt.Fprintf(out, "\nListInstances %s\n", parent)
	n := 0
	for inst, err := range c.ListInstances(ctx, &redispb.ListInstancesRequest{Parent: parent}).All() {
		if err != nil {
			return fmt.Errorf("redisv1: ListInstances %s: %w", parent, err)
		}
		n++
		fmt.Fprintf(out, "   %s  %s  %s %d GB  %s:%d\n",
			inst.GetName(), inst.GetState(), inst.GetTier(), inst.GetMemorySizeGb(), inst.GetHost(), inst.GetPort())
	}
	fmt.Fprintf(out, "   -> %d instances\n", n)
	return nil
}

// createReal creates a BASIC 1 GB instance, reads it and deletes it. If
// anything fails after the instance was created, it says so loudly: the
// instance is billed until someone deletes it.
func createReal(ctx context.Context, c *redis.CloudRedisClient, parent, id string, out io.Writer) (err error) {
	name := parent + "/instances/" + id
	fmt.Fprintf(out, "\nWARNING: -create makes a billable BASIC 1 GB instance %s; it is deleted at the end.\n", name)
	fmt.Fprintf(out, "CreateInstance %s (usually takes a few minutes)\n", id)
	op, err := c.CreateInstance(ctx, &redispb.CreateInstanceRequest{
		Parent:     parent,
		InstanceId: id,
		Instance:   &redispb.Instance{Tier: redispb.Instance_BASIC, MemorySizeGb: 1},
	})
	if err != nil {
		return fmt.Errorf("redisv1: CreateInstance %s: %w", name, err)
	}
	defer func() {
		if err != nil {
			fmt.Fprintf(out, "WARNING: %s may still exist and be billed; delete it with\n"+
				"   gcloud redis instances delete %s --region %s --project %s\n",
				name, id, path.Base(parent), projectOf(parent))
		}
	}()
	inst, err := op.Wait(ctx)
	if err != nil {
		return fmt.Errorf("redisv1: waiting for CreateInstance %s: %w", name, err)
	}
	fmt.Fprintf(out, "   -> created: %s %s %d GB at %s:%d\n", inst.GetState(), inst.GetTier(), inst.GetMemorySizeGb(), inst.GetHost(), inst.GetPort())

	fmt.Fprintf(out, "GetInstance %s\n", id)
	inst, err = c.GetInstance(ctx, &redispb.GetInstanceRequest{Name: name})
	if err != nil {
		return fmt.Errorf("redisv1: GetInstance %s: %w", name, err)
	}
	fmt.Fprintf(out, "   -> %s, redis %s\n", inst.GetState(), inst.GetRedisVersion())

	fmt.Fprintf(out, "DeleteInstance %s\n", id)
	dop, err := c.DeleteInstance(ctx, &redispb.DeleteInstanceRequest{Name: name})
	if err != nil {
		return fmt.Errorf("redisv1: DeleteInstance %s: %w", name, err)
	}
	if err := dop.Wait(ctx); err != nil {
		return fmt.Errorf("redisv1: waiting for DeleteInstance %s: %w", name, err)
	}
	fmt.Fprintln(out, "   -> deleted")
	return nil
}

// projectOf returns p in "projects/p/locations/l".
func projectOf(parent string) string { return path.Base(path.Dir(path.Dir(parent))) }
