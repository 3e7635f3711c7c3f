package redistest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	redis "cloud.google.com/go/redis/apiv1"
	"cloud.google.com/go/redis/apiv1/redispb"
	"go.uber.org/goleak"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
)

const parent = "projects/p1/locations/us-central1"

func newTestServer(t *testing.T) *Server {
	t.Helper()
	s := NewServer()
	t.Cleanup(s.Close)
	return s
}

func basic(gb int32) *redispb.Instance {
	return &redispb.Instance{Tier: redispb.Instance_BASIC, MemorySizeGb: gb}
}

// create makes an instance through the real client and waits for it.
func create(t *testing.T, c *redis.CloudRedisClient, parent, id string) *redispb.Instance {
	t.Helper()
	ctx := t.Context()
	op, err := c.CreateInstance(ctx, &redispb.CreateInstanceRequest{Parent: parent, InstanceId: id, Instance: basic(1)})
	if err != nil {
		t.Fatalf("CreateInstance(%s): %v", id, err)
	}
	in, err := op.Wait(ctx)
	if err != nil {
		t.Fatalf("CreateInstance(%s).Wait: %v", id, err)
	}
	return in
}

func TestLifecycleRealClient(t *testing.T) {
	s := newTestServer(t)
	ctx := t.Context()
	c := s.Client(ctx)

	op, err := c.CreateInstance(ctx, &redispb.CreateInstanceRequest{
		Parent: parent, InstanceId: "cache-1",
		Instance: &redispb.Instance{Tier: redispb.Instance_STANDARD_HA, MemorySizeGb: 5, DisplayName: "one"},
	})
	if err != nil {
		t.Fatalf("CreateInstance: %v", err)
	}
	if !op.Done() {
		t.Fatal("CreateInstance operation not done")
	}
	created, err := op.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	md, err := op.Metadata()
	if err != nil || md.GetVerb() != "create" || md.GetTarget() != parent+"/instances/cache-1" {
		t.Errorf("Metadata() = %v, %v; want verb create, target the instance", md, err)
	}
	want := parent + "/instances/cache-1"
	if created.GetName() != want || created.GetState() != redispb.Instance_READY || created.GetPort() != 6379 ||
		!strings.HasPrefix(created.GetHost(), "10.") || created.GetLocationId() != "us-central1-a" ||
		created.GetCreateTime() == nil || created.GetReplicaCount() != 1 {
		t.Errorf("created instance = %v", created)
	}

	// Polling a fresh handle goes through the Operations service.
	polled, err := c.CreateInstanceOperation(op.Name()).Wait(ctx)
	if err != nil || polled.GetName() != want {
		t.Errorf("CreateInstanceOperation(%q).Wait = %v, %v", op.Name(), polled, err)
	}
	if n := len(s.AttemptsFor(MethodGetOperation)); n != 1 {
		t.Errorf("GetOperation attempts = %d, want 1", n)
	}

	got, err := c.GetInstance(ctx, &redispb.GetInstanceRequest{Name: want})
	if err != nil || got.GetDisplayName() != "one" || got.GetMemorySizeGb() != 5 {
		t.Fatalf("GetInstance = %v, %v", got, err)
	}

	uop, err := c.UpdateInstance(ctx, &redispb.UpdateInstanceRequest{
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"display_name", "memory_size_gb", "labels", "redis_config"}},
		Instance: &redispb.Instance{Name: want, DisplayName: "two", MemorySizeGb: 8,
			Labels: map[string]string{"env": "test"}, RedisConfigs: map[string]string{"maxmemory-policy": "allkeys-lru"},
			Tier: redispb.Instance_BASIC}, // not in the mask: ignored
	})
	if err != nil {
		t.Fatalf("UpdateInstance: %v", err)
	}
	updated, err := uop.Wait(ctx)
	if err != nil || updated.GetDisplayName() != "two" || updated.GetMemorySizeGb() != 8 ||
		updated.GetLabels()["env"] != "test" || updated.GetRedisConfigs()["maxmemory-policy"] != "allkeys-lru" ||
		updated.GetTier() != redispb.Instance_STANDARD_HA {
		t.Errorf("updated = %v, %v", updated, err)
	}

	dop, err := c.DeleteInstance(ctx, &redispb.DeleteInstanceRequest{Name: want})
	if err != nil {
		t.Fatalf("DeleteInstance: %v", err)
	}
	if err := dop.Wait(ctx); err != nil {
		t.Fatalf("DeleteInstance.Wait: %v", err)
	}
	if _, err := c.GetInstance(ctx, &redispb.GetInstanceRequest{Name: want}); status.Code(err) != codes.NotFound {
		t.Errorf("GetInstance after delete: %v, want NotFound", err)
	}
}

func TestListPaging(t *testing.T) {
	s := newTestServer(t)
	ctx := t.Context()
	c := s.Client(ctx)
	var want []string
	for i := range 5 {
		want = append(want, create(t, c, parent, fmt.Sprintf("cache-%d", i)).GetName())
	}
	create(t, c, "projects/p1/locations/europe-west1", "elsewhere")
	create(t, c, "projects/p2/locations/us-central1", "other-project")

	s.ResetAttempts()
	it := c.ListInstances(ctx, &redispb.ListInstancesRequest{Parent: parent, PageSize: 2})
	var got []string
	for {
		in, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		got = append(got, in.GetName())
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("listed %v, want %v", got, want)
	}
	if n := len(s.AttemptsFor(MethodListInstances)); n != 3 {
		t.Errorf("ListInstances calls = %d, want 3 pages of at most 2", n)
	}

	pc := redispb.NewCloudRedisClient(s.Conn())
	all, err := pc.ListInstances(ctx, &redispb.ListInstancesRequest{Parent: "projects/p1/locations/-"})
	if err != nil || len(all.GetInstances()) != 6 || all.GetNextPageToken() != "" {
		t.Errorf("list locations/-: %d instances, token %q, err %v; want 6, none, nil", len(all.GetInstances()), all.GetNextPageToken(), err)
	}

	// A token is bound to its parent and survives deletion of the last item.
	first, err := pc.ListInstances(ctx, &redispb.ListInstancesRequest{Parent: parent, PageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteInstance(ctx, &redispb.DeleteInstanceRequest{Name: want[1]}); err != nil {
		t.Fatal(err)
	}
	second, err := pc.ListInstances(ctx, &redispb.ListInstancesRequest{Parent: parent, PageSize: 2, PageToken: first.GetNextPageToken()})
	if err != nil || len(second.GetInstances()) != 2 || second.GetInstances()[0].GetName() != want[2] {
		t.Errorf("second page after delete = %v, %v; want starting at %s", second, err, want[2])
	}
	_, err = pc.ListInstances(ctx, &redispb.ListInstancesRequest{Parent: "projects/p2/locations/us-central1", PageToken: first.GetNextPageToken()})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("token reused with another parent: %v, want InvalidArgument", err)
	}
}

func TestValidation(t *testing.T) {
	s := newTestServer(t)
	ctx := t.Context()
	c := s.Client(ctx)
	existing := create(t, c, parent, "exists").GetName()

	createErr := func(parent, id string, in *redispb.Instance) error {
		_, err := c.CreateInstance(ctx, &redispb.CreateInstanceRequest{Parent: parent, InstanceId: id, Instance: in})
		return err
	}
	updateErr := func(name string, paths ...string) error {
		_, err := c.UpdateInstance(ctx, &redispb.UpdateInstanceRequest{
			UpdateMask: &fieldmaskpb.FieldMask{Paths: paths},
			Instance:   &redispb.Instance{Name: name, MemorySizeGb: 0},
		})
		return err
	}
	listErr := func(req *redispb.ListInstancesRequest) error {
		_, err := c.ListInstances(ctx, req).Next()
		return err
	}
	tests := []struct {
		name    string
		err     error
		code    codes.Code
		mention string // a value the message must name
	}{
		{"create bad parent", createErr("projects/p1", "a", basic(1)), codes.InvalidArgument, "projects/p1"},
		{"create parent all locations", createErr("projects/p1/locations/-", "a", basic(1)), codes.InvalidArgument, "locations/-"},
		{"create uppercase id", createErr(parent, "Bad_ID", basic(1)), codes.InvalidArgument, "Bad_ID"},
		{"create id starts with digit", createErr(parent, "1abc", basic(1)), codes.InvalidArgument, "1abc"},
		{"create id ends with hyphen", createErr(parent, "abc-", basic(1)), codes.InvalidArgument, "abc-"},
		{"create id too long", createErr(parent, "a"+strings.Repeat("b", 40), basic(1)), codes.InvalidArgument, "abbb"},
		{"create empty id", createErr(parent, "", basic(1)), codes.InvalidArgument, `""`},
		{"create no instance", createErr(parent, "a", nil), codes.InvalidArgument, "instance"},
		{"create no tier", createErr(parent, "a", &redispb.Instance{MemorySizeGb: 1}), codes.InvalidArgument, "TIER_UNSPECIFIED"},
		{"create zero memory", createErr(parent, "a", basic(0)), codes.InvalidArgument, "memory_size_gb 0"},
		{"create negative memory", createErr(parent, "a", basic(-3)), codes.InvalidArgument, "-3"},
		{"create duplicate", createErr(parent, "exists", basic(1)), codes.AlreadyExists, existing},
		{"get missing", func() error {
			_, err := c.GetInstance(ctx, &redispb.GetInstanceRequest{Name: parent + "/instances/nope"})
			return err
		}(), codes.NotFound, "nope"},
		{"get bad name", func() error {
			_, err := c.GetInstance(ctx, &redispb.GetInstanceRequest{Name: "instances/x"})
			return err
		}(), codes.InvalidArgument, "instances/x"},
		{"update unknown path", updateErr(existing, "tier"), codes.InvalidArgument, "tier"},
		{"update no mask", updateErr(existing), codes.InvalidArgument, "update_mask"},
		{"update zero memory", updateErr(existing, "memory_size_gb"), codes.InvalidArgument, "memory_size_gb 0"},
		{"update missing", updateErr(parent+"/instances/nope", "display_name"), codes.NotFound, "nope"},
		{"delete missing", func() error {
			_, err := c.DeleteInstance(ctx, &redispb.DeleteInstanceRequest{Name: parent + "/instances/nope"})
			return err
		}(), codes.NotFound, "nope"},
		{"list bad token", listErr(&redispb.ListInstancesRequest{Parent: parent, PageToken: "garbage!"}), codes.InvalidArgument, "garbage!"},
		{"list negative page size", listErr(&redispb.ListInstancesRequest{Parent: parent, PageSize: -1}), codes.InvalidArgument, "-1"},
		{"list bad parent", listErr(&redispb.ListInstancesRequest{Parent: "p1"}), codes.InvalidArgument, "p1"},
		{"unimplemented method", func() error {
			_, err := c.FailoverInstance(ctx, &redispb.FailoverInstanceRequest{Name: existing})
			return err
		}(), codes.Unimplemented, ""},
		{"get missing operation", func() error {
			_, err := c.GetOperation(ctx, &longrunningpb.GetOperationRequest{})
			return err
		}(), codes.InvalidArgument, "operation name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := status.Code(tt.err); got != tt.code {
				t.Errorf("code = %v (%v), want %v", got, tt.err, tt.code)
			}
			if !strings.Contains(fmt.Sprint(tt.err), tt.mention) {
				t.Errorf("error %q does not mention %q", tt.err, tt.mention)
			}
		})
	}
}

func TestInstanceIDRule(t *testing.T) {
	for id, ok := range map[string]bool{
		"a": true, "a1": true, "a-b": true, "a" + strings.Repeat("b", 39): true,
		"": false, "-a": false, "a-": false, "A": false, "a_b": false, "1a": false,
		"a" + strings.Repeat("b", 40): false, "a.b": false,
	} {
		if got := checkInstanceID(id) == nil; got != ok {
			t.Errorf("checkInstanceID(%q) ok = %v, want %v", id, got, ok)
		}
	}
}

func TestCallerDialOptionsRun(t *testing.T) {
	s := newTestServer(t)
	ctx := t.Context()
	var calls atomic.Int32
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		calls.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	}

	// Via ClientOptions, built by the caller.
	c, err := redis.NewCloudRedisClient(ctx, append(s.ClientOptions(), option.WithGRPCDialOption(grpc.WithUnaryInterceptor(count)))...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	create(t, c, parent, "a")
	if _, err := c.GetInstance(ctx, &redispb.GetInstanceRequest{Name: parent + "/instances/a"}); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("interceptor saw %d calls via ClientOptions, want 2", n)
	}

	// Via Client, and on a plain Conn.
	calls.Store(0)
	c2 := s.Client(ctx, option.WithGRPCDialOption(grpc.WithUnaryInterceptor(count)))
	if _, err := c2.GetInstance(ctx, &redispb.GetInstanceRequest{Name: parent + "/instances/a"}); err != nil {
		t.Fatal(err)
	}
	pc := redispb.NewCloudRedisClient(s.Conn(grpc.WithUnaryInterceptor(count)))
	if _, err := pc.GetInstance(ctx, &redispb.GetInstanceRequest{Name: parent + "/instances/a"}); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("interceptor saw %d calls via Client and Conn, want 2", n)
	}
}

func TestConcurrentUse(t *testing.T) {
	s := newTestServer(t)
	ctx := t.Context()
	c := s.Client(ctx)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			name := fmt.Sprintf("c-%d", i)
			op, err := c.CreateInstance(ctx, &redispb.CreateInstanceRequest{Parent: parent, InstanceId: name, Instance: basic(1)})
			if err == nil {
				_, err = op.Wait(ctx)
			}
			if err == nil {
				_, err = c.ListInstances(ctx, &redispb.ListInstancesRequest{Parent: parent}).Next()
			}
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			_ = s.Attempts()
		})
	}
	wg.Wait()
	if n := len(s.AttemptsFor(MethodCreateInstance)); n != 16 {
		t.Errorf("CreateInstance attempts = %d, want 16", n)
	}
}

func TestCloseStopsEverything(t *testing.T) {
	// synctest.Test fails if any goroutine of the bubble is still blocked
	// when the function returns.
	synctest.Test(t, func(t *testing.T) {
		s := NewServer()
		ctx := t.Context()
		c := s.Client(ctx)
		pc := redispb.NewCloudRedisClient(s.Conn())
		create(t, c, parent, "a")

		// A call held by latency is cancelled by Close.
		s.SetLatency(time.Hour)
		done := make(chan error)
		go func() {
			_, err := pc.GetInstance(ctx, &redispb.GetInstanceRequest{Name: parent + "/instances/a"})
			done <- err
		}()
		synctest.Wait()
		s.Close()
		if err := <-done; status.Code(err) == codes.OK {
			t.Errorf("call in flight during Close succeeded")
		}
		s.Close() // idempotent
		if _, err := s.Dialer()(ctx, ""); err == nil {
			t.Error("Dialer after Close succeeded")
		}
	})
}

func TestCloseNoLeaksGoleak(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := NewServer()
	ctx := t.Context()
	create(t, s.Client(ctx), parent, "a")
	if _, err := redispb.NewCloudRedisClient(s.Conn()).GetInstance(ctx, &redispb.GetInstanceRequest{Name: parent + "/instances/a"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
}

func TestUseAfterClosePanics(t *testing.T) {
	s := NewServer()
	s.Close()
	for name, f := range map[string]func(){
		"Conn":   func() { s.Conn() },
		"Client": func() { s.Client(t.Context()) },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "redistest: ") {
					t.Errorf("%s after Close: recover() = %v, want a redistest panic", name, r)
				}
			}()
			f()
		}()
	}
}

// TestCloudRedisSubsetFacts: the facts the library's own subset of the Cloud
// Redis API (internal/cloudredis, TestWireCompatible) relies on hold for the
// real API's descriptors, as the real client registers them.
func TestCloudRedisSubsetFacts(t *testing.T) {
	facts := map[protoreflect.FullName]map[protoreflect.Name]protoreflect.FieldNumber{
		"google.cloud.redis.v1.Instance": {"name": 1, "display_name": 2, "location_id": 4, "redis_version": 7,
			"host": 10, "port": 11, "state": 14, "tier": 17, "memory_size_gb": 18},
		"google.cloud.redis.v1.GetInstanceRequest":    {"name": 1},
		"google.cloud.redis.v1.ListInstancesRequest":  {"parent": 1, "page_size": 2, "page_token": 3},
		"google.cloud.redis.v1.ListInstancesResponse": {"instances": 1, "next_page_token": 2, "unreachable": 3},
	}
	for name, fields := range facts {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
		if err != nil {
			t.Fatal(err)
		}
		for f, n := range fields {
			if fd := d.(protoreflect.MessageDescriptor).Fields().ByName(f); fd == nil || fd.Number() != n {
				t.Errorf("%s.%s: %v, want field %d", name, f, fd, n)
			}
		}
	}
	if MethodGetInstance != "/google.cloud.redis.v1.CloudRedis/GetInstance" {
		t.Errorf("GetInstance is %s", MethodGetInstance)
	}
}
