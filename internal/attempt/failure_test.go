package attempt

import (
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestFutile checks which statuses are taken for a message too large for a
// size limit: the wordings of grpc-go (client and server), grpc-core and
// grpc-java, and nothing else.
func TestFutile(t *testing.T) {
	re := codes.ResourceExhausted
	quota, _ := status.New(re, "grpc: received message larger than max (5 vs. 4)").WithDetails(
		&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: "project:p"}}})
	cases := []struct {
		st   *status.Status
		want bool
	}{
		{status.New(re, "trying to send message larger than max (2048 vs. 1024)"), true},
		{status.New(re, "grpc: received message larger than max (2048 vs. 1024)"), true},
		{status.New(re, "grpc: received message larger than max length allowed on current machine (9 vs. 8)"), true},
		{status.New(re, "grpc: message after decompression larger than max (2048 vs. 1024)"), true},
		{status.New(re, "grpc: received message after decompression larger than max 1024"), true},
		{status.New(re, "grpc: message too large (4294967296 bytes)"), true},
		{status.New(re, "Received message larger than max (2048 vs. 1024)"), true},
		{status.New(re, "Sent message larger than max (2048 vs. 1024)"), true},
		{status.New(re, "gRPC message exceeds maximum size 1024: 2048"), true},
		{status.New(re, "Decompressed gRPC message exceeds maximum size 1024"), true},

		{status.New(re, "Quota exceeded for quota metric 'Read requests'"), false},
		{status.New(re, ""), false},
		{quota, false}, // details: a quota error, whatever its words
		{status.New(codes.Unavailable, "trying to send message larger than max (2048 vs. 1024)"), false},
		{status.New(codes.Internal, "grpc: received message larger than max (2048 vs. 1024)"), false},
	}
	for _, tc := range cases {
		if got := Futile(tc.st); got != tc.want {
			t.Errorf("Futile(%v %q, %d details) = %v, want %v", tc.st.Code(), tc.st.Message(), len(tc.st.Details()), got, tc.want)
		}
	}
}
