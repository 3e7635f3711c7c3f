package interceptor

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
)

// A hedging policy (WithHedging, or a service config's hedgingPolicy), as the
// Retrier keeps it; the hedged call that carries it out is in hedge.go.

// hedgePolicy is a validated Hedging with its non-fatal codes as a bit set
// and, for an adaptive delay, a latency tracker per method.
type hedgePolicy struct {
	grpcbackoff.Hedging
	config   bool // from a service config: its MaxAttempts bounds every attempt of the call, as in grpc-go
	nonFatal uint32
	minCount uint64   // calls the window must hold before the quantile is used
	trackers sync.Map // method name -> *latencyTracker
}

func compileHedging(h grpcbackoff.Hedging) (*hedgePolicy, error) {
	if err := h.Validate(); err != nil {
		return nil, err
	}
	hp := &hedgePolicy{Hedging: h}
	hp.NonFatalCodes = slices.Clone(h.NonFatalCodes) // the caller keeps its slice
	for _, c := range h.NonFatalCodes {
		hp.nonFatal |= 1 << c
	}
	if h.Adaptive() {
		hp.minCount = uint64(math.Ceil(10 / (1 - h.Quantile)))
	}
	return hp, nil
}

func (hp *hedgePolicy) isNonFatal(c codes.Code) bool {
	return c < 32 && hp.nonFatal&(1<<c) != 0
}

func (hp *hedgePolicy) tracker(method string) *latencyTracker {
	if t, ok := hp.trackers.Load(method); ok {
		return t.(*latencyTracker)
	}
	t, _ := hp.trackers.LoadOrStore(method, newLatencyTracker(hp.Window))
	return t.(*latencyTracker)
}

// delayFor returns the hedging delay of a call of method starting at now.
func (hp *hedgePolicy) delayFor(method string, now time.Time) time.Duration {
	if !hp.Adaptive() {
		return hp.Delay
	}
	if q, ok := hp.tracker(method).quantile(now, hp.Quantile, hp.minCount); ok {
		return min(max(q, hp.MinDelay), hp.MaxDelay)
	}
	return hp.Delay
}

// checkHedging returns an error naming every hedged name known not to be
// safe to send twice. New calls it once every option has been applied.
func (r *Retrier) checkHedging() error {
	var bad []string
	for name, e := range r.entries {
		if e.hedge != nil {
			r.hedged = true
			if r.unsafe(name) {
				bad = append(bad, fmt.Sprintf("%q", name))
			}
		}
	}
	r.hedged = r.hedged || r.base.hedge != nil
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	return fmt.Errorf("interceptor: hedging is configured for %s, known not to be safe to send twice (not idempotent): use a retry policy there",
		strings.Join(bad, ", "))
}
