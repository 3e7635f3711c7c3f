package gaxretry_test

import (
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/gaxretry"
)

// What a Retryer decides after each failed attempt of one call.
func ExampleRetryer() {
	p := grpcbackoff.DefaultPolicy()
	p.Jitter = 0 // so that the delays print the same every time
	p.MaxAttempts = 4
	r, err := gaxretry.Retryer(p)
	if err != nil {
		panic(err)
	}
	slowDown := withRetryInfo(codes.ResourceExhausted, 5*time.Second)
	for _, err := range []error{
		status.Error(codes.Unavailable, "down"),
		slowDown, // the server's RetryInfo wins over the 2 s of the Policy
		status.Error(codes.Unavailable, "down"),
		status.Error(codes.Unavailable, "down"), // attempt 4 of 4
	} {
		fmt.Println(r.Retry(err))
	}

	r, _ = gaxretry.Retryer(p)
	fmt.Println(r.Retry(status.Error(codes.NotFound, "no such instance")))
	// Output:
	// 1s true
	// 5s true
	// 4s true
	// 0s false
	// 0s false
}
