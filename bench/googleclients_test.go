package bench

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/googleclients"
)

// BenchmarkGoogleLookup is one lookup of who retries what for a Google
// Cloud client's call (internal/googleclients.Lookup), once the table is
// decoded: a method its file names, a whole-service entry, a mixin of a
// known API, a method of a known service the file does not name, a
// hand-written client's loop.
func BenchmarkGoogleLookup(b *testing.B) {
	for _, c := range []struct {
		name string
		call googleclients.Call
	}{
		{"table", googleclients.Call{Method: "/google.cloud.tasks.v2.CloudTasks/GetQueue", Header: taskHeader}},
		{"whole", googleclients.Call{Method: "/google.monitoring.dashboard.v1.DashboardsService/GetDashboard", Header: taskHeader}},
		{"mixin", googleclients.Call{Method: "/google.longrunning.Operations/GetOperation", Header: taskHeader,
			API: "google.cloud.dataproc.v1.ClusterController", APIGapic: "1.21.1"}},
		{"unknown", googleclients.Call{Method: "/google.cloud.tasks.v2.CloudTasks/SomeNewMethod", Header: taskHeader}},
		{"hand", googleclients.Call{Method: "/google.pubsub.v1.Publisher/Publish", Header: "gl-go/1.26.8 gccl/2.8.1 gapic/2.8.1 gax/2.27.0 grpc/1.85.0 pb/1.36"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			googleclients.Lookup(c.call) // decodes the table
			b.ReportAllocs()
			for b.Loop() {
				googleclients.Lookup(c.call)
			}
		})
	}
}

const taskHeader = "gl-go/1.26.8 gapic/1.21.1 gax/2.27.0 grpc/1.85.0 pb/1.36"

// BenchmarkGoogleClientCall is a unary call through the interceptor, to an
// invoker that answers at once, made as a Google Cloud client makes it
// (client: its x-goog-api-client) or not (plain): a success, which never
// looks the client up, and a failure with a code no one retries
// (FAILED_PRECONDITION), after which the Retrier learns the client: the
// lookup is the difference between client and plain.
func BenchmarkGoogleClientCall(b *testing.B) {
	ic := interceptor.Unary(grpcbackoff.DefaultPolicy())
	fail := status.Error(codes.FailedPrecondition, "bench")
	for _, outcome := range []struct {
		name string
		err  error
	}{{"success", nil}, {"failure", fail}} {
		invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
			return outcome.err
		}
		for _, who := range []string{"plain", "client"} {
			b.Run(outcome.name+"/"+who, func(b *testing.B) {
				ctx := context.Background()
				if who == "client" {
					ctx = metadata.AppendToOutgoingContext(ctx, "x-goog-api-client", taskHeader)
				}
				req, reply := new(string), new(string)
				_ = ic(ctx, "/google.cloud.tasks.v2.CloudTasks/GetQueue", req, reply, nil, invoker)
				b.ReportAllocs()
				for b.Loop() {
					if err := ic(ctx, "/google.cloud.tasks.v2.CloudTasks/GetQueue", req, reply, nil, invoker); err != outcome.err {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
