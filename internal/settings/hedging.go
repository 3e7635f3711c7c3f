package settings

import (
	"math"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
)

// A hedging policy (WithHedging, or a service config's hedgingPolicy), as the
// Retrier keeps it; the hedged call that carries it out is internal/hedge.

// Hedging is a validated grpcbackoff.Hedging with its non-fatal codes as a
// bit set and, for an adaptive delay, a latency tracker per method.
type Hedging struct {
	grpcbackoff.Hedging
	Config   bool // from a service config: its MaxAttempts bounds every attempt of the call, as in grpc-go
	nonFatal uint32
	minCount uint64   // calls the window must hold before the quantile is used
	trackers sync.Map // method name -> *latencyTracker
}

// CompileHedging returns h validated, with its own copy of NonFatalCodes, or
// h.Validate's error.
func CompileHedging(h grpcbackoff.Hedging) (*Hedging, error) {
	if err := h.Validate(); err != nil {
		return nil, err
	}
	hp := &Hedging{Hedging: h}
	hp.NonFatalCodes = slices.Clone(h.NonFatalCodes) // the caller keeps its slice
	for _, c := range h.NonFatalCodes {
		hp.nonFatal |= 1 << c
	}
	if h.Adaptive() {
		hp.minCount = uint64(math.Ceil(10 / (1 - h.Quantile)))
	}
	return hp, nil
}

// NonFatal reports whether c is one of the NonFatalCodes: the attempts in
// flight go on after it.
func (hp *Hedging) NonFatal(c codes.Code) bool {
	return c < 32 && hp.nonFatal&(1<<c) != 0
}

func (hp *Hedging) tracker(method string) *latencyTracker {
	if t, ok := hp.trackers.Load(method); ok {
		return t.(*latencyTracker)
	}
	t, _ := hp.trackers.LoadOrStore(method, newLatencyTracker(hp.Window))
	return t.(*latencyTracker)
}

// DelayFor returns the hedging delay of a call of method starting at now:
// Delay, or with an adaptive delay the Quantile of the method's recent
// latencies, within [MinDelay, MaxDelay], once the window holds enough.
func (hp *Hedging) DelayFor(method string, now time.Time) time.Duration {
	if !hp.Adaptive() {
		return hp.Delay
	}
	if q, ok := hp.tracker(method).quantile(now, hp.Quantile, hp.minCount); ok {
		return min(max(q, hp.MinDelay), hp.MaxDelay)
	}
	return hp.Delay
}

// Record counts, for an adaptive delay, a call of method that succeeded
// after d, ending at now.
func (hp *Hedging) Record(method string, now time.Time, d time.Duration) {
	hp.tracker(method).record(now, d)
}
