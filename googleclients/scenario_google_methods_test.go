package googleclients_test

import (
	"strings"
	"testing"

	_ "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	_ "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	_ "cloud.google.com/go/longrunning/autogen/longrunningpb"
	_ "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	_ "cloud.google.com/go/redis/apiv1/redispb"
	_ "cloud.google.com/go/spanner/admin/database/apiv1/databasepb"
	_ "cloud.google.com/go/spanner/admin/instance/apiv1/instancepb"
	_ "cloud.google.com/go/spanner/apiv1/spannerpb"
	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
)

// googleMethods are real methods of Cloud Redis, Pub/Sub, Bigtable (data and
// admin), Spanner (data and admin) and long-running operations, with what
// their second application does, and the facts the verdict rests on:
// http is the method's google.api.http verb, and google the codes Google's
// published service config for the API (googleapis, *_grpc_service_config.json,
// read on 2026-11-24) retries it on, "-" for none. Where Google's config
// retries a method that may apply twice (Publish, Commit), it is because
// Google's own client expects to, and that client keeps its own retries
// (one layer per code: the Retrier leaves the codes it retries to it).
var googleMethods = []struct {
	method string
	http   string
	google string
	want   interceptor.Safety
	why    string
}{
	// Cloud Redis v1.
	{"/google.cloud.redis.v1.CloudRedis/GetInstance", "GET", "-", interceptor.Idempotent, "read"},
	{"/google.cloud.redis.v1.CloudRedis/ListInstances", "GET", "-", interceptor.Idempotent, "read"},
	{"/google.cloud.redis.v1.CloudRedis/CreateInstance", "POST", "-", interceptor.NotIdempotent, "user-specified instance_id: resent per call when set, a second one is ALREADY_EXISTS (TestCreateWithIDResentPerCall)"},
	{"/google.cloud.redis.v1.CloudRedis/UpdateInstance", "PATCH", "-", interceptor.Idempotent, "sets fields"},
	{"/google.cloud.redis.v1.CloudRedis/DeleteInstance", "DELETE", "-", interceptor.Idempotent, "delete"},
	{"/google.cloud.redis.v1.CloudRedis/FailoverInstance", "POST", "-", interceptor.NotIdempotent, "a second failover moves the primary back"},
	{"/google.cloud.redis.v1.CloudRedis/ImportInstance", "POST", "-", interceptor.NotIdempotent, "a second import runs again over the data"},
	{"/google.cloud.redis.v1.CloudRedis/ExportInstance", "POST", "-", interceptor.NotIdempotent, "a second export writes again"},
	// Pub/Sub v1.
	{"/google.pubsub.v1.Publisher/Publish", "POST", "ABORTED,CANCELLED,INTERNAL,RESOURCE_EXHAUSTED,UNKNOWN,UNAVAILABLE,DEADLINE_EXCEEDED", interceptor.NotIdempotent, "publishes the messages again"},
	{"/google.pubsub.v1.Publisher/GetTopic", "GET", "UNKNOWN,ABORTED,UNAVAILABLE", interceptor.Idempotent, "read"},
	{"/google.pubsub.v1.Publisher/CreateTopic", "PUT", "UNAVAILABLE", interceptor.Idempotent, "PUT"},
	{"/google.pubsub.v1.Publisher/DetachSubscription", "POST", "UNAVAILABLE", interceptor.Idempotent, "detached stays detached"},
	{"/google.pubsub.v1.Subscriber/Acknowledge", "POST", "UNAVAILABLE", interceptor.Idempotent, "acknowledged stays acknowledged"},
	{"/google.pubsub.v1.Subscriber/ModifyAckDeadline", "POST", "UNAVAILABLE", interceptor.Idempotent, "sets the deadline"},
	{"/google.pubsub.v1.Subscriber/ModifyPushConfig", "POST", "UNAVAILABLE", interceptor.Idempotent, "sets the config"},
	{"/google.pubsub.v1.Subscriber/Pull", "POST", "UNKNOWN,ABORTED,UNAVAILABLE,INTERNAL", interceptor.Idempotent, "messages of a lost answer are delivered again"},
	{"/google.pubsub.v1.Subscriber/Seek", "POST", "UNKNOWN,ABORTED,UNAVAILABLE", interceptor.Idempotent, "sets the cursor"},
	{"/google.pubsub.v1.Subscriber/GetSubscription", "GET", "UNKNOWN,ABORTED,UNAVAILABLE", interceptor.Idempotent, "read"},
	{"/google.pubsub.v1.SchemaService/CommitSchema", "POST", "UNAVAILABLE", interceptor.NotIdempotent, "a second revision"},
	{"/google.pubsub.v1.SchemaService/ValidateSchema", "POST", "UNAVAILABLE", interceptor.Idempotent, "read"},
	// Bigtable v2.
	{"/google.bigtable.v2.Bigtable/ReadRows", "POST", "-", interceptor.Idempotent, "read"},
	{"/google.bigtable.v2.Bigtable/SampleRowKeys", "GET", "-", interceptor.Idempotent, "read"},
	{"/google.bigtable.v2.Bigtable/ExecuteQuery", "POST", "UNAVAILABLE,DEADLINE_EXCEEDED", interceptor.Idempotent, "read"},
	{"/google.bigtable.v2.Bigtable/ReadChangeStream", "POST", "-", interceptor.Idempotent, "read"},
	{"/google.bigtable.v2.Bigtable/MutateRow", "POST", "UNAVAILABLE,DEADLINE_EXCEEDED", interceptor.NotIdempotent, "cells with the server's timestamp are written again"},
	{"/google.bigtable.v2.Bigtable/MutateRows", "POST", "-", interceptor.NotIdempotent, "as MutateRow"},
	{"/google.bigtable.v2.Bigtable/CheckAndMutateRow", "POST", "-", interceptor.NotIdempotent, "the check sees the first mutation"},
	{"/google.bigtable.v2.Bigtable/ReadModifyWriteRow", "POST", "-", interceptor.NotIdempotent, "increments again"},
	// Bigtable admin v2.
	{"/google.bigtable.admin.v2.BigtableTableAdmin/GetIamPolicy", "POST", "UNAVAILABLE,DEADLINE_EXCEEDED", interceptor.Idempotent, "read"},
	{"/google.bigtable.admin.v2.BigtableTableAdmin/TestIamPermissions", "POST", "UNAVAILABLE,DEADLINE_EXCEEDED", interceptor.Idempotent, "read"},
	{"/google.bigtable.admin.v2.BigtableTableAdmin/SetIamPolicy", "POST", "-", interceptor.Idempotent, "sets the policy"},
	{"/google.bigtable.admin.v2.BigtableTableAdmin/CheckConsistency", "POST", "UNAVAILABLE,DEADLINE_EXCEEDED", interceptor.Idempotent, "read"},
	{"/google.bigtable.admin.v2.BigtableTableAdmin/GenerateConsistencyToken", "POST", "UNAVAILABLE,DEADLINE_EXCEEDED", interceptor.Idempotent, "a fresh token, nothing changed"},
	{"/google.bigtable.admin.v2.BigtableTableAdmin/GetTable", "GET", "UNAVAILABLE,DEADLINE_EXCEEDED", interceptor.Idempotent, "read"},
	{"/google.bigtable.admin.v2.BigtableTableAdmin/CreateTable", "POST", "-", interceptor.NotIdempotent, "user-specified table_id: resent per call when set"},
	{"/google.bigtable.admin.v2.BigtableTableAdmin/DropRowRange", "POST", "-", interceptor.NotIdempotent, "drops rows written in between"},
	{"/google.bigtable.admin.v2.BigtableInstanceAdmin/GetInstance", "GET", "UNAVAILABLE,DEADLINE_EXCEEDED", interceptor.Idempotent, "read"},
	{"/google.bigtable.admin.v2.BigtableInstanceAdmin/GetIamPolicy", "POST", "UNAVAILABLE,DEADLINE_EXCEEDED", interceptor.Idempotent, "read"},
	// Spanner v1.
	{"/google.spanner.v1.Spanner/Read", "POST", "UNAVAILABLE,RESOURCE_EXHAUSTED", interceptor.Idempotent, "read"},
	{"/google.spanner.v1.Spanner/StreamingRead", "POST", "-", interceptor.Idempotent, "read"},
	{"/google.spanner.v1.Spanner/PartitionRead", "POST", "UNAVAILABLE,RESOURCE_EXHAUSTED", interceptor.Idempotent, "read"},
	{"/google.spanner.v1.Spanner/PartitionQuery", "POST", "UNAVAILABLE,RESOURCE_EXHAUSTED", interceptor.Idempotent, "read"},
	{"/google.spanner.v1.Spanner/GetSession", "GET", "UNAVAILABLE,RESOURCE_EXHAUSTED", interceptor.Idempotent, "read"},
	{"/google.spanner.v1.Spanner/Rollback", "POST", "UNAVAILABLE,RESOURCE_EXHAUSTED", interceptor.Idempotent, "rolled back stays rolled back"},
	{"/google.spanner.v1.Spanner/Commit", "POST", "UNAVAILABLE,RESOURCE_EXHAUSTED", interceptor.NotIdempotent, "a single-use transaction commits again"},
	{"/google.spanner.v1.Spanner/ExecuteSql", "POST", "UNAVAILABLE,RESOURCE_EXHAUSTED", interceptor.NotIdempotent, "may be DML"},
	{"/google.spanner.v1.Spanner/ExecuteBatchDml", "POST", "UNAVAILABLE,RESOURCE_EXHAUSTED", interceptor.NotIdempotent, "DML"},
	{"/google.spanner.v1.Spanner/BatchWrite", "POST", "-", interceptor.NotIdempotent, "writes again"},
	{"/google.spanner.v1.Spanner/CreateSession", "POST", "UNAVAILABLE,RESOURCE_EXHAUSTED", interceptor.NotIdempotent, "a second session"},
	// Spanner admin.
	{"/google.spanner.admin.database.v1.DatabaseAdmin/GetDatabase", "GET", "UNAVAILABLE,DEADLINE_EXCEEDED", interceptor.Idempotent, "read"},
	{"/google.spanner.admin.database.v1.DatabaseAdmin/GetIamPolicy", "POST", "UNAVAILABLE,DEADLINE_EXCEEDED", interceptor.Idempotent, "read"},
	{"/google.spanner.admin.database.v1.DatabaseAdmin/UpdateDatabaseDdl", "PATCH", "UNAVAILABLE,DEADLINE_EXCEEDED", interceptor.Idempotent, "PATCH"},
	{"/google.spanner.admin.instance.v1.InstanceAdmin/TestIamPermissions", "POST", "-", interceptor.Idempotent, "read"},
	{"/google.spanner.admin.instance.v1.InstanceAdmin/MoveInstance", "POST", "-", interceptor.NotIdempotent, "a second move"},
	// Long-running operations.
	{"/google.longrunning.Operations/GetOperation", "GET", "UNAVAILABLE", interceptor.Idempotent, "read"},
	{"/google.longrunning.Operations/ListOperations", "GET", "UNAVAILABLE", interceptor.Idempotent, "read"},
	{"/google.longrunning.Operations/CancelOperation", "POST", "UNAVAILABLE", interceptor.Idempotent, "cancelled stays cancelled"},
	{"/google.longrunning.Operations/DeleteOperation", "DELETE", "UNAVAILABLE", interceptor.Idempotent, "delete"},
}

// TestSafetyOfGoogleMethods measures the Safety rule on googleMethods: every
// method's verdict, its source, and the codes the default Policy then
// retries it on, as Explain tells them.
func TestSafetyOfGoogleMethods(t *testing.T) {
	r, err := interceptor.New(grpcbackoff.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	if len(googleMethods) < 40 {
		t.Fatalf("%d methods, want at least 40", len(googleMethods))
	}
	var wrong, googleOnly int
	for _, m := range googleMethods {
		d := r.Explain(m.method)
		if d.Safety != m.want {
			wrong++
			t.Errorf("%s: %v (%s), want %v: %s", m.method, d.Safety, d.Source, m.want, m.why)
		}
		if !strings.HasPrefix(d.Source, "google.api.http "+m.http+" ") {
			t.Errorf("%s: source %q, want its google.api.http %s binding", m.method, d.Source, m.http)
		}
		retried := d.Policy != nil && containsCode(d.Codes, codes.Unavailable)
		if retried != (m.want != interceptor.NotIdempotent) {
			t.Errorf("%s: retried on UNAVAILABLE %t; Explain: %s", m.method, retried, d)
		}
		if !retried && strings.Contains(m.google, "UNAVAILABLE") {
			googleOnly++
		}
	}
	t.Logf("%d methods: %d verdicts wrong; %d that may apply twice are not resent after UNAVAILABLE although Google's config retries them", len(googleMethods), wrong, googleOnly)
}

func containsCode(cs []codes.Code, c codes.Code) bool {
	for _, x := range cs {
		if x == c {
			return true
		}
	}
	return false
}
