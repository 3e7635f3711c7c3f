package stormsim

import (
	"fmt"
	"math"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
)

// Strategy is a way of retrying, carried out by this module's interceptor:
// a Policy and, optionally, a retry throttle shared by the whole population
// (one Retrier for all clients, like the one client process of the original
// experiment).
type Strategy struct {
	// Name names the strategy in the output and in the -strategies flag.
	Name string
	// Policy is what the interceptor carries out, in model time (Run scales
	// its durations, and sets its AttemptTimeout to the Population's
	// Timeout).
	Policy grpcbackoff.Policy
	// Throttle is the retry budget shared by the population; nil for none.
	// Its PerSecond is per model second.
	Throttle *grpcbackoff.Throttle
}

// untilSuccess stands for the original client's "retry until it works": far
// more attempts than any run can make.
const untilSuccess = 1 << 30

// stormCodes are the codes retried by every strategy: DefaultPolicy's. The
// original client retried timeouts and errors alike; here an attempt that
// times out is cut by the Policy's AttemptTimeout (see Run), which retries
// it whatever the codes.
func stormCodes() []codes.Code {
	return []codes.Code{codes.Unavailable, codes.ResourceExhausted}
}

// Fixed retries every 100 ms until it succeeds: the first strategy of the
// experiment.
func Fixed() Strategy {
	return Strategy{Name: "fixed", Policy: grpcbackoff.Policy{
		Initial: 100 * time.Millisecond, Multiplier: 1, Max: 100 * time.Millisecond,
		Jitter: 0, MaxAttempts: untilSuccess, Codes: stormCodes(),
	}}
}

// Exponential is the document's exponential backoff, retrying until it
// succeeds: delays from 100 ms growing by a factor e up to 5 minutes.
//
// The document adds a normal jitter of 10% of each delay (its code in fact
// adds N(0, 100 ms) whatever the delay); a Policy adds a uniform jitter
// U[0, Jitter] instead. Jitter = 100 ms has the scale of both: the code's
// standard deviation, and 10% of the 1 s delays that matter in a storm.
func Exponential() Strategy {
	return Strategy{Name: "exponential", Policy: grpcbackoff.Policy{
		Initial: 100 * time.Millisecond, Multiplier: math.E, Max: 5 * time.Minute,
		Jitter: 100 * time.Millisecond, MaxAttempts: untilSuccess, Codes: stormCodes(),
	}}
}

// Ours is grpcbackoff.DefaultPolicy without the throttle; Run gives it the
// AttemptTimeout that cuts and retries timed-out attempts as in the
// experiment.
func Ours() Strategy {
	return Strategy{Name: "ours", Policy: grpcbackoff.DefaultPolicy()}
}

// OursThrottled is Ours with grpcbackoff.DefaultThrottle, the interceptor's
// default.
func OursThrottled() Strategy {
	s := Ours()
	s.Name = "ours+throttle"
	t := grpcbackoff.DefaultThrottle()
	s.Throttle = &t
	return s
}

// NoRetry never retries: a baseline that shows what the offered load alone
// does to the server after the pause.
func NoRetry() Strategy {
	p := Ours().Policy
	p.MaxAttempts = 1
	return Strategy{Name: "none", Policy: p}
}

// Strategies returns the four strategies of the comparison, in order.
func Strategies() []Strategy {
	return []Strategy{Fixed(), Exponential(), Ours(), OursThrottled()}
}

// known is every strategy SelectStrategies knows.
func known() []Strategy { return append(Strategies(), NoRetry()) }

// SelectStrategies returns the strategies named in a comma-separated list,
// in the list's order: those of Strategies and "none" (NoRetry).
func SelectStrategies(list string) ([]Strategy, error) {
	var out []Strategy
	var names []string
	for _, s := range known() {
		names = append(names, s.Name)
	}
	for name := range strings.SplitSeq(list, ",") {
		name = strings.TrimSpace(name)
		found := false
		for _, s := range known() {
			if s.Name == name {
				out = append(out, s)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("stormsim: unknown strategy %q (known: %s)", name, strings.Join(names, ", "))
		}
	}
	return out, nil
}

// retrier returns the interceptor's Retrier for s, with every duration of
// its Policy and throttle scaled to real time, and onRetry as its hook.
func (s Strategy) retrier(scale float64, onRetry func(interceptor.Retry)) (*interceptor.Retrier, error) {
	p := s.Policy
	p.Codes = append([]codes.Code(nil), p.Codes...)
	p.Initial = scaled(p.Initial, scale)
	p.Max = scaled(p.Max, scale)
	p.Jitter = scaled(p.Jitter, scale)
	p.AttemptTimeout = scaled(p.AttemptTimeout, scale)
	opts := []interceptor.Option{interceptor.WithOnRetry(onRetry), interceptor.WithoutThrottle()}
	if s.Throttle != nil {
		t := *s.Throttle
		t.PerSecond /= scale // per real second
		t.Window = scaled(t.Window, scale)
		opts = append(opts, interceptor.WithThrottle(t))
	}
	r, err := interceptor.New(p, opts...)
	if err != nil {
		return nil, fmt.Errorf("stormsim: strategy %s: %w", s.Name, err)
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
