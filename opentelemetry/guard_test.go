package opentelemetry_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/guard"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
	"github.com/platformkit/grpcbackoff/opentelemetry"
)

// TestMetricsTellServerFromBudget: a retry a server's retry guard refused
// (pushback −1) and one the local budget refused are told apart: the first
// gives up with reason server_refused and costs the budget nothing, the
// second with reason throttled, and only it counts in budget.refused.
func TestMetricsTellServerFromBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, mp := newReader()
		rec := newRecorder(t, opentelemetry.Options{MeterProvider: mp})
		p := grpcbackoff.DefaultPolicy()
		p.Initial, p.Max, p.Jitter, p.MaxAttempts = 100*time.Millisecond, time.Second, 0, 5
		down := bufconntest.Steps(bufconntest.Fail(status.Error(codes.Unavailable, "down")))
		call := func(r *interceptor.Retrier, srv *bufconntest.Server, n int) {
			client := srv.Client(t, r.DialOptions()...)
			for range n {
				if _, err := client.UnaryCall(context.Background(), &testgrpc.SimpleRequest{}); status.Code(err) != codes.Unavailable {
					t.Fatalf("err = %v, want UNAVAILABLE", err)
				}
			}
		}

		// A guarded server: two calls use their 5 attempts (8 retries, and
		// their last failures, let through, expected as 2 more), the third
		// and the fourth are refused at their first try. The budget could
		// pay for them all (Burst 100).
		g, err := guard.New(guard.Options{})
		if err != nil {
			t.Fatal(err)
		}
		guarded := bufconntest.NewServer(t, down, g.ServerOptions()...)
		r, err := interceptor.New(p, rec.Option(), interceptor.WithThrottle(grpcbackoff.Throttle{Burst: 100}), interceptor.WithSafety("/grpc.testing.TestService/", interceptor.Idempotent))
		if err != nil {
			t.Fatal(err)
		}
		call(r, guarded, 4)
		if got := guarded.Count(); got != 12 {
			t.Fatalf("the guarded server saw %d attempts, want 12", got)
		}
		if d := r.Explain("/grpc.testing.TestService/UnaryCall"); !d.Pushback || !d.Budget {
			t.Errorf("Explain: Pushback %v, Budget %v; want both", d.Pushback, d.Budget)
		}

		// An unguarded server, and a budget of one retry: the second retry
		// is refused here.
		plain := bufconntest.NewServer(t, down)
		r, err = interceptor.New(p, rec.Option(), interceptor.WithThrottle(grpcbackoff.Throttle{Burst: 1}), interceptor.WithSafety("/grpc.testing.TestService/", interceptor.Idempotent))
		if err != nil {
			t.Fatal(err)
		}
		call(r, plain, 1)

		const labels = "grpc.method=grpc.testing.TestService/UnaryCall grpc.status=UNAVAILABLE grpc.target=passthrough:///bufconn grpcbackoff.reason="
		got := collect(t, reader)
		check(t, got, opentelemetry.MetricCallGaveUp, nil, map[string]string{
			labels + "exhausted":      "2",
			labels + "server_refused": "2",
			labels + "throttled":      "1",
		})
		check(t, got, opentelemetry.MetricBudgetRefused, nil, map[string]string{
			"grpc.method=grpc.testing.TestService/UnaryCall grpc.target=passthrough:///bufconn grpcbackoff.attempt_type=retry": "1",
		})
	})
}
