// Package versions checks the library's data on Google clients at other
// versions than the googleclients module pins (Secret Manager v1.14.7,
// Pub/Sub v2.9.0): a module of its own, outside the workspace, as one
// module cannot hold two versions of a client. Run it by hand:
//
//	cd googleclients/versions && GOWORK=off go test ./...
package versions

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	pubsub "cloud.google.com/go/pubsub/v2/apiv1"
	secretmanager "cloud.google.com/go/secretmanager/apiv1"
	gax "github.com/googleapis/gax-go/v2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	gc "github.com/platformkit/grpcbackoff/internal/cloudclients"
)

// TestOtherVersions: for every method of Secret Manager v1.14.7's and
// Pub/Sub v2.9.0's generated clients, the codes and the longest pause their
// default CallOptions retry equal what the library's table says, looked up
// as the client calls: with its gapic/ version and its API.
func TestOtherVersions(t *testing.T) {
	ctx := context.Background()
	opts := []option.ClientOption{option.WithEndpoint("127.0.0.1:1"), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials()))}
	sm, err := secretmanager.NewClient(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	topics, err := pubsub.NewTopicAdminClient(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	subs, err := pubsub.NewSubscriptionAdminClient(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		client  any
		service string
		gapic   string
	}{
		{sm, "google.cloud.secretmanager.v1.SecretManagerService", "1.14.7"},
		{topics, "google.pubsub.v1.Publisher", "2.9.0"},
		{subs, "google.pubsub.v1.Subscriber", "2.9.0"},
	} {
		n, known := check(t, c.client, c.service, c.gapic)
		t.Logf("%T at gapic/%s: %d methods equal to the table, %d named by their file", c.client, c.gapic, n, known)
	}
}

func check(t *testing.T, client any, service, gapic string) (n, known int) {
	svc, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		t.Fatal(err)
	}
	co := reflect.ValueOf(client).Elem().FieldByName("CallOptions").Elem()
	for i := range co.NumField() {
		name := co.Type().Field(i).Name
		full := "/" + service + "/" + name
		stream := false
		if md := svc.(protoreflect.ServiceDescriptor).Methods().ByName(protoreflect.Name(name)); md != nil {
			stream = md.IsStreamingClient() || md.IsStreamingServer()
		} else {
			for _, mx := range []string{"google.iam.v1.IAMPolicy", "google.cloud.location.Locations", "google.longrunning.Operations"} {
				if d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(mx)); err == nil {
					if d.(protoreflect.ServiceDescriptor).Methods().ByName(protoreflect.Name(name)) != nil {
						full = "/" + mx + "/" + name
					}
				}
			}
		}
		mask, max := retried(co.Field(i).Interface().([]gax.CallOption))
		r := gc.Lookup(gc.Call{Method: full, Header: "gl-go/1.26.0 gapic/" + gapic + " gax/2.27.0", Stream: stream, API: service, APIGapic: gapic})
		switch {
		case r.Codes != mask:
			t.Errorf("%s at gapic/%s: the table says %v (known %v), its CallOptions retry %v", full, gapic, gc.CodeNames(r.Codes), r.Known, gc.CodeNames(mask))
		case mask != 0 && r.Pause != max:
			t.Errorf("%s at gapic/%s: the table's longest pause %v, its CallOptions' %v", full, gapic, r.Pause, max)
		default:
			n++
			if r.Known && !strings.HasPrefix(full, "/google.iam") {
				known++
			}
		}
	}
	return n, known
}

// retried returns the codes a fresh Retryer of opts retries and its gax
// Backoff's Max (by reflection: gax.OnCodes's fields are unexported).
func retried(opts []gax.CallOption) (uint32, time.Duration) {
	var s gax.CallSettings
	for _, o := range opts {
		o.Resolve(&s)
	}
	if s.Retry == nil {
		return 0, 0
	}
	var mask uint32
	var max time.Duration
	for c := codes.Canceled; c <= codes.Unauthenticated; c++ {
		r := s.Retry()
		if _, ok := r.Retry(status.Error(c, "x")); ok {
			mask |= 1 << c
		}
		if f := reflect.ValueOf(r).Elem().FieldByName("backoff"); f.IsValid() {
			max = time.Duration(f.FieldByName("Max").Int())
		}
	}
	return mask, max
}
