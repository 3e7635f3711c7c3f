package googleclients_test

// Red-team probe of issue 33: the sweep of TestSweepUnpinnedClients on the
// other services of the same unpinned modules (no new dependency): Cloud
// Monitoring v3's six other services, Dataproc's seven other services,
// Cloud Tasks v2beta3 and Cloud Scheduler v1beta1, every RPC method (their
// mixins included) under U×2, RE×2 and an outage, with the same checks:
// recovered wherever the client or Safety allows, one layer, RESOURCE_EXHAUSTED
// never retried by nobody, Explain equal to the wire.

import (
	"context"

	"google.golang.org/api/option"
	"slices"
	"testing"

	tasksbeta "cloud.google.com/go/cloudtasks/apiv2beta3"
	dataproc "cloud.google.com/go/dataproc/v2/apiv1"
	monitoring "cloud.google.com/go/monitoring/apiv3/v2"
	schedulerbeta "cloud.google.com/go/scheduler/apiv1beta1"
	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff/googleclients"
	"github.com/platformkit/grpcbackoff/interceptor"
)

func TestProbeSweepMoreUnpinnedServices(t *testing.T) {
	clients := []googleclients.Client{
		{Service: "google.monitoring.v3.MetricService", New: probeNew(monitoring.NewMetricClient)},
		{Service: "google.monitoring.v3.GroupService", New: probeNew(monitoring.NewGroupClient)},
		{Service: "google.monitoring.v3.NotificationChannelService", New: probeNew(monitoring.NewNotificationChannelClient)},
		{Service: "google.monitoring.v3.ServiceMonitoringService", New: probeNew(monitoring.NewServiceMonitoringClient)},
		{Service: "google.monitoring.v3.SnoozeService", New: probeNew(monitoring.NewSnoozeClient)},
		{Service: "google.monitoring.v3.QueryService", New: probeNew(monitoring.NewQueryClient)},
		{Service: "google.cloud.dataproc.v1.JobController", New: probeNew(dataproc.NewJobControllerClient)},
		{Service: "google.cloud.dataproc.v1.WorkflowTemplateService", New: probeNew(dataproc.NewWorkflowTemplateClient)},
		{Service: "google.cloud.dataproc.v1.BatchController", New: probeNew(dataproc.NewBatchControllerClient)},
		{Service: "google.cloud.dataproc.v1.AutoscalingPolicyService", New: probeNew(dataproc.NewAutoscalingPolicyClient)},
		{Service: "google.cloud.dataproc.v1.NodeGroupController", New: probeNew(dataproc.NewNodeGroupControllerClient)},
		{Service: "google.cloud.dataproc.v1.SessionController", New: probeNew(dataproc.NewSessionControllerClient)},
		{Service: "google.cloud.dataproc.v1.SessionTemplateController", New: probeNew(dataproc.NewSessionTemplateControllerClient)},
		{Service: "google.cloud.tasks.v2beta3.CloudTasks", New: probeNew(tasksbeta.NewClient)},
		{Service: "google.cloud.scheduler.v1beta1.CloudScheduler", New: probeNew(schedulerbeta.NewCloudSchedulerClient)},
	}
	explain, err := interceptor.New(sweepPolicy())
	if err != nil {
		t.Fatal(err)
	}
	results := make([][]swept, len(clients))
	inBubbles(t, len(clients), func(i int) string { return clients[i].Service }, func(t *testing.T, i int) {
		results[i] = sweepClient(t, sweepFamily{Client: clients[i]}, explain, nil, faultU2, faultRE2, faultOutage)
	})
	n := 0
	for _, res := range results {
		for _, s := range res {
			n++
			checkSwept(t, s, sweepPolicy().MaxAttempts, slices.Contains(s.decision.Codes, codes.Unavailable))
			checkExplained(t, s)
		}
	}
	t.Logf("%d methods of %d clients swept", n, len(clients))
}

// probeNew adapts a generated client's constructor to Client.New.
func probeNew[C any](f func(context.Context, ...option.ClientOption) (*C, error)) func(context.Context, ...option.ClientOption) (any, error) {
	return func(ctx context.Context, opts ...option.ClientOption) (any, error) {
		c, err := f(ctx, opts...)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
}
