package grpcbackoff_test

import (
	"math"
	"testing"
	"time"

	"github.com/platformkit/grpcbackoff"
)

func TestDefaultThrottle(t *testing.T) {
	got := grpcbackoff.DefaultThrottle()
	want := grpcbackoff.Throttle{Ratio: 0.1, PerSecond: 0.5, Burst: 10, Reserve: 0.2, MinReserve: 100, Window: 10 * time.Second}
	if got != want {
		t.Errorf("DefaultThrottle() = %+v, want %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("DefaultThrottle().Validate() = %v, want nil", err)
	}
}

func TestThrottleValidate(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	tests := []struct {
		name string
		th   grpcbackoff.Throttle
		want []string
	}{
		{"default", grpcbackoff.DefaultThrottle(), nil},
		{"least", grpcbackoff.Throttle{Ratio: 0, PerSecond: 0, Burst: 1}, nil},
		{"Ratio 1", grpcbackoff.Throttle{Ratio: 1, PerSecond: 1000, Burst: math.MaxInt}, nil},
		{"Reserve 1", grpcbackoff.Throttle{Burst: 1, Reserve: 1, MinReserve: math.MaxInt, Window: 1}, nil},
		{"MinReserve alone", grpcbackoff.Throttle{Burst: 1, MinReserve: 3, Window: time.Second}, nil},
		{"negative Reserve", grpcbackoff.Throttle{Burst: 1, Reserve: -0.2, Window: time.Second}, []string{"Throttle.Reserve (-0.2) must be between 0 and 1"}},
		{"NaN Reserve", grpcbackoff.Throttle{Burst: 1, Reserve: math.NaN(), Window: time.Second}, []string{"Throttle.Reserve (NaN) must be between 0 and 1"}},
		{"negative MinReserve", grpcbackoff.Throttle{Burst: 1, MinReserve: -1, Window: time.Second}, []string{"Throttle.MinReserve (-1) must not be negative"}},
		{"negative Window", grpcbackoff.Throttle{Burst: 1, Window: -time.Second}, []string{"Throttle.Window (-1s) must not be negative"}},
		{"reserve without Window", grpcbackoff.Throttle{Burst: 1, Reserve: 0.2}, []string{"Throttle.Window (0s) must be positive with a reserve (Reserve 0.2, MinReserve 0)"}},

		{"zero Throttle", grpcbackoff.Throttle{}, []string{"Throttle.Burst (0) must be at least 1"}},
		{"negative Ratio", grpcbackoff.Throttle{Ratio: -0.1, Burst: 1}, []string{"Throttle.Ratio (-0.1) must be between 0 and 1"}},
		{"Ratio above 1", grpcbackoff.Throttle{Ratio: 1.5, Burst: 1}, []string{"Throttle.Ratio (1.5) must be between 0 and 1"}},
		{"NaN Ratio", grpcbackoff.Throttle{Ratio: nan, Burst: 1}, []string{"Throttle.Ratio (NaN) must be between 0 and 1"}},
		{"+Inf Ratio", grpcbackoff.Throttle{Ratio: inf, Burst: 1}, []string{"Throttle.Ratio (+Inf) must be between 0 and 1"}},
		{"negative PerSecond", grpcbackoff.Throttle{PerSecond: -1, Burst: 1}, []string{"Throttle.PerSecond (-1) must be a finite number ≥ 0"}},
		{"NaN PerSecond", grpcbackoff.Throttle{PerSecond: nan, Burst: 1}, []string{"Throttle.PerSecond (NaN) must be a finite number ≥ 0"}},
		{"+Inf PerSecond", grpcbackoff.Throttle{PerSecond: inf, Burst: 1}, []string{"Throttle.PerSecond (+Inf) must be a finite number ≥ 0"}},
		{"-Inf PerSecond", grpcbackoff.Throttle{PerSecond: -inf, Burst: 1}, []string{"Throttle.PerSecond (-Inf) must be a finite number ≥ 0"}},
		{"negative Burst", grpcbackoff.Throttle{Ratio: 0.1, Burst: -1}, []string{"Throttle.Burst (-1) must be at least 1"}},
		{"everything wrong", grpcbackoff.Throttle{Ratio: nan, PerSecond: -0.5, Burst: 0}, []string{
			"Throttle.Ratio (NaN) must be between 0 and 1",
			"Throttle.PerSecond (-0.5) must be a finite number ≥ 0",
			"Throttle.Burst (0) must be at least 1",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkJoined(t, "Validate()", tt.th.Validate(), tt.want)
		})
	}
}
