package cloudredis_test

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/platformkit/grpcbackoff/internal/cloudredis"
)

// apiFields are the fields of the Cloud Redis API v1 this subset keeps, as
// numbered in googleapis' google/cloud/redis/v1/cloud_redis.proto (the
// redistest module checks the same facts against the real client's
// descriptors, in TestCloudRedisSubsetFacts).
var apiFields = map[string]map[string]protoreflect.FieldNumber{
	"google.cloud.redis.v1.Instance": {"name": 1, "display_name": 2, "location_id": 4, "redis_version": 7,
		"host": 10, "port": 11, "state": 14, "tier": 17, "memory_size_gb": 18},
	"google.cloud.redis.v1.GetInstanceRequest":    {"name": 1},
	"google.cloud.redis.v1.ListInstancesRequest":  {"parent": 1, "page_size": 2, "page_token": 3},
	"google.cloud.redis.v1.ListInstancesResponse": {"instances": 1, "next_page_token": 2, "unreachable": 3},
}

// TestWireCompatible: the subset's methods and fields are the API's.
func TestWireCompatible(t *testing.T) {
	for _, m := range []string{cloudredis.CloudRedis_GetInstance_FullMethodName, cloudredis.CloudRedis_ListInstances_FullMethodName} {
		if m != "/google.cloud.redis.v1.CloudRedis/GetInstance" && m != "/google.cloud.redis.v1.CloudRedis/ListInstances" {
			t.Errorf("method %s is not the API's", m)
		}
	}
	for _, md := range []protoreflect.MessageDescriptor{
		(&cloudredis.Instance{}).ProtoReflect().Descriptor(),
		(&cloudredis.GetInstanceRequest{}).ProtoReflect().Descriptor(),
		(&cloudredis.ListInstancesRequest{}).ProtoReflect().Descriptor(),
		(&cloudredis.ListInstancesResponse{}).ProtoReflect().Descriptor(),
	} {
		want := apiFields[string(md.FullName())]
		if md.Fields().Len() != len(want) {
			t.Errorf("%s has %d fields, the API's subset %d", md.FullName(), md.Fields().Len(), len(want))
		}
		for i := range md.Fields().Len() {
			f := md.Fields().Get(i)
			if n, ok := want[string(f.Name())]; !ok || n != f.Number() {
				t.Errorf("%s.%s is field %d, the API's is %d", md.FullName(), f.Name(), f.Number(), n)
			}
		}
	}
}
