package grpcbackoff_test

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/platformkit/grpcbackoff"
)

func ExampleDefaultPolicy() {
	p := grpcbackoff.DefaultPolicy()
	fmt.Println("Initial:", p.Initial)
	fmt.Println("Multiplier:", p.Multiplier)
	fmt.Println("Max:", p.Max)
	fmt.Println("Jitter:", p.Jitter)
	fmt.Println("MaxAttempts:", p.MaxAttempts)
	fmt.Println("Codes:", p.Codes)
	fmt.Println("Validate:", p.Validate())

	// A Policy is a plain value: change what differs from the default.
	p.MaxAttempts = 3
	p.Codes = append(p.Codes, codes.Aborted)
	fmt.Println("changed:", p.MaxAttempts, p.Codes)
	fmt.Println("default still:", grpcbackoff.DefaultPolicy().MaxAttempts, grpcbackoff.DefaultPolicy().Codes)
	// Output:
	// Initial: 1s
	// Multiplier: 2
	// Max: 32s
	// Jitter: 1s
	// MaxAttempts: 8
	// Codes: [Unavailable ResourceExhausted]
	// Validate: <nil>
	// changed: 3 [Unavailable ResourceExhausted Aborted]
	// default still: 8 [Unavailable ResourceExhausted]
}

func ExamplePolicy_Backoff() {
	p := grpcbackoff.DefaultPolicy()
	p.Jitter = 0 // Backoff adds up to Jitter at random; turn it off to print the schedule.
	var total time.Duration
	for retry := range p.MaxAttempts - 1 {
		d := p.Backoff(retry)
		total += d
		fmt.Printf("retry %d after %v\n", retry, d)
	}
	fmt.Println("total", total)
	// Output:
	// retry 0 after 1s
	// retry 1 after 2s
	// retry 2 after 4s
	// retry 3 after 8s
	// retry 4 after 16s
	// retry 5 after 32s
	// retry 6 after 32s
	// total 1m35s
}

func ExamplePolicy_Validate() {
	p := grpcbackoff.Policy{
		Initial:     2 * time.Second,
		Multiplier:  0.5,
		Max:         time.Second,
		MaxAttempts: 0,
		Codes:       []codes.Code{codes.OK, codes.Unavailable, codes.Unavailable},
	}
	fmt.Println(p.Validate())
	// Output:
	// grpcbackoff: Multiplier (0.5) must be at least 1
	// grpcbackoff: Max (1s) is less than Initial (2s)
	// grpcbackoff: MaxAttempts (0) must be at least 1
	// grpcbackoff: Codes[0] is OK, which is not an error
	// grpcbackoff: Codes[2] (Unavailable) is listed twice
}

func ExampleServerHint() {
	p := grpcbackoff.DefaultPolicy()
	p.Jitter = 0

	// A server asks for 5 s in a RetryInfo detail, and 2.5 s in the
	// pushback trailer: the longer wins.
	st, _ := status.New(codes.ResourceExhausted, "slow down").WithDetails(
		&errdetails.RetryInfo{RetryDelay: durationpb.New(5 * time.Second)})
	trailer := metadata.Pairs(grpcbackoff.PushbackKey, "2500")
	h := grpcbackoff.ServerHint(st, trailer)
	fmt.Println(h.Delay, h.Stop)
	fmt.Println(p.RetryDelay(0, h))

	// A hint never shortens the Policy's own delay.
	fmt.Println(p.RetryDelay(3, h))

	// A server that asks not to retry.
	h = grpcbackoff.ServerHint(nil, metadata.Pairs(grpcbackoff.PushbackKey, "-1"))
	fmt.Println(h.Delay, h.Stop)
	fmt.Println(p.RetryDelay(0, h))
	// Output:
	// 5s false
	// 5s true
	// 8s true
	// 0s true
	// 0s false
}

func ExampleError() {
	st, _ := status.New(codes.Unavailable, "backend down").WithDetails(
		&errdetails.ErrorInfo{Reason: "BACKEND_DOWN", Domain: "example.com"})
	var err error = &grpcbackoff.Error{Err: st.Err(), Attempts: 3, Elapsed: 7 * time.Second, Reason: grpcbackoff.ReasonExhausted}

	fmt.Println(err)
	fmt.Println(status.Code(err))
	s, _ := status.FromError(err)
	fmt.Println(s.Details()[0].(*errdetails.ErrorInfo).GetReason())
	var e *grpcbackoff.Error
	if errors.As(err, &e) {
		fmt.Println(e.Attempts, e.Reason)
	}
	// Output:
	// rpc error: code = Unavailable desc = backend down (grpcbackoff: 3 attempts over 7s: attempts exhausted)
	// Unavailable
	// BACKEND_DOWN
	// 3 attempts exhausted
}
