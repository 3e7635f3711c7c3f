package codes_test

import (
	"fmt"
	"net/http"
	"slices"

	"google.golang.org/grpc/codes"

	httpcodes "github.com/platformkit/grpcbackoff/codes"
)

// Google's guidance says to retry HTTP 5xx and 429 with exponential backoff.
// This shows which gRPC codes that means, and which of them this library
// retries by default.
func Example_retry5xxAnd429() {
	retriedByDefault := []codes.Code{codes.Unavailable, codes.ResourceExhausted}

	for _, c := range httpcodes.ForHTTPStatuses(httpcodes.Class5xx, http.StatusTooManyRequests) {
		fmt.Printf("%-17v %d  default retry: %t\n", c, httpcodes.ToHTTP(c), slices.Contains(retriedByDefault, c))
	}
	// Output:
	// Unknown           500  default retry: false
	// DeadlineExceeded  504  default retry: false
	// ResourceExhausted 429  default retry: true
	// Unimplemented     501  default retry: false
	// Internal          500  default retry: false
	// Unavailable       503  default retry: true
	// DataLoss          500  default retry: false
}

func ExampleForHTTPStatuses() {
	fmt.Println(httpcodes.ForHTTPStatuses(http.StatusInternalServerError))
	fmt.Println(httpcodes.ForHTTPStatuses(http.StatusBadRequest, http.StatusConflict))
	fmt.Println(httpcodes.ForHTTPStatuses(http.StatusServiceUnavailable, http.StatusGatewayTimeout))
	// Google APIs never map a code to 502, so nothing matches.
	fmt.Println(httpcodes.ForHTTPStatuses(http.StatusBadGateway))
	// Output:
	// [Unknown Internal DataLoss]
	// [InvalidArgument AlreadyExists FailedPrecondition Aborted OutOfRange]
	// [DeadlineExceeded Unavailable]
	// []
}

func ExampleToHTTP() {
	for _, c := range []codes.Code{codes.OK, codes.Canceled, codes.NotFound, codes.ResourceExhausted, codes.Unavailable, codes.Code(42)} {
		fmt.Println(c, httpcodes.ToHTTP(c))
	}
	// Output:
	// OK 200
	// Canceled 499
	// NotFound 404
	// ResourceExhausted 429
	// Unavailable 503
	// Code(42) 500
}

func ExampleFromHTTP() {
	for _, s := range []int{200, 204, 302, 409, 412, 418, 429, 499, 500, 502, 503, 0} {
		fmt.Println(s, httpcodes.FromHTTP(s))
	}
	// Output:
	// 200 OK
	// 204 OK
	// 302 Unknown
	// 409 Aborted
	// 412 FailedPrecondition
	// 418 FailedPrecondition
	// 429 ResourceExhausted
	// 499 Canceled
	// 500 Internal
	// 502 Internal
	// 503 Unavailable
	// 0 Unknown
}

// The same HTTP status can mean different gRPC codes: FromHTTP gives what a
// Google API means by it, FromTransportHTTP gives what a grpc-go client
// reports when a proxy answers with it instead of the gRPC server.
func ExampleFromTransportHTTP() {
	fmt.Println("HTTP  Google API         gRPC client")
	for _, s := range []int{200, 400, 404, 429, 500, 502, 503, 504} {
		fmt.Printf("%d   %-17v  %v\n", s, httpcodes.FromHTTP(s), httpcodes.FromTransportHTTP(s))
	}
	// Output:
	// HTTP  Google API         gRPC client
	// 200   OK                 Unknown
	// 400   InvalidArgument    Internal
	// 404   NotFound           Unimplemented
	// 429   ResourceExhausted  Unavailable
	// 500   Internal           Unknown
	// 502   Internal           Unavailable
	// 503   Unavailable        Unavailable
	// 504   DeadlineExceeded   Unavailable
}
