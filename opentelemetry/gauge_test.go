package opentelemetry_test

import (
	"runtime"
	"testing"
	"testing/synctest"

	"github.com/platformkit/grpcbackoff/internal/bufconntest"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/opentelemetry"
)

// TestGauges checks the budget gauges: one point per backend target a
// Retrier has served, with the retries left in its budget (calls made
// without a ClientConn count as target ""), a rejection probability of 0,
// the points of several Retriers on one target added up, nothing for a
// Retrier without a throttle, and nothing once the Retrier is gone.
func TestGauges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, mp := newReader()
		rec := newRecorder(t, opentelemetry.Options{MeterProvider: mp})
		p := bufconntest.Exact()
		p.MaxAttempts = 3
		ic := interceptor.Unary(p, rec.Option(), interceptor.WithThrottle(grpcbackoff.Throttle{Burst: 5}))
		none := interceptor.Unary(p, rec.Option(), interceptor.WithoutThrottle())
		if m, ok := collect(t, reader)[opentelemetry.MetricBudgetAvailable]; ok && len(points(t, m, nil)) != 0 {
			t.Errorf("%s = %v before any call, want no point", opentelemetry.MetricBudgetAvailable, points(t, m, nil))
		}

		call(t.Context(), ic, &bufconntest.Invoker{Errs: bufconntest.Unavailable(2)})   // two retries paid, the one served given back
		call(t.Context(), none, &bufconntest.Invoker{Errs: bufconntest.Unavailable(1)}) // no budget: no point
		got := collect(t, reader)
		check(t, got, opentelemetry.MetricBudgetAvailable, nil, map[string]string{"grpc.target=": "4"})
		check(t, got, opentelemetry.MetricThrottleRejectionProbability, nil, map[string]string{"grpc.target=": "0"})

		// A second Retrier with a budget on the same target: the points add up.
		other := interceptor.Unary(p, rec.Option(), interceptor.WithThrottle(grpcbackoff.Throttle{Burst: 2}))
		call(t.Context(), other, &bufconntest.Invoker{})
		check(t, collect(t, reader), opentelemetry.MetricBudgetAvailable, nil, map[string]string{"grpc.target=": "6"})
	})
}

func TestGaugesForgetRetriersCollected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, mp := newReader()
		rec := newRecorder(t, opentelemetry.Options{MeterProvider: mp})
		func() {
			ic := interceptor.Unary(bufconntest.Exact(), rec.Option(), interceptor.WithThrottle(grpcbackoff.Throttle{Burst: 5}))
			call(t.Context(), ic, &bufconntest.Invoker{})
			check(t, collect(t, reader), opentelemetry.MetricBudgetAvailable, nil, map[string]string{"grpc.target=": "5"})
		}()
		runtime.GC()
		if m, ok := collect(t, reader)[opentelemetry.MetricBudgetAvailable]; ok && len(points(t, m, nil)) != 0 {
			t.Errorf("%s = %v after the Retrier was collected, want no point", opentelemetry.MetricBudgetAvailable, points(t, m, nil))
		}
	})
}
