package grpcbackoff

import (
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc/codes"
)

// Hedging says how a unary call is hedged (gRFC A6): instead of waiting for
// an attempt to fail, the client sends the same request again after Delay if
// no response has come, up to MaxAttempts attempts in flight at once, and
// keeps the first response. Hedging cuts the latency tail that a few slow
// servers cause, at the cost of extra requests: use it only for methods that
// are safe to send twice (reads, idempotent writes).
//
// A Hedging is a plain value; the interceptor package carries it out (see
// interceptor.WithHedging). There is no usable zero value: MaxAttempts must
// be set.
//
// The delay is either fixed (Delay, Quantile 0) or adaptive: with Quantile
// set, each call waits the method's recent latency at that quantile (for
// example 0.95, the latency that 95% of recent calls beat), clamped to
// [MinDelay, MaxDelay], so that only the slowest calls are hedged and the
// delay follows the server as it speeds up or slows down.
type Hedging struct {
	// MaxAttempts is the number of attempts, the first one included, that
	// may be in flight for one call. It must be at least 2. It is used as
	// given (grpc-go caps it at 5).
	MaxAttempts int

	// Delay is the time between the start of one attempt and the next,
	// while no response has come (hedgingDelay). It must not be negative;
	// 0 sends MaxAttempts attempts at once. With Quantile set, Delay is used
	// until the method has enough recent calls to measure the quantile.
	Delay time.Duration

	// NonFatalCodes are the status codes that do not end a hedged call:
	// after one, the attempts in flight go on. Failures answer to the
	// method's Policy: after a code it retries, the next attempt follows its
	// backoff; after one it does not, no attempt follows. Any other code
	// ends the call, like a response, and cancels the attempts in flight.
	// It may be empty; it must not contain OK or a code outside the 17
	// defined by gRPC.
	NonFatalCodes []codes.Code

	// Quantile, when not 0, makes the delay adaptive: each call waits the
	// latency that Quantile of the method's calls of the last Window did not
	// exceed, clamped to [MinDelay, MaxDelay]. It must be 0 or in (0, 1);
	// 0.95 hedges about 5% of the calls when the latency is steady. The
	// latency of a call is measured from its first attempt to its first
	// response, for calls that succeed; the quantile is measured with an
	// error of at most 1/8 (rounded up: the delay errs towards fewer hedges).
	// Until the window holds 10/(1−Quantile) calls (200 for 0.95), Delay is
	// used.
	Quantile float64

	// MinDelay and MaxDelay bound the adaptive delay; they are used only
	// with Quantile set. MinDelay must not be negative, and MaxDelay must be
	// positive and at least MinDelay.
	MinDelay, MaxDelay time.Duration

	// Window is how far back the latencies of an adaptive delay reach; it
	// is used only with Quantile set, and then must be at least 1 ms. The
	// window slides in steps of a quarter of it.
	Window time.Duration
}

// Adaptive reports whether h's delay follows the observed latency
// (Quantile is set).
func (h Hedging) Adaptive() bool { return h.Quantile != 0 }

// Validate reports every field that makes h unusable, all at once, each
// named with its value. It returns nil for a usable Hedging.
func (h Hedging) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("grpcbackoff: Hedging."+format, args...))
	}
	if h.MaxAttempts < 2 {
		bad("MaxAttempts (%d) must be at least 2", h.MaxAttempts)
	}
	if h.Delay < 0 {
		bad("Delay (%v) must not be negative", h.Delay)
	}
	checkCodes("NonFatalCodes", h.NonFatalCodes, bad)
	if math.IsNaN(h.Quantile) || h.Quantile < 0 || h.Quantile >= 1 {
		bad("Quantile (%v) must be 0 (a fixed delay) or in (0, 1)", h.Quantile)
	}
	if h.Adaptive() {
		if h.MinDelay < 0 {
			bad("MinDelay (%v) must not be negative", h.MinDelay)
		}
		if h.MaxDelay <= 0 {
			bad("MaxDelay (%v) must be positive with Quantile set", h.MaxDelay)
		} else if h.MaxDelay < h.MinDelay {
			bad("MaxDelay (%v) is less than MinDelay (%v)", h.MaxDelay, h.MinDelay)
		}
		if h.Window < time.Millisecond {
			bad("Window (%v) must be at least 1ms with Quantile set", h.Window)
		}
	}
	return errors.Join(errs...)
}
