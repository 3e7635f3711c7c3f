package sim

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Fleet is one experiment of RunFleet, the discrete-event engine: the
// experiment of RunStorm scaled to a fleet of clients, fast enough to sweep
// a grid of loads and outages. The server is the Model (only its AtStart
// rule) and its pause (SIGSTOP: arrivals wait in a backlog, answers are
// held). Each client runs the library's own retry decision on the virtual
// clock (internal/decide, with the retry budget and adaptive throttling
// state its process shares): nothing of the library is copied.
type Fleet struct {
	// Model is the server. Default: DefaultModel, scaled ×100 (Limit 3000,
	// K 1500) to match 100 000 clients; only the AtStart rule is simulated.
	Model Model
	// Clients is the number of clients. Default 100 000.
	Clients int
	// PerProcess is the number of clients per client process: the clients
	// of one process share its retry budget and adaptive throttling state,
	// like the 1000 clients of the original experiment's one process.
	// Default 1000.
	PerProcess int
	// Interval is the mean think time of a client between calls
	// (exponentially distributed). Default 10 s.
	Interval time.Duration
	// PauseAt is when the server is paused; Pause how long. Defaults 10 s
	// and 10 s.
	PauseAt, Pause time.Duration
	// Backlog bounds the requests that wait for the paused server; further
	// arrivals are lost (they never reach it) and their attempts time out.
	// Over gRPC the bound is the connection's socket buffers: an attempt
	// abandoned before its request left the client is never sent (the
	// -real runs saw about 1300 requests wait for a server paused 30 s, for
	// 1000 clients on one connection). 0, the default, means no bound, as
	// RunStorm's server.
	Backlog int
	// Unavailable makes the outage a server that answers every attempt at
	// once with UNAVAILABLE (a restart behind a load balancer) instead of a
	// pause; requests accepted before it are answered as usual.
	Unavailable bool
	// Failing, with Unavailable, is the share of the attempts answered
	// UNAVAILABLE during the outage, in (0, 1]; the others are served. 0
	// means 1: all of them.
	Failing float64
	// Duration is the length of the run, in whole seconds. Default 120 s.
	Duration time.Duration
	// Quiet is how long the clients make no call from the run's start (a
	// fleet idle before an outage). Default 0.
	Quiet time.Duration
	// Seed seeds the think times and the adaptive throttle's draws (the
	// library's jitter has its own source).
	Seed uint64
}

// DefaultFleet returns the article's experiment scaled ×100: 100 000
// clients calling every 10 s on average (10 000 calls/s), a server with a
// concurrency limit of 3000 (a third of it used), a 10 s pause at 10 s,
// 120 s in all.
func DefaultFleet() Fleet {
	m := DefaultModel()
	m.Limit, m.K = 3000, 1500
	return Fleet{Model: m, Clients: 100_000, PerProcess: 1000, Interval: 10 * time.Second,
		PauseAt: 10 * time.Second, Pause: 10 * time.Second, Duration: 120 * time.Second, Seed: 1}
}

// Offered returns the calls per second the clients make when every call
// succeeds at once.
func (sc Fleet) Offered() float64 { return float64(sc.Clients) / sc.Interval.Seconds() }

// Capacity returns the calls per second the server serves at its base
// latency: Limit / BaseLatency.
func (sc Fleet) Capacity() float64 {
	return float64(sc.Model.Limit) / sc.Model.BaseLatency.Seconds()
}

// WithLoad returns sc with the server's Limit set so that the offered load
// is the given share of its capacity, and K kept at half the Limit (the
// article's shape).
func (sc Fleet) WithLoad(load float64) Fleet {
	sc.Model.Limit = int(math.Round(sc.Offered() * sc.Model.BaseLatency.Seconds() / load))
	sc.Model.K = float64(sc.Model.Limit) / 2
	return sc
}

// Validate reports every field of sc that makes it unusable.
func (sc Fleet) Validate() error {
	errs := []error{sc.Model.Validate()}
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("sim: "+format, args...)) }
	if sc.Model.Rule != AtStart {
		bad("latency rule %v: only start is simulated", sc.Model.Rule)
	}
	if sc.Clients < 1 || sc.Clients > math.MaxInt32 {
		bad("clients (%d) must be between 1 and %d", sc.Clients, math.MaxInt32)
	}
	if sc.PerProcess < 1 {
		bad("clients per process (%d) must be at least 1", sc.PerProcess)
	}
	if !(sc.Failing >= 0 && sc.Failing <= 1) {
		bad("failing share (%v) must be in [0, 1]", sc.Failing)
	}
	if sc.Backlog < 0 {
		bad("backlog (%d) must not be negative", sc.Backlog)
	}
	if sc.Interval <= 0 {
		bad("interval (%v) must be positive", sc.Interval)
	}
	if sc.Quiet < 0 || sc.Quiet > sc.Duration {
		bad("quiet spell (%v) must be between 0 and the run's duration (%v)", sc.Quiet, sc.Duration)
	}
	if sc.Duration > 24*time.Hour {
		bad("duration (%v) must be at most 24h", sc.Duration) // a call's start is kept in milliseconds, as an int32
	}
	errs = append(errs, checkRun(sc.Duration, sc.PauseAt, sc.Pause)...)
	return errors.Join(errs...)
}
