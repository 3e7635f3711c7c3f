package serviceconfig

import (
	"testing"
	"time"
)

// FuzzParseServiceConfig checks that any input either parses into policies
// that Validate accepts, or fails with an error; never a panic.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"methodConfig":[{"name":[{"service":"pkg.S"}],"retryPolicy":{"maxAttempts":4,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}],"retryThrottling":{"maxTokens":10,"tokenRatio":0.1}}`))
	f.Add([]byte(`{"methodConfig":[{"name":[{}]}]}`))
	f.Add([]byte(`{"methodConfig":[{"name":[{"service":"a","method":"b"}],"retryPolicy":{"maxAttempts":2,"initialBackoff":"1e9s","maxBackoff":"-1s","backoffMultiplier":1e308,"retryableStatusCodes":[14,17,"OK"]}}]}`))
	f.Add([]byte(`{"methodConfig":[{"name":[{"service":"a"}],"hedgingPolicy":{"maxAttempts":3,"hedgingDelay":"0.01s","nonFatalStatusCodes":["UNAVAILABLE",4]}}]}`))
	f.Add([]byte(`[`))
	f.Add([]byte(`{"retryThrottling":{"maxTokens":1000,"tokenRatio":0.001}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		sc, err := Parse(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error with no message")
			}
			return
		}
		for i, m := range sc.Methods {
			if m.Hedging != nil {
				if err := m.Hedging.Validate(); err != nil {
					t.Fatalf("Methods[%d].Hedging from %q does not validate: %v", i, data, err)
				}
			}
			if m.Policy == nil {
				continue
			}
			if err := m.Policy.Validate(); err != nil {
				t.Fatalf("Methods[%d].Policy from %q does not validate: %v", i, data, err)
			}
			// Max caps the delay before JitterFactor, as grpc-go's maxBackoff
			// does: a delay may exceed Max by that factor.
			bound := time.Duration(float64(m.Policy.Max) * (1 + m.Policy.JitterFactor))
			if d := m.Policy.Backoff(3); d <= 0 || d > bound {
				t.Fatalf("Methods[%d].Policy.Backoff(3) = %v, want it in (0, %v]", i, d, bound)
			}
		}
		if sc.Throttle != nil {
			if err := sc.Throttle.Validate(); err != nil {
				t.Fatalf("Throttle from %q does not validate: %v", data, err)
			}
		}
	})
}
