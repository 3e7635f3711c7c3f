package grpcbackoff

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// AdaptiveThrottle configures adaptive client-side throttling, as described
// in Google's SRE book ("Handling Overload"): a client that sees its backend
// refuse or fail to answer most of its recent requests stops sending some of
// them, and fails them locally instead, with probability
//
//	max(0, (requests − K·accepts) / (requests + 1))
//
// where requests counts the requests that ended over the last Window (those
// rejected locally included) and accepts those the backend accepted. While the backend accepts at least 1/K of the requests nothing is
// rejected; past that, the client sends about K times what the backend
// accepts, so that it keeps learning when the backend comes back.
//
// Which outcomes are accepted: any answer the backend chose to send, OK or
// an application error (NOT_FOUND, INVALID_ARGUMENT, INTERNAL, ...). Not
// accepted: UNAVAILABLE and RESOURCE_EXHAUSTED (the backend, or the
// transport, refused the request) and an attempt ended by a deadline before
// any answer, whichever deadline it was (the caller's, a service config's
// timeout, an attempt's own timeout), even from a backend merely slower
// than the deadline, as the SRE book's client counts it: no answer came in
// time. An attempt the caller canceled is not counted at all: the backend
// refused nothing. A request rejected locally is counted as a request and
// never as accepted.
type AdaptiveThrottle struct {
	// K is the multiplier of accepts: the client sends up to K times as many
	// requests as the backend accepts. It must be a finite number ≥ 1;
	// lower is more aggressive. Default 2.
	K float64
	// Window is how far back requests and accepts are counted, in 120
	// buckets of Window/120 each. It must be at least 1 s. Default 2 min.
	Window time.Duration
}

// DefaultAdaptiveThrottle returns the SRE book's setting: K 2 over 2 minutes.
func DefaultAdaptiveThrottle() AdaptiveThrottle {
	return AdaptiveThrottle{K: 2, Window: 2 * time.Minute}
}

// Validate reports every field that makes a unusable, each with its value.
func (a AdaptiveThrottle) Validate() error {
	var errs []error
	if !(a.K >= 1) || math.IsInf(a.K, 0) {
		errs = append(errs, fmt.Errorf("grpcbackoff: AdaptiveThrottle.K (%v) must be a finite number ≥ 1", a.K))
	}
	if a.Window < time.Second {
		errs = append(errs, fmt.Errorf("grpcbackoff: AdaptiveThrottle.Window (%v) must be at least 1s", a.Window))
	}
	return errors.Join(errs...)
}
