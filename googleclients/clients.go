package googleclients

import (
	"context"

	alloydb "cloud.google.com/go/alloydb/apiv1"
	btadmin "cloud.google.com/go/bigtable/admin/apiv2"
	cloudtasks "cloud.google.com/go/cloudtasks/apiv2"
	dataproc "cloud.google.com/go/dataproc/v2/apiv1"
	firestore "cloud.google.com/go/firestore/apiv1"
	kms "cloud.google.com/go/kms/apiv1"
	logging "cloud.google.com/go/logging/apiv2"
	lroauto "cloud.google.com/go/longrunning/autogen"
	memcache "cloud.google.com/go/memcache/apiv1"
	memorystore "cloud.google.com/go/memorystore/apiv1"
	monitoring "cloud.google.com/go/monitoring/apiv3/v2"
	dashboard "cloud.google.com/go/monitoring/dashboard/apiv1"
	pubsub "cloud.google.com/go/pubsub/v2/apiv1"
	redis "cloud.google.com/go/redis/apiv1"
	rediscluster "cloud.google.com/go/redis/cluster/apiv1"
	scheduler "cloud.google.com/go/scheduler/apiv1"
	secretmanager "cloud.google.com/go/secretmanager/apiv1"
	database "cloud.google.com/go/spanner/admin/database/apiv1"
	instance "cloud.google.com/go/spanner/admin/instance/apiv1"
	spanner "cloud.google.com/go/spanner/apiv1"
	"google.golang.org/api/option"
)

// Client is a generated gRPC client of cloud.google.com/go that the data
// covers: its module is pinned by this module's go.mod.
type Client struct {
	// Service is the full name of the gRPC service the client calls, as in
	// its proto file: "google.cloud.redis.v1.CloudRedis".
	Service string
	// New builds the client. It must not connect: grpc.NewClient is lazy.
	New func(context.Context, ...option.ClientOption) (any, error)
}

// newClient adapts a generated client's constructor to Client.New.
func newClient[C any](f func(context.Context, ...option.ClientOption) (*C, error)) func(context.Context, ...option.ClientOption) (any, error) {
	return func(ctx context.Context, opts ...option.ClientOption) (any, error) {
		c, err := f(ctx, opts...)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
}

// Clients returns the generated clients the data covers, in the order of
// the data's client table.
func Clients() []Client {
	return []Client{
		{"google.cloud.redis.v1.CloudRedis", newClient(redis.NewCloudRedisClient)},
		{"google.cloud.redis.cluster.v1.CloudRedisCluster", newClient(rediscluster.NewCloudRedisClusterClient)},
		{"google.cloud.memorystore.v1.Memorystore", newClient(memorystore.NewClient)},
		{"google.cloud.memcache.v1.CloudMemcache", newClient(memcache.NewCloudMemcacheClient)},
		{"google.cloud.secretmanager.v1.SecretManagerService", newClient(secretmanager.NewClient)},
		{"google.cloud.kms.v1.KeyManagementService", newClient(kms.NewKeyManagementClient)},
		{"google.cloud.kms.v1.EkmService", newClient(kms.NewEkmClient)},
		{"google.cloud.kms.v1.Autokey", newClient(kms.NewAutokeyClient)},
		{"google.cloud.kms.v1.AutokeyAdmin", newClient(kms.NewAutokeyAdminClient)},
		{"google.cloud.kms.v1.HsmManagement", newClient(kms.NewHsmManagementClient)},
		{"google.logging.v2.LoggingServiceV2", newClient(logging.NewClient)},
		{"google.logging.v2.ConfigServiceV2", newClient(logging.NewConfigClient)},
		{"google.logging.v2.MetricsServiceV2", newClient(logging.NewMetricsClient)},
		{"google.firestore.v1.Firestore", newClient(firestore.NewClient)},
		{"google.cloud.alloydb.v1.AlloyDBAdmin", newClient(alloydb.NewAlloyDBAdminClient)},
		{"google.cloud.alloydb.v1.AlloyDBCSQLAdmin", newClient(alloydb.NewAlloyDBCSQLAdminClient)},
		{"google.pubsub.v1.Publisher", newClient(pubsub.NewTopicAdminClient)},
		{"google.pubsub.v1.Subscriber", newClient(pubsub.NewSubscriptionAdminClient)},
		{"google.pubsub.v1.SchemaService", newClient(pubsub.NewSchemaClient)},
		{"google.bigtable.admin.v2.BigtableTableAdmin", newClient(btadmin.NewBigtableTableAdminClient)},
		{"google.bigtable.admin.v2.BigtableInstanceAdmin", newClient(btadmin.NewBigtableInstanceAdminClient)},
		{"google.spanner.v1.Spanner", newClient(spanner.NewClient)},
		{"google.spanner.admin.database.v1.DatabaseAdmin", newClient(database.NewDatabaseAdminClient)},
		{"google.spanner.admin.instance.v1.InstanceAdmin", newClient(instance.NewInstanceAdminClient)},
		{"google.longrunning.Operations", newClient(lroauto.NewOperationsClient)},
	}
}

// Unpinned returns generated clients that the data was not read from, of
// APIs a platform team's services use beside the pinned ones (Cloud Tasks,
// Cloud Scheduler, Cloud Monitoring, Dataproc): their tests check that the
// table, from googleapis' service configs, says what they retry too.
func Unpinned() []Client {
	return []Client{
		{"google.cloud.tasks.v2.CloudTasks", newClient(cloudtasks.NewClient)},
		{"google.cloud.scheduler.v1.CloudScheduler", newClient(scheduler.NewCloudSchedulerClient)},
		{"google.monitoring.v3.AlertPolicyService", newClient(monitoring.NewAlertPolicyClient)},
		{"google.monitoring.v3.UptimeCheckService", newClient(monitoring.NewUptimeCheckClient)},
		{"google.monitoring.dashboard.v1.DashboardsService", newClient(dashboard.NewDashboardsClient)},
		{"google.cloud.dataproc.v1.ClusterController", newClient(dataproc.NewClusterControllerClient)},
	}
}

// ReadClient builds c offline and reads what its default CallOptions retry,
// method by method, as Generate does for the pinned clients.
func ReadClient(ctx context.Context, c Client) (ClientInfo, []Method, error) { return read(ctx, c) }
