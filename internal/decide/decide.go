// Package decide is the retry decision: given what an attempt's failure
// told, whether to retry and after how long, or why not. It reads no clock:
// the interceptors fill an Attempt from the real clock and the caller's
// context, the simulators from a virtual clock.
package decide

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/adaptive"
)

// Attempt is what a retry decision knows of a call whose attempt just
// failed. Every input is a value, the time included, so that Decide reads no
// clock: the interceptors fill it from the real clock and the caller's
// context, a simulator from its virtual clock.
type Attempt struct {
	// Number is the number of attempts made, the failed one included (1 for
	// the first attempt).
	Number int
	// Unanswered is how many of the Number attempts got no answer, the
	// failed one excepted: a hedged call's attempts in flight, or canceled
	// by the call before any answer. It is 0 where attempts go one at a
	// time. Step 1 of Decide counts the attempts answered, not sent.
	Unanswered int
	// Hedges is how many of the attempts were hedges (interceptor
	// WithHedging), which the backoff does not count: the next delay is
	// the backoff of retry Number−1−Run−Hedges.
	Hedges int
	// Run is how many of the attempts came before the current run of
	// them: 0 unless an attempt of the call made progress before it failed
	// (a resumed stream's open delivered messages: interceptor.WithResume),
	// where the run starts again at that attempt. MaxAttempts bounds
	// Number−Run, and the backoff counts from the run's start, while Number
	// counts the call's attempts.
	Run int
	// MaxAttempts is the call's limit on attempts (Policy.MaxAttempts
	// unless a call option changed it).
	MaxAttempts int
	// Code is the failed attempt's status code.
	Code codes.Code
	// TimedOut says the attempt was cut by its own timeout
	// (Policy.AttemptTimeout) while the caller's context was live: it is
	// retried like a retryable code, whatever Code is.
	TimedOut bool
	// Client says the attempt's code is one the Google Cloud client that
	// makes the call retries by itself: the error goes back to it.
	Client bool
	// GRPC says grpc-go's own retry took the failure, where it is on: an
	// xDS route's policy, or the service config's, retried it already.
	GRPC bool
	// Final says the attempt must not be retried whatever the Policy says:
	// the call committed (response headers arrived), no retry can fix the
	// error (a message over a size limit), or the method is not safe to send
	// again after this failure. It wins over TimedOut.
	Final bool
	// Hint is what the server said about retrying (grpcbackoff.ServerHint).
	Hint grpcbackoff.Hint
	// Now is the time of the decision.
	Now time.Time
	// Deadline is the caller's deadline; the zero Time for none.
	Deadline time.Time
	// Done is the caller's context error (context.Canceled or
	// context.DeadlineExceeded), nil while the context is live.
	Done error
	// U is a uniform draw in [0, 1) for adaptive throttling (see
	// adaptive.Limiter.Allow); unused without it.
	U float64
}

// Decision is the outcome of Decide: retry after Delay, or stop for Reason.
type Decision struct {
	// Retry says whether to make another attempt, after Delay.
	Retry bool
	// Delay is the wait before the next attempt, when Retry.
	Delay time.Duration
	// Reason says why not, when not Retry. It is 0 when the caller's
	// context ended during the call's first answered attempt: the
	// attempt's error is then the call's, unchanged.
	Reason grpcbackoff.Reason
}

// Budget is what Decide asks before a retry: whether it may be sent at
// time now, paying for it if so. Allow pays from the reserve first;
// AllowLongRun, asked for the retry of an attempt that timed out, from the
// long-run allowance alone (see grpcbackoff.Throttle). The interceptors'
// budget.Budget is one.
type Budget interface {
	Allow(now time.Time) bool
	AllowLongRun(now time.Time) bool
}

// Decide is the retry decision, in order:
//
//  1. the caller's context ended, or its deadline passed: stop
//     (Ended: ReasonCanceled or ReasonDeadline; Reason 0 after the call's
//     first answered attempt, Number−Unanswered 1);
//  2. the code is the Client's to retry: ReasonClientRetries; grpc-go's
//     own retry took the failure: ReasonGRPCRetries;
//  3. the attempt is Final, or its code is not retried and it did not time
//     out: ReasonNotRetryable;
//  4. MaxAttempts reached, by the run's attempts (Number−Run): ReasonExhausted;
//  5. the delay is p.RetryDelay(Number−1−Run−Hedges, Hint); a server that refuses gives
//     ReasonServerRefused;
//  6. the next attempt could not start before the deadline: ReasonDeadline;
//  7. adaptive throttling, if ad is not nil, rejects the retry
//     (ad.Allow with U): ReasonRejectedLocally;
//  8. the budget, if not nil, cannot pay for the retry (see Budget):
//     ReasonThrottled.
//
// Otherwise the call retries after the delay. Only steps 7 and 8 change
// state (a rejection counted, a token spent), and only the delay's jitter is
// random.
func Decide(p *grpcbackoff.Policy, a Attempt, budget Budget, ad *adaptive.Limiter) Decision {
	hasDeadline := !a.Deadline.IsZero()
	if a.Done != nil || hasDeadline && !a.Now.Before(a.Deadline) {
		return Decision{Reason: Ended(a.Number-a.Unanswered <= 1, a.Done)}
	}
	if a.Client {
		return Decision{Reason: grpcbackoff.ReasonClientRetries}
	}
	if a.GRPC {
		return Decision{Reason: grpcbackoff.ReasonGRPCRetries}
	}
	if a.Final || !a.TimedOut && !p.Retryable(a.Code) {
		return Decision{Reason: grpcbackoff.ReasonNotRetryable}
	}
	if a.Number-a.Run >= a.MaxAttempts {
		return Decision{Reason: grpcbackoff.ReasonExhausted}
	}
	d, ok := p.RetryDelay(a.Number-1-a.Run-a.Hedges, a.Hint)
	if !ok {
		return Decision{Reason: grpcbackoff.ReasonServerRefused}
	}
	if hasDeadline && !a.Now.Add(d).Before(a.Deadline) {
		return Decision{Reason: grpcbackoff.ReasonDeadline}
	}
	if why := Pay(budget, ad, a); why != 0 {
		return Decision{Reason: why}
	}
	return Decision{Retry: true, Delay: d}
}

// Ended is the Reason a call stops for when its context ended (done, the
// context's error: context.Canceled or context.DeadlineExceeded) or its
// deadline passed (done nil): ReasonCanceled for a cancellation,
// ReasonDeadline otherwise, and none (0) when it happened during the call's
// first answered attempt (first: no attempt was answered before it; a
// hedge that got no answer, in flight or canceled, does not count), whose
// error is then the call's, unchanged. It is the one place a context's end
// becomes a Reason: Decide, and the interceptors wherever a call finds its
// context ended (internal/loop's Call.ended: the same count), ask it.
func Ended(first bool, done error) grpcbackoff.Reason {
	switch {
	case first:
		return grpcbackoff.ReasonNone
	case done == context.Canceled:
		return grpcbackoff.ReasonCanceled
	}
	return grpcbackoff.ReasonDeadline
}

// Pay is steps 7 and 8 of Decide, for a retry of a decided on without them
// (a nil budget and ad) and now due: adaptive throttling, if ad is not nil,
// may reject it (ReasonRejectedLocally), and the budget, if not nil, must
// pay for it (else ReasonThrottled): from the long-run allowance alone for
// an attempt that timed out, whose work the server may still be doing;
// from the reserve first otherwise. It returns 0 when the retry may go.
func Pay(budget Budget, ad *adaptive.Limiter, a Attempt) grpcbackoff.Reason {
	if ad != nil && !ad.Allow(a.Now, a.U) {
		return grpcbackoff.ReasonRejectedLocally
	}
	if budget == nil {
		return 0
	}
	if a.TimedOut && !budget.AllowLongRun(a.Now) || !a.TimedOut && !budget.Allow(a.Now) {
		return grpcbackoff.ReasonThrottled
	}
	return 0
}
