// Package settings is what a Retrier's options say of each method: its
// retry Policy, its Hedging, or no retry, and a service config's timeout,
// by method, by service and by default (Table), resolved for one method
// without allocating (Resolve). It holds validated copies (Policy,
// Hedging), so that nothing a caller changes afterwards reaches a call. In
// the engine's layers it sits below the plan of a call (internal/loop),
// which reads it once per call, and below what is known of a method's
// safety (internal/safety), which reads what a service config stated.
package settings

import (
	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
)

// Policy is a validated grpcbackoff.Policy with its own copy of Codes.
type Policy struct {
	grpcbackoff.Policy
}

// Compile returns p validated, with its own copy of Codes, or p.Validate's
// error.
func Compile(p grpcbackoff.Policy) (Policy, error) {
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	c := Policy{Policy: p}
	c.Codes = append([]codes.Code(nil), p.Codes...) // the caller keeps its slice
	return c, nil
}
