package grpcbackoff

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Throttle is a retry budget: it lets the calls that share it retry as much
// as the traffic can bear. A retry the budget cannot pay for is not sent, and
// the call returns its last error at once (ReasonThrottled).
//
// A retry is paid from the reserve first, then from the long-run allowance:
//
//   - the reserve, for short outages and restarts: Reserve retries per call
//     that succeeded in the last Window, plus a floor of MinReserve, paid at
//     most once per Window and once since the last success (a quiet spell
//     keeps it whole; an outage, in which nothing succeeds, pays it once);
//   - the long-run allowance, for quiet clients and long outages: Ratio
//     retries per call started plus PerSecond per second, up to Burst saved
//     (a new budget starts with Burst).
//
// The retry of an attempt cut by its Policy.AttemptTimeout (and a hedge) is
// paid from the long-run allowance alone: the server may still be working on
// it; so is the retry of a call marked interceptor.Sheddable, so that the
// reserve is kept for the others. A retry costs one, a retry after
// RESOURCE_EXHAUSTED three (the server says it is past what it serves),
// or Burst if Burst is smaller (the most the allowance can hold); a retry
// whose attempt succeeds costs nothing, and neither does one paid and never
// sent: it is given back once the server served it (a stream: once it ended
// well; a hedge never). During a total outage of T seconds
// with calls starting at rate R, at most MinReserve + Reserve·S + Burst +
// (Ratio·R + PerSecond)·T retries are sent, S being the calls that
// succeeded in the Window before it; as nothing is given back before a
// retry succeeds, the same bound holds, in any outage, of the retries that
// fail and of those in flight at any moment. With
// Reserve, MinReserve and Window zero, a Throttle is the long-run allowance
// alone. The zero Throttle is invalid; start from DefaultThrottle.
type Throttle struct {
	// Ratio is the number of retries each call started earns, between 0
	// and 1 (a share of the traffic). Default 0.1.
	Ratio float64
	// PerSecond is the number of retries earned per second whatever the
	// traffic, so that a quiet client can still retry. It must not be
	// negative. Default 0.5.
	PerSecond float64
	// Burst is the largest number of retries of the long-run allowance that
	// can be saved up, and the number a new budget starts with. It must be
	// at least 1. Default 10.
	Burst int

	// Reserve is the number of retries each successful call earns for the
	// Window, between 0 and 1; 0 turns it off. Default 0.2.
	Reserve float64
	// MinReserve is the reserve's floor: retries it pays whatever the
	// traffic, at most MinReserve per Window and MinReserve since the last
	// success; it must not be negative. Default 100, so that a restart is
	// retried whole even at low traffic, after a quiet spell, or on a new
	// client.
	MinReserve int
	// Window is how long the reserve keeps a success's earnings and a
	// retry's cost (between 9/10 of it and all of it: the window moves in
	// tenths). It must be positive when Reserve or MinReserve is set.
	// Default 10 s.
	Window time.Duration
}

// DefaultThrottle returns the throttle the interceptors use unless told
// otherwise: a reserve of 20% of the calls that succeeded in the last 10 s
// plus 100 retries per 10 s (Finagle's retry budget, but earned by
// successes), then 10% of the calls plus one retry every 2 s, with 10 saved
// up.
func DefaultThrottle() Throttle {
	return Throttle{Ratio: 0.1, PerSecond: 0.5, Burst: 10, Reserve: 0.2, MinReserve: 100, Window: 10 * time.Second}
}

// Validate reports every field that makes t unusable, each with its value.
func (t Throttle) Validate() error {
	var errs []error
	if !(t.Ratio >= 0 && t.Ratio <= 1) {
		errs = append(errs, fmt.Errorf("grpcbackoff: Throttle.Ratio (%v) must be between 0 and 1", t.Ratio))
	}
	if !(t.PerSecond >= 0) || math.IsInf(t.PerSecond, 0) {
		errs = append(errs, fmt.Errorf("grpcbackoff: Throttle.PerSecond (%v) must be a finite number ≥ 0", t.PerSecond))
	}
	if t.Burst < 1 {
		errs = append(errs, fmt.Errorf("grpcbackoff: Throttle.Burst (%d) must be at least 1", t.Burst))
	}
	if !(t.Reserve >= 0 && t.Reserve <= 1) {
		errs = append(errs, fmt.Errorf("grpcbackoff: Throttle.Reserve (%v) must be between 0 and 1", t.Reserve))
	}
	if t.MinReserve < 0 {
		errs = append(errs, fmt.Errorf("grpcbackoff: Throttle.MinReserve (%d) must not be negative", t.MinReserve))
	}
	switch {
	case t.Window < 0:
		errs = append(errs, fmt.Errorf("grpcbackoff: Throttle.Window (%v) must not be negative", t.Window))
	case t.Window == 0 && (t.Reserve > 0 || t.MinReserve > 0):
		errs = append(errs, fmt.Errorf("grpcbackoff: Throttle.Window (0s) must be positive with a reserve (Reserve %v, MinReserve %d)", t.Reserve, t.MinReserve))
	}
	return errors.Join(errs...)
}
