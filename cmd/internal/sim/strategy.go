package sim

import (
	"fmt"
	"math"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/guardcore"
	"github.com/platformkit/grpcbackoff/serviceconfig"
)

// Strategy is a way of retrying: a Policy, whose AttemptTimeout is the
// clients' per-attempt timeout, and optionally a retry budget and adaptive
// throttling, each shared by the clients of one process. Both engines carry
// it out with the library's own code: RunStorm through the interceptor,
// RunFleet through its retry decision.
type Strategy struct {
	// Name names the strategy in the output and in -strategies.
	Name     string
	Policy   grpcbackoff.Policy
	Throttle *grpcbackoff.Throttle
	Adaptive *grpcbackoff.AdaptiveThrottle
	// LeasePeriod, when set, makes Throttle one budget for the whole fleet
	// (package fleetbudget/lease, as the fleetbudget module keeps it in
	// Redis): each process spends leases of a Ledger renewed every 3/4 of
	// LeasePeriod, instead of a budget of its own.
	LeasePeriod time.Duration
	// PayWhenDue, with LeasePeriod, pays a retry when it is due, after its
	// backoff, having told the lease of it when it was decided (as the
	// interceptors do with fleetbudget's budgets), rather than when it is
	// decided. NoStock leaves out the lease's stock (lease.Local.NoStock):
	// both to compare the fleet budget's designs.
	PayWhenDue, NoStock bool
	// Guard, when set, puts the retry guard of package guard, with these
	// settings (its Options less Codes), in front of the server (RunFleet
	// only): the guard's own code (internal/guardcore) on the model's clock
	// counts every attempt the server starts, a connection for each
	// process, and marks the UNAVAILABLE the server answers with pushback
	// −1 while it refuses; the clients read it, as this library's unary
	// calls do (ReasonServerRefused). A paused server, or one too slow
	// for an attempt's timeout, answers nothing to mark.
	Guard *guardcore.Params
	// CallTimeout, when set, is each call's deadline from its start, its
	// attempts and backoffs included (RunFleet only): an attempt still
	// under way then ends the call, and no retry is made that could not
	// start before it. With it the Policy may have no AttemptTimeout, as
	// grpc-go's built-in retry has none (GRPCRetry).
	CallTimeout time.Duration
}

// attemptTimeout is the article's per-attempt timeout.
const attemptTimeout = 2 * time.Second

// untilSuccess stands for the article's "retry until it works": far more
// attempts than any run can make.
const untilSuccess = 1 << 30

// Fixed retries every 100 ms until it succeeds: the article's first client.
func Fixed() Strategy {
	p := grpcbackoff.DefaultPolicy()
	p.Initial, p.Multiplier, p.Max, p.Jitter, p.MaxAttempts = 100*time.Millisecond, 1, 100*time.Millisecond, 0, untilSuccess
	p.AttemptTimeout = attemptTimeout
	return Strategy{Name: "fixed", Policy: p}
}

// Exponential is the article's exponential backoff, until success: delays
// from 100 ms growing by a factor e up to 5 minutes, with 100 ms of jitter.
//
// The article adds a normal jitter of 10% of each delay (its code in fact
// adds N(0, 100 ms) whatever the delay); a Policy adds a uniform jitter
// U[0, Jitter] instead. Jitter = 100 ms has the scale of both.
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

// RecipeFleet is RecipeBudget with one budget for the fleet, leased to
// its processes for a second at a time (the fleetbudget module's default),
// each holding its stock, its retries paid when due.
func RecipeFleet() Strategy {
	s := RecipeBudget()
	s.Name, s.LeasePeriod, s.PayWhenDue = "recipe+fleet", time.Second, true
	return s
}

// FleetDesigns returns RecipeFleet's designs, to compare: a stock alone
// (retries paid when decided), retries paid when due alone (no stock), and
// neither (issue 29's design: a process is granted what it asked for, the
// retries it paid in its last interval).
func FleetDesigns() []Strategy {
	stock, due, neither := RecipeFleet(), RecipeFleet(), RecipeFleet()
	stock.Name, stock.PayWhenDue = "fleet:stock", false
	due.Name, due.NoStock = "fleet:when-due", true
	neither.Name, neither.PayWhenDue, neither.NoStock = "fleet:demand", false, true
	return []Strategy{stock, due, neither}
}

// RecipeGuard is Recipe, without a budget, against a server with the retry
// guard's defaults: the guard alone.
func RecipeGuard() Strategy {
	s := Recipe()
	s.Name, s.Guard = "recipe+guard", &guardcore.Params{}
	return s
}

// RecipeBudgetGuard is RecipeBudget, a budget per process, against a
// server with the retry guard's defaults.
func RecipeBudgetGuard() Strategy {
	s := RecipeBudget()
	s.Name, s.Guard = "recipe+budget+guard", &guardcore.Params{}
	return s
}

// grpcRetryConfig is cmd/guardrun's service config: grpc-go's built-in
// retry as teams configure it, with the calls' 2 s deadline.
const grpcRetryConfig = `{"methodConfig": [{"name": [{}], "timeout": "2s",
	"retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2,
		"retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]}}]}`

// GRPCRetry is grpc-go's built-in retry with cmd/guardrun's service config
// (5 attempts, 0.1 s doubling to 1 s): the Policy serviceconfig maps its
// retryPolicy to, which waits as grpc-go v1.85 waits, with no attempt
// timeout, and the config's 2 s timeout as each call's deadline
// (CallTimeout), so that an attempt the server does not answer ends its
// call, as in grpc-go. Like grpc-go with a retryPolicy, it stops at
// pushback −1, and, without retryThrottling, has no budget.
func GRPCRetry() Strategy {
	sc, err := serviceconfig.Parse([]byte(grpcRetryConfig))
	if err != nil {
		panic("sim: " + err.Error()) // a constant document
	}
	m := sc.Methods[0]
	return Strategy{Name: "grpc", Policy: *m.Policy, CallTimeout: m.Timeout}
}

// GRPCRetryGuard is GRPCRetry against a server with the retry guard's
// defaults.
func GRPCRetryGuard() Strategy {
	s := GRPCRetry()
	s.Name, s.Guard = "grpc+guard", &guardcore.Params{}
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

// NoRetry never retries: a baseline that shows what the offered load alone
// does to the server after the pause.
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

// SelectStrategies returns the strategies named in a comma-separated list,
// in the list's order: those of Strategies, "fixed+adaptive", "none",
// "recipe+fleet" and FleetDesigns', "recipe+guard",
// "recipe+budget+guard", "grpc" and "grpc+guard".
func SelectStrategies(list string) ([]Strategy, error) {
	all := append(append(Strategies(), FixedAdaptive(), NoRetry(), RecipeFleet(), RecipeGuard(), RecipeBudgetGuard(), GRPCRetry(), GRPCRetryGuard()), FleetDesigns()...)
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
			return nil, fmt.Errorf("sim: unknown strategy %q (known: %s)", name, strings.Join(names, ", "))
		}
	}
	return out, nil
}

// Retrier returns the interceptor's Retrier for s, with every duration of
// its Policy, budget and adaptive throttling scaled to real time (scale is
// the real length of a model second, in seconds), and onRetry, if not nil,
// as its hook.
func (s Strategy) Retrier(scale float64, onRetry func(interceptor.Retry)) (*interceptor.Retrier, error) {
	if s.Guard != nil || s.CallTimeout > 0 {
		return nil, fmt.Errorf("sim: strategy %s: a server's guard and a call's deadline are simulated by RunFleet only", s.Name)
	}
	p := s.Policy
	p.Codes = append([]codes.Code(nil), p.Codes...)
	p.Initial = scaled(p.Initial, scale)
	p.Max = scaled(p.Max, scale)
	p.Jitter = scaled(p.Jitter, scale)
	p.AttemptTimeout = scaled(p.AttemptTimeout, scale)
	// Work changes nothing the model counts twice: stated, as a write
	// nobody marked is not resent after a failure that may have applied.
	opts := []interceptor.Option{interceptor.WithoutThrottle(), interceptor.WithSafety(Method, interceptor.Idempotent)}
	if onRetry != nil {
		opts = append(opts, interceptor.WithOnRetry(onRetry))
	}
	if s.Throttle != nil {
		t := *s.Throttle
		t.PerSecond /= scale // per real second
		t.Window = scaled(t.Window, scale)
		opts = append(opts, interceptor.WithThrottle(t))
	}
	if s.Adaptive != nil {
		a := *s.Adaptive
		a.Window = scaled(a.Window, scale)
		opts = append(opts, interceptor.WithAdaptiveThrottle(a))
	}
	r, err := interceptor.New(p, opts...)
	if err != nil {
		return nil, fmt.Errorf("sim: strategy %s: %w", s.Name, err)
	}
	return r, nil
}

// scaled returns the real duration of model duration d.
func scaled(d time.Duration, scale float64) time.Duration {
	if scale == 1 {
		return d
	}
	return time.Duration(float64(d) * scale)
}
