// Package sim simulates the retry-storm experiment of "Exponential Backoff,
// or how not to knock the server down": a server whose latency grows with
// its concurrency (Model) is paused, and clients that retry as a Strategy
// says keep it down or let it recover. Strategies are carried out by the
// library's own code; nothing of it is copied.
//
// Two engines run the same Strategies and report the same Samples and
// Results: RunStorm in real time over gRPC, with the real interceptor
// (scaled by Storm.Scale, or free inside a testing/synctest bubble), and
// RunFleet on a virtual clock with the library's retry decision, fast enough
// for 100 000 clients and grids of loads and outages. Client and Recorder
// are the real-time client loop, also run against a real server process by
// cmd/fleetsim -real.
package sim

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// LatencyRule says when the server decides how long a request takes.
type LatencyRule int

const (
	// AtStart fixes a request's latency when the server starts it, from the
	// concurrency at that moment, counting the request itself.
	AtStart LatencyRule = iota
	// Current ends a request once its age reaches the latency for the
	// current concurrency, as the original experiment's server does (its
	// handler rechecks every 50 ms): when concurrency falls, every request
	// old enough ends at once, and when it grows, every request waits longer.
	Current
)

func (r LatencyRule) String() string {
	switch r {
	case AtStart:
		return "start"
	case Current:
		return "current"
	}
	return fmt.Sprintf("LatencyRule(%d)", int(r))
}

// ParseLatencyRule returns the rule named by s: "start" or "current".
func ParseLatencyRule(s string) (LatencyRule, error) {
	switch s {
	case "start":
		return AtStart, nil
	case "current":
		return Current, nil
	}
	return 0, fmt.Errorf("sim: latency rule %q is neither start nor current", s)
}

// Model is the server of the experiment: it answers in BaseLatency while at
// most Limit requests are in flight, and in
//
//	BaseLatency · Growth^((concurrency − Limit)/K)
//
// above that. The work of a request goes on after its client gave up, so
// requests abandoned by their clients still count.
type Model struct {
	// Limit is the concurrency up to which the server answers in
	// BaseLatency. Default 30.
	Limit int
	// BaseLatency is the latency at or under Limit. Default 100 ms.
	BaseLatency time.Duration
	// Growth is the factor by which the latency grows for every K requests
	// above Limit. Default 1.05.
	Growth float64
	// K is the number of requests above Limit that multiply the latency by
	// Growth. Default 15.
	K float64
	// Rule says when a request's latency is decided. Default AtStart.
	Rule LatencyRule
}

// DefaultModel returns the server of the original experiment.
func DefaultModel() Model {
	return Model{Limit: 30, BaseLatency: 100 * time.Millisecond, Growth: 1.05, K: 15, Rule: AtStart}
}

// maxLatency bounds Latency so that it never overflows: a request that would
// take longer simply lasts past the end of any run.
const maxLatency = 1000 * time.Hour

// Latency returns the model latency at the given concurrency, the request
// itself included. It is never more than 1000 hours.
func (m Model) Latency(concurrency int) time.Duration {
	if concurrency <= m.Limit {
		return m.BaseLatency
	}
	f := float64(m.BaseLatency) * math.Pow(m.Growth, float64(concurrency-m.Limit)/m.K)
	if !(f < float64(maxLatency)) {
		return maxLatency
	}
	return time.Duration(f)
}

// Validate reports every field of m that makes it unusable.
func (m Model) Validate() error {
	var errs []error
	if m.Limit < 0 {
		errs = append(errs, fmt.Errorf("sim: limit (%d) must not be negative", m.Limit))
	}
	if m.BaseLatency <= 0 {
		errs = append(errs, fmt.Errorf("sim: base latency (%v) must be positive", m.BaseLatency))
	}
	if !(m.Growth >= 1) || math.IsInf(m.Growth, 0) {
		errs = append(errs, fmt.Errorf("sim: growth (%v) must be a finite number ≥ 1", m.Growth))
	}
	if !(m.K > 0) || math.IsInf(m.K, 0) {
		errs = append(errs, fmt.Errorf("sim: k (%v) must be a finite positive number", m.K))
	}
	if m.Rule != AtStart && m.Rule != Current {
		errs = append(errs, fmt.Errorf("sim: unknown latency rule %v", m.Rule))
	}
	return errors.Join(errs...)
}
