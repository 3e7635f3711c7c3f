package grpcbackoff_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
)

func TestHedgingValidate(t *testing.T) {
	good := []grpcbackoff.Hedging{
		{MaxAttempts: 2},
		{MaxAttempts: 5, Delay: 10 * time.Millisecond, NonFatalCodes: []codes.Code{codes.Unavailable}},
		{MaxAttempts: 3, Quantile: 0.95, MinDelay: 0, MaxDelay: time.Second, Window: time.Millisecond},
	}
	for _, h := range good {
		if err := h.Validate(); err != nil {
			t.Errorf("%+v: %v", h, err)
		}
	}
	cases := []struct {
		h    grpcbackoff.Hedging
		want []string
	}{
		{grpcbackoff.Hedging{}, []string{"grpcbackoff: Hedging.MaxAttempts (0) must be at least 2"}},
		{grpcbackoff.Hedging{MaxAttempts: 1, Delay: -time.Second, NonFatalCodes: []codes.Code{codes.OK, 17, codes.Unavailable, codes.Unavailable}},
			[]string{"MaxAttempts (1)", "Delay (-1s) must not be negative", "NonFatalCodes[0] is OK", "NonFatalCodes[1] (17) is not a gRPC status code", "NonFatalCodes[3] (Unavailable) is listed twice"}},
		{grpcbackoff.Hedging{MaxAttempts: 2, Quantile: 1, MaxDelay: time.Second, Window: time.Second}, []string{"Quantile (1) must be 0 (a fixed delay) or in (0, 1)"}},
		{grpcbackoff.Hedging{MaxAttempts: 2, Quantile: math.NaN(), MaxDelay: time.Second, Window: time.Second}, []string{"Quantile (NaN)"}},
		{grpcbackoff.Hedging{MaxAttempts: 2, Quantile: -0.5, MaxDelay: time.Second, Window: time.Second}, []string{"Quantile (-0.5)"}},
		{grpcbackoff.Hedging{MaxAttempts: 2, Quantile: 0.9}, []string{"MaxDelay (0s) must be positive", "Window (0s) must be at least 1ms"}},
		{grpcbackoff.Hedging{MaxAttempts: 2, Quantile: 0.9, MinDelay: -1, MaxDelay: time.Second, Window: time.Second}, []string{"MinDelay (-1ns) must not be negative"}},
		{grpcbackoff.Hedging{MaxAttempts: 2, Quantile: 0.9, MinDelay: 2 * time.Second, MaxDelay: time.Second, Window: time.Second}, []string{"MaxDelay (1s) is less than MinDelay (2s)"}},
	}
	for _, tc := range cases {
		err := tc.h.Validate()
		if err == nil {
			t.Errorf("%+v: Validate() = nil", tc.h)
			continue
		}
		if n := strings.Count(err.Error(), "\n") + 1; n != len(tc.want) {
			t.Errorf("%+v: %d errors, want %d: %v", tc.h, n, len(tc.want), err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: %q does not say %q", tc.h, err, w)
			}
		}
	}
}
