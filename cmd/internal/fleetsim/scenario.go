// Package fleetsim simulates a fleet of clients retrying against one
// overloaded server, as a discrete-event simulation on a virtual clock: the
// retry-storm experiment of cmd/stormsim scaled to 100 000 clients, fast
// enough to sweep a grid of loads and outages.
//
// The server is stormsim's Model (100 ms up to its concurrency limit, then
// 100 ms·Growth^((c − Limit)/K); work abandoned by a client goes on) and its
// pause (SIGSTOP: arrivals wait in a backlog, answers are held). Each client
// runs this module's own decision code, on the virtual clock:
// grpcbackoff.Policy.Decide for every failed attempt (backoff, jitter,
// budget, adaptive throttling), grpcbackoff.Budget and grpcbackoff.Adaptive
// for the state its process shares. Nothing of the library is copied.
package fleetsim

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/cmd/internal/stormsim"
)

// Scenario is one experiment: the server, the clients and the outage.
type Scenario struct {
	// Model is the server. Default: stormsim's, scaled ×100 (Limit 3000,
	// K 1500) to match 100 000 clients; only the AtStart rule is simulated.
	Model stormsim.Model
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
	// cmd/stormsim's server.
	Backlog int
	// Duration is the length of the run, in whole seconds. Default 120 s.
	Duration time.Duration
	// Seed seeds the think times and the adaptive throttle's draws (the
	// library's jitter has its own source).
	Seed uint64
}

// DefaultScenario returns the article's experiment scaled ×100: 100 000
// clients calling every 10 s on average (10 000 calls/s), a server with a
// concurrency limit of 3000 (a third of it used), a 10 s pause at 10 s,
// 120 s in all.
func DefaultScenario() Scenario {
	m := stormsim.DefaultModel()
	m.Limit, m.K = 3000, 1500
	return Scenario{Model: m, Clients: 100_000, PerProcess: 1000, Interval: 10 * time.Second,
		PauseAt: 10 * time.Second, Pause: 10 * time.Second, Duration: 120 * time.Second, Seed: 1}
}

// Offered returns the calls per second the clients make when every call
// succeeds at once.
func (sc Scenario) Offered() float64 { return float64(sc.Clients) / sc.Interval.Seconds() }

// Capacity returns the calls per second the server serves at its base
// latency: Limit / BaseLatency.
func (sc Scenario) Capacity() float64 {
	return float64(sc.Model.Limit) / sc.Model.BaseLatency.Seconds()
}

// WithLoad returns sc with the server's Limit set so that the offered load
// is the given share of its capacity, and K kept at half the Limit (the
// article's shape).
func (sc Scenario) WithLoad(load float64) Scenario {
	sc.Model.Limit = int(math.Round(sc.Offered() * sc.Model.BaseLatency.Seconds() / load))
	sc.Model.K = float64(sc.Model.Limit) / 2
	return sc
}

// Validate reports every field of sc that makes it unusable.
func (sc Scenario) Validate() error {
	errs := []error{sc.Model.Validate()}
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("fleetsim: "+format, args...)) }
	if sc.Model.Rule != stormsim.AtStart {
		bad("latency rule %v: only start is simulated", sc.Model.Rule)
	}
	if sc.Clients < 1 || sc.Clients > math.MaxInt32 {
		bad("clients (%d) must be between 1 and %d", sc.Clients, math.MaxInt32)
	}
	if sc.PerProcess < 1 {
		bad("clients per process (%d) must be at least 1", sc.PerProcess)
	}
	if sc.Backlog < 0 {
		bad("backlog (%d) must not be negative", sc.Backlog)
	}
	if sc.Interval <= 0 {
		bad("interval (%v) must be positive", sc.Interval)
	}
	if sc.Duration < time.Second {
		bad("duration (%v) must be at least 1s", sc.Duration)
	}
	if sc.PauseAt < 0 || sc.Pause < 0 || sc.PauseAt+sc.Pause > sc.Duration {
		bad("the pause (%v from %v) must lie within the run (%v)", sc.Pause, sc.PauseAt, sc.Duration)
	}
	return errors.Join(errs...)
}

// Strategy is a way of retrying: a Policy, whose AttemptTimeout is the
// clients' per-attempt timeout, and optionally a retry budget and adaptive
// throttling, each shared by the clients of one process.
type Strategy struct {
	Name     string
	Policy   grpcbackoff.Policy
	Throttle *grpcbackoff.Throttle
	Adaptive *grpcbackoff.AdaptiveThrottle
}

// attemptTimeout is the article's per-attempt timeout.
const attemptTimeout = 2 * time.Second

// untilSuccess stands for the article's "retry until it works".
const untilSuccess = 1 << 30

// Fixed retries every 100 ms until it succeeds: the article's first client.
func Fixed() Strategy {
	p := grpcbackoff.DefaultPolicy()
	p.Initial, p.Multiplier, p.Max, p.Jitter, p.MaxAttempts = 100*time.Millisecond, 1, 100*time.Millisecond, 0, untilSuccess
	p.AttemptTimeout = attemptTimeout
	return Strategy{Name: "fixed", Policy: p}
}

// Exponential is the article's exponential backoff (as cmd/stormsim has
// it): 100 ms growing by e up to 5 min, 100 ms of jitter, until success.
func Exponential() Strategy {
	p := grpcbackoff.DefaultPolicy()
	p.Initial, p.Multiplier, p.Max, p.Jitter, p.MaxAttempts = 100*time.Millisecond, math.E, 5*time.Minute, 100*time.Millisecond, untilSuccess
	p.AttemptTimeout = attemptTimeout
	return Strategy{Name: "exponential", Policy: p}
}

// Recipe is grpcbackoff.DefaultPolicy (the Memorystore recipe) with the
// 2 s attempt timeout, without budget.
func Recipe() Strategy {
	p := grpcbackoff.DefaultPolicy()
	p.AttemptTimeout = attemptTimeout
	return Strategy{Name: "recipe", Policy: p}
}

// RecipeBudget is Recipe with grpcbackoff.DefaultThrottle: the library's
// default configuration.
func RecipeBudget() Strategy {
	s := Recipe()
	s.Name = "recipe+budget"
	t := grpcbackoff.DefaultThrottle()
	s.Throttle = &t
	return s
}

// RecipeAdaptive is Recipe with grpcbackoff.DefaultAdaptiveThrottle.
func RecipeAdaptive() Strategy { return withAdaptive(Recipe(), "recipe+adaptive") }

// RecipeBoth is Recipe with the default budget and adaptive throttling.
func RecipeBoth() Strategy { return withAdaptive(RecipeBudget(), "recipe+both") }

// FixedAdaptive is Fixed with grpcbackoff.DefaultAdaptiveThrottle: what
// adaptive throttling does for clients that retry without backoff.
func FixedAdaptive() Strategy { return withAdaptive(Fixed(), "fixed+adaptive") }

// withAdaptive returns s, named name, with grpcbackoff.DefaultAdaptiveThrottle.
func withAdaptive(s Strategy, name string) Strategy {
	a := grpcbackoff.DefaultAdaptiveThrottle()
	s.Name, s.Adaptive = name, &a
	return s
}

// NoRetry never retries: a baseline.
func NoRetry() Strategy {
	s := Recipe()
	s.Name = "none"
	s.Policy.MaxAttempts = 1
	return s
}

// DefaultStrategy is the name of the strategy that is the library's default
// configuration.
const DefaultStrategy = "recipe+budget"

// Strategies returns the six strategies of the comparison, in order.
func Strategies() []Strategy {
	return []Strategy{Fixed(), Exponential(), Recipe(), RecipeBudget(), RecipeAdaptive(), RecipeBoth()}
}

// SelectStrategies returns the strategies named in a comma-separated list:
// those of Strategies, "fixed+adaptive" and "none".
func SelectStrategies(list string) ([]Strategy, error) {
	all := append(Strategies(), FixedAdaptive(), NoRetry())
	var names []string
	for _, s := range all {
		names = append(names, s.Name)
	}
	var out []Strategy
	for name := range strings.SplitSeq(list, ",") {
		name = strings.TrimSpace(name)
		found := false
		for _, s := range all {
			if s.Name == name {
				out, found = append(out, s), true
			}
		}
		if !found {
			return nil, fmt.Errorf("fleetsim: unknown strategy %q (known: %s)", name, strings.Join(names, ", "))
		}
	}
	return out, nil
}
