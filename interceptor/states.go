package interceptor

import "time"

// TargetState is the state of the retry budget that serves one target.
type TargetState struct {
	// Target is the ClientConn target the budget serves; "" for a budget
	// shared by every target of the Retrier.
	Target string
	// Retries is the number of retries the budget could pay for now.
	Retries float64
}

// States returns the state of r's retry budgets, for gauges; nil when r has
// no throttle (WithoutThrottle). A Retrier has one budget for all its
// calls, reported with Target "".
func (r *Retrier) States() []TargetState {
	if r.budget == nil {
		return nil
	}
	return []TargetState{{Retries: r.budget.Tokens(time.Now())}}
}
