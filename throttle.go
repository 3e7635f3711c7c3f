package grpcbackoff

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Throttle is a retry budget: it lets the calls that share it retry as much
// as the traffic can bear. A retry the budget cannot pay for is not sent, and
// the call returns its last error at once.
//
// It has two parts, and a retry is paid from the reserve first:
//
//   - a reserve sized to the recent traffic, for short outages and restarts:
//     Reserve retries per successful call of the last Window (each earning
//     lasts a Window; the oldest are spent first), plus MinReserve retries
//     per Window while calls succeed (or the budget is younger than the
//     Window);
//   - a long-run allowance, for a quiet client and for long outages: Ratio
//     retries per call started plus PerSecond retries per second, with up to
//     Burst saved up (an idle client starts with Burst, so a lone call can
//     use every attempt of its Policy).
//
// Only successes feed the reserve, so it lasts one Window into a total
// outage: during a total outage of T seconds in which calls start at rate R,
// at most
//
//	MinReserve + Reserve·S + Burst + (Ratio·R + PerSecond)·T
//
// retries are sent, S being the calls that succeeded in the Window before
// it. With DefaultThrottle and 100 successful calls per second before the
// outage, that is 100 + 200 + 10 + (0.1·R + 0.5)·T. Meanwhile a restart or
// an outage of a couple of seconds, which the reserve covers, costs no call.
//
// The reserve pays only for retries of attempts that failed with an answer
// (a status from the server or the transport, as in a restart). The retry of
// an attempt cut by its Policy.AttemptTimeout, whose work a hung or
// overloaded server may still be doing, draws on the long-run allowance
// alone, so that the budget never piles retries onto a server that is
// already behind.
//
// A budget, rather than gRFC A6's success/failure token bucket, because it
// bounds what matters in a storm (retries as a share of the traffic) whatever
// the failure rate. With Reserve, MinReserve and Window zero, a Throttle is
// the long-run allowance alone.
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
	// MinReserve is a number of retries the reserve adds, per Window, while a
	// call succeeded in the last Window, and during the first Window of a
	// budget; it must not be negative. Default 100, so that a restart is
	// retried whole even at low traffic or on a new client.
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
