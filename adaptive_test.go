package grpcbackoff_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/platformkit/grpcbackoff"
)

func TestAdaptiveThrottleValidate(t *testing.T) {
	tests := []struct {
		name string
		a    grpcbackoff.AdaptiveThrottle
		want []string
	}{
		{"default", grpcbackoff.DefaultAdaptiveThrottle(), nil},
		{"least", grpcbackoff.AdaptiveThrottle{K: 1, Window: time.Second}, nil},
		{"zero", grpcbackoff.AdaptiveThrottle{}, []string{
			"AdaptiveThrottle.K (0) must be a finite number ≥ 1",
			"AdaptiveThrottle.Window (0s) must be at least 1s"}},
		{"K below 1", grpcbackoff.AdaptiveThrottle{K: 0.5, Window: time.Minute}, []string{"AdaptiveThrottle.K (0.5) must be a finite number ≥ 1"}},
		{"NaN K", grpcbackoff.AdaptiveThrottle{K: math.NaN(), Window: time.Minute}, []string{"AdaptiveThrottle.K (NaN) must be a finite number ≥ 1"}},
		{"+Inf K", grpcbackoff.AdaptiveThrottle{K: math.Inf(1), Window: time.Minute}, []string{"AdaptiveThrottle.K (+Inf) must be a finite number ≥ 1"}},
		{"short Window", grpcbackoff.AdaptiveThrottle{K: 2, Window: 999 * time.Millisecond}, []string{"AdaptiveThrottle.Window (999ms) must be at least 1s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.a.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want errors naming %q", tt.want)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("Validate() = %q, want %d errors", err, len(tt.want))
			}
			for i, w := range tt.want {
				if lines[i] != "grpcbackoff: "+w {
					t.Errorf("error %d = %q, want %q", i, lines[i], "grpcbackoff: "+w)
				}
			}
		})
	}
}
