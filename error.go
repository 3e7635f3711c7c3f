package grpcbackoff

import (
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Reason says why a call that could have been retried was not retried again.
type Reason int

const (
	// ReasonNone: nothing stopped a retry; the call succeeded, or the
	// caller's context ended it before any attempt was answered (a hedged
	// call's hedges that got no answer do not count). It is Reason's zero
	// value.
	ReasonNone Reason = iota
	// ReasonExhausted: the call used all of Policy.MaxAttempts.
	ReasonExhausted
	// ReasonNotRetryable: the last attempt failed with a code the Policy does not
	// retry, or in a way no retry can mend (a message too large for a size
	// limit; a unary call whose response headers had arrived), after earlier
	// attempts had been retried.
	ReasonNotRetryable
	// ReasonDeadline: the next retry could not have started before the caller's
	// deadline, so the last error was returned at once instead of sleeping
	// into DEADLINE_EXCEEDED.
	ReasonDeadline
	// ReasonCanceled: the caller's context was canceled while the call waited to
	// retry. The error's code is CANCELED.
	ReasonCanceled
	// ReasonServerRefused: the server asked not to retry, or to wait longer than
	// MaxHintDelay and Policy.MaxBackoff (see Policy.RetryDelay).
	ReasonServerRefused
	// ReasonThrottled: the retry throttle refused the retry because too many calls
	// through the same interceptors were retrying (a storm).
	ReasonThrottled
	// ReasonRejectedLocally: adaptive client-side throttling (see
	// AdaptiveThrottle) did not send the call, or its retry, because the
	// backend has recently been refusing or failing to answer most requests.
	// A call rejected before its first attempt has Attempts 0 and the code
	// UNAVAILABLE; a rejected retry keeps the last attempt's error.
	ReasonRejectedLocally
	// ReasonClientRetries: the last attempt failed with a code that the
	// Google Cloud client making the call retries by itself for its method:
	// the error went back to the client, whose retry is the only layer for
	// that code (see package interceptor).
	ReasonClientRetries
	// ReasonGRPCRetries: the last attempt's failure was grpc-go's own retry's
	// to retry, on a ClientConn where interceptor.XDSDialOptions keeps it on:
	// an xDS route's retry_policy had the call (grpc-go made more than one
	// attempt of it), or the code is one the connection's service config
	// retries for the method. grpc-go's retry is the only layer for it.
	ReasonGRPCRetries
)

var reasonText = [...]string{
	ReasonNone:          "none",
	ReasonExhausted:     "attempts exhausted",
	ReasonNotRetryable:  "code not retryable",
	ReasonDeadline:      "next retry would pass the deadline",
	ReasonCanceled:      "canceled while waiting",
	ReasonServerRefused: "server asked not to retry",
	ReasonThrottled:     "retry throttled",

	ReasonRejectedLocally: "rejected locally by adaptive throttling",
	ReasonClientRetries:   "left to the client's own retry",
	ReasonGRPCRetries:     "left to grpc-go's own retry",
}

// String returns a short phrase for r, as used in Error's message.
func (r Reason) String() string {
	if r >= 0 && int(r) < len(reasonText) {
		return reasonText[r]
	}
	return fmt.Sprintf("Reason(%d)", int(r))
}

// Error is the error a call returns when it ended after retries, or when a
// retry it asked for was refused (by the deadline, the throttle or the
// server). A call that fails once with a code that is not retried gets the
// server's error unchanged.
//
// Error keeps the last attempt's status: status.Code(err) is its code and
// status.FromError(err) yields its details. Only the message grows, with the
// number of attempts, the time they took and the reason retrying stopped.
type Error struct {
	// Err is the error of the last attempt (for Canceled, the CANCELED error
	// of the wait).
	Err error
	// Attempts is the number of attempts made, the first one included: the
	// attempts MaxAttempts bounds. For a call a Google Cloud client retries
	// by itself, they are its first attempt and the interceptor's retries
	// over all the client's attempts of the call; the client's own attempts
	// are not counted.
	Attempts int
	// Elapsed is the time spent retrying: from the end of the first attempt
	// to the end of the call. (The first attempt is not timed, so that a call
	// that succeeds at once reads no clock.)
	Elapsed time.Duration
	// Reason says why there was no further attempt.
	Reason Reason
}

// GRPCStatus returns the last attempt's status, code and details intact,
// with a message that also says how many attempts were made over how long.
func (e *Error) GRPCStatus() *status.Status {
	st, ok := status.FromError(e.Err)
	if !ok {
		st = status.New(codes.Unknown, e.Err.Error())
	}
	p := st.Proto()
	p.Message = fmt.Sprintf("%s (grpcbackoff: %d %s over %v: %v)",
		p.Message, e.Attempts, plural(e.Attempts, "attempt"), e.Elapsed.Round(time.Millisecond), e.Reason)
	return status.FromProto(p)
}

// Error formats e as gRPC formats a status error, with GRPCStatus's message.
func (e *Error) Error() string { return e.GRPCStatus().Err().Error() }

// Unwrap returns the last attempt's error.
func (e *Error) Unwrap() error { return e.Err }

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
