package opentelemetry_test

import (
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
	"github.com/platformkit/grpcbackoff/opentelemetry"
)

// fleetBudget is a shared budget that reports fixed counters.
type fleetBudget struct{ leases, fallbacks int64 }

func (fleetBudget) Started()                    {}
func (fleetBudget) Succeeded()                  {}
func (fleetBudget) Allow(time.Time) bool        { return true }
func (fleetBudget) AllowLongRun(time.Time) bool { return true }
func (b fleetBudget) State(time.Time) interceptor.SharedBudgetState {
	return interceptor.SharedBudgetState{Name: "backend", Retries: 4, Joined: true, FleetSize: 9, Leases: b.leases, Fallbacks: b.fallbacks}
}

// TestFleetCounters: the leases and fallbacks of a fleet-wide budget
// (WithSharedBudget), read through TargetState.Shared, counted once per
// budget however many Retriers share it; nothing without one.
func TestFleetCounters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, mp := newReader()
		rec := newRecorder(t, opentelemetry.Options{MeterProvider: mp})
		shared := interceptor.WithSharedBudget(func(string, grpcbackoff.Throttle) interceptor.SharedBudget {
			return fleetBudget{leases: 12, fallbacks: 2}
		})
		a := interceptor.Unary(bufconntest.Exact(), rec.Option(), shared)
		b := interceptor.Unary(bufconntest.Exact(), rec.Option(), shared)
		own := interceptor.Unary(bufconntest.Exact(), rec.Option())
		for _, ic := range []grpc.UnaryClientInterceptor{a, b, own} {
			call(t.Context(), ic, &bufconntest.Invoker{})
		}
		got := collect(t, reader)
		check(t, got, opentelemetry.MetricFleetLeases, nil, map[string]string{"grpc.target=": "12"})
		check(t, got, opentelemetry.MetricFleetFallbacks, nil, map[string]string{"grpc.target=": "2"})
	})
}
