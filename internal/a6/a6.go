// Package a6 maps a gRFC A6 retryPolicy onto a grpcbackoff.Policy: the one
// mapping that serviceconfig.Parse applies to a document and that
// internal/connpolicy applies to the policy grpc-go parsed from a
// connection's resolver, so that the same policy retries the same way
// whichever way it reached the library.
package a6

import (
	"time"

	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
)

// Policy returns the Policy that waits as grpc-go v1.85's retry waits
// under a valid retryPolicy: before retry n, grpc-go waits b·U[0.8, 1.2]
// with b = min(initialBackoff·backoffMultiplier^n, maxBackoff). So Initial
// is min(initial, maxBackoff), Multiplier mult, Max maxBackoff, Jitter 0,
// JitterFactor 0.2, MaxAttempts attempts and Codes cs (used as given, not
// copied). The result is not validated: a multiplier below 1, which grpc-go
// takes, makes an invalid Policy.
func Policy(attempts int, initial, maxBackoff time.Duration, mult float64, cs []codes.Code) grpcbackoff.Policy {
	return grpcbackoff.Policy{
		Initial:      min(initial, maxBackoff),
		Multiplier:   mult,
		Max:          maxBackoff,
		JitterFactor: JitterFactor,
		MaxAttempts:  attempts,
		Codes:        cs,
	}
}

// JitterFactor is the multiplicative jitter of grpc-go's retry: 0.8 to 1.2
// times the nominal delay.
const JitterFactor = 0.2
