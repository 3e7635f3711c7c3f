package interceptor_test

import (
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
)

// Hedge a read after the latency that 95% of its recent calls beat, between
// 5 ms and 1 s (20 ms while the last minute holds fewer than 200 calls), and
// retry the other methods with the default Policy.
func ExampleWithHedging() {
	r, err := interceptor.New(grpcbackoff.DefaultPolicy(),
		interceptor.WithHedging("/google.cloud.redis.v1.CloudRedis/GetInstance", grpcbackoff.Hedging{
			MaxAttempts:   2,
			Delay:         20 * time.Millisecond,
			NonFatalCodes: []codes.Code{codes.Unavailable},
			Quantile:      0.95,
			MinDelay:      5 * time.Millisecond,
			MaxDelay:      time.Second,
			Window:        time.Minute,
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = r.DialOptions() // grpc.NewClient(target, append(r.DialOptions(), creds)...)

	// A Hedging is checked like a Policy: every bad field at once.
	_, err = interceptor.New(grpcbackoff.DefaultPolicy(),
		interceptor.WithHedging("/pkg.Svc/Get", grpcbackoff.Hedging{MaxAttempts: 1, Quantile: 0.95}))
	fmt.Println(err)
	// Output:
	// interceptor: opts[0]: WithHedging("/pkg.Svc/Get"): grpcbackoff: Hedging.MaxAttempts (1) must be at least 2
	// interceptor: opts[0]: grpcbackoff: Hedging.MaxDelay (0s) must be positive with Quantile set
	// interceptor: opts[0]: grpcbackoff: Hedging.Window (0s) must be at least 1ms with Quantile set
}
