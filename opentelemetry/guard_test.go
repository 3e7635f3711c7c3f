package opentelemetry_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
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
		call := func(r *interceptor.Retrier, srv *bufconntest.Server, n int) map[grpcbackoff.Reason]int {
			client := srv.Client(t, r.DialOptions()...)
			reasons := map[grpcbackoff.Reason]int{}
			for range n {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
				cancel()
				var e *grpcbackoff.Error
				if !errors.As(err, &e) || status.Code(err) != codes.Unavailable {
					t.Fatalf("err = %v, want UNAVAILABLE from the Retrier", err)
				}
				reasons[e.Reason]++
			}
			return reasons
		}

		// A guarded server in an outage: once its harm is MinRetries, a
		// failure whose slot (a second apart) is past its call's 2 s
		// deadline is refused. The budget could pay for every retry
		// (Burst 100).
		g, err := guard.New(guard.Options{MinRetries: 1, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		guarded := bufconntest.NewServer(t, down, g.ServerOptions()...)
		r, err := interceptor.New(p, rec.Option(), interceptor.WithThrottle(grpcbackoff.Throttle{Burst: 100}), interceptor.WithSafety("/grpc.testing.TestService/", interceptor.Idempotent))
		if err != nil {
			t.Fatal(err)
		}
		reasons := call(r, guarded, 6)
		if reasons[grpcbackoff.ReasonServerRefused] == 0 {
			t.Fatalf("reasons %v: want calls the server refused", reasons)
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
		want := map[string]string{labels + "throttled": "1"}
		for reason, n := range reasons {
			name := map[grpcbackoff.Reason]string{grpcbackoff.ReasonExhausted: "exhausted", grpcbackoff.ReasonServerRefused: "server_refused"}[reason]
			want[labels+name] = fmt.Sprint(n)
		}
		got := collect(t, reader)
		check(t, got, opentelemetry.MetricCallGaveUp, nil, want)
		check(t, got, opentelemetry.MetricBudgetRefused, nil, map[string]string{
			"grpc.method=grpc.testing.TestService/UnaryCall grpc.target=passthrough:///bufconn grpcbackoff.attempt_type=retry": "1",
		})
	})
}

// TestGuardRecorder: a guarded server in an outage, its failures paced and
// refused, counted per method, code and criticality, with the waits; a
// method an unknown-service handler serves is "other".
func TestGuardRecorder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, mp := newReader()
		gr, err := opentelemetry.NewGuardRecorder(opentelemetry.Options{MeterProvider: mp})
		if err != nil {
			t.Fatal(err)
		}
		var marks []guard.Mark
		g, err := guard.New(guard.Options{MinRetries: 1, Logger: slog.New(slog.DiscardHandler), OnMark: func(ctx context.Context, m guard.Mark) {
			marks = append(marks, m)
			gr.OnMark(ctx, m)
		}})
		if err != nil {
			t.Fatal(err)
		}
		srv := bufconntest.NewServer(t, bufconntest.Steps(bufconntest.Fail(status.Error(codes.Unavailable, "down"))), g.ServerOptions()...)
		conn := srv.Conn(t)
		for i := range 40 {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			ctx = metadata.AppendToOutgoingContext(ctx, grpcbackoff.CriticalityKey, "critical")
			m := "/grpc.testing.TestService/UnaryCall"
			if i%2 == 1 {
				m = "/other.Service/Call"
			}
			conn.Invoke(ctx, m, &testgrpc.SimpleRequest{}, &testgrpc.SimpleResponse{})
			cancel()
			time.Sleep(100 * time.Millisecond)
		}
		want := map[string]map[string]int{opentelemetry.MetricGuardPaced: {}, opentelemetry.MetricGuardRefused: {}}
		var waits int
		for _, m := range marks {
			label := "grpc.method=other"
			if m.Registered {
				label = "grpc.method=grpc.testing.TestService/UnaryCall"
			}
			label += " grpc.status=UNAVAILABLE grpcbackoff.criticality=CRITICAL"
			if m.Refused {
				want[opentelemetry.MetricGuardRefused][label]++
			} else {
				want[opentelemetry.MetricGuardPaced][label]++
				waits++
			}
		}
		if len(want[opentelemetry.MetricGuardPaced]) != 2 || len(want[opentelemetry.MetricGuardRefused]) != 2 {
			t.Fatalf("marks %v: want both methods paced and refused", want)
		}
		got := collect(t, reader)
		for name, w := range want {
			ws := map[string]string{}
			for k, v := range w {
				ws[k] = fmt.Sprint(v)
			}
			check(t, got, name, nil, ws)
		}
		if n := got[opentelemetry.MetricGuardWait].Data.(metricdata.Histogram[float64]).DataPoints; len(n) != 2 || n[0].Count+n[1].Count != uint64(waits) {
			t.Errorf("%s: %d series, want 2 holding the %d waits", opentelemetry.MetricGuardWait, len(n), waits)
		}
	})
}
