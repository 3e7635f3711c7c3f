package opentelemetry_test

import (
	"runtime"
	"testing"
	"testing/synctest"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/opentelemetry"
)

// TestGauges checks the budget gauges: the retries left in the budget of
// each Retrier built with the Recorder's option (one budget per Retrier,
// shared by its targets, reported with target ""), a rejection probability
// of 0, nothing for a Retrier without a throttle, and nothing once the
// Retrier is gone.
func TestGauges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, mp := newReader()
		rec := newRecorder(t, opentelemetry.Options{MeterProvider: mp})
		p := exact()
		p.MaxAttempts = 3
		ic := interceptor.Unary(p, rec.Option(), interceptor.WithThrottle(grpcbackoff.Throttle{Burst: 5}))
		interceptor.Unary(p, rec.Option(), interceptor.WithoutThrottle())

		got := collect(t, reader)
		check(t, got, opentelemetry.MetricBudgetAvailable, nil, map[string]string{"grpc.target=": "5"})
		check(t, got, opentelemetry.MetricThrottleRejectionProbability, nil, map[string]string{"grpc.target=": "0"})

		call(t.Context(), t, ic, &script{errs: unavailable(2)}) // two retries paid
		check(t, collect(t, reader), opentelemetry.MetricBudgetAvailable, nil, map[string]string{"grpc.target=": "3"})

		// A second Retrier with a budget: the gauges of one label add up.
		other := interceptor.Unary(p, rec.Option(), interceptor.WithThrottle(grpcbackoff.Throttle{Burst: 2}))
		check(t, collect(t, reader), opentelemetry.MetricBudgetAvailable, nil, map[string]string{"grpc.target=": "5"})
		runtime.KeepAlive(other)
		runtime.KeepAlive(ic)
	})
}

func TestGaugesForgetRetriersCollected(t *testing.T) {
	reader, mp := newReader()
	rec := newRecorder(t, opentelemetry.Options{MeterProvider: mp})
	func() {
		ic := interceptor.Unary(exact(), rec.Option(), interceptor.WithThrottle(grpcbackoff.Throttle{Burst: 5}))
		check(t, collect(t, reader), opentelemetry.MetricBudgetAvailable, nil, map[string]string{"grpc.target=": "5"})
		runtime.KeepAlive(ic)
	}()
	runtime.GC()
	if m, ok := collect(t, reader)[opentelemetry.MetricBudgetAvailable]; ok && len(points(t, m, nil)) != 0 {
		t.Errorf("%s = %v after the Retrier was collected, want no point", opentelemetry.MetricBudgetAvailable, points(t, m, nil))
	}
}
