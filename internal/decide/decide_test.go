package decide_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/adaptive"
	"github.com/platformkit/grpcbackoff/internal/decide"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// budgetFunc is a Budget that answers as told and counts its calls.
type budgetFunc struct {
	ok    bool
	calls int
}

func (b *budgetFunc) Allow(time.Time) bool        { b.calls++; return b.ok }
func (b *budgetFunc) AllowLongRun(time.Time) bool { b.calls++; return b.ok }

// TestDecide checks each step of the decision in its order, with the time
// as an argument.
func TestDecide(t *testing.T) {
	p := grpcbackoff.DefaultPolicy()
	p.Jitter = 0
	base := decide.Attempt{Number: 2, MaxAttempts: 8, Code: codes.Unavailable, Now: t0}
	tests := []struct {
		name     string
		edit     func(*decide.Attempt)
		budgetOK bool
		want     decide.Decision
		asked    int // budget calls
	}{
		{"retry", func(*decide.Attempt) {}, true, decide.Decision{Retry: true, Delay: 2 * time.Second}, 1},
		{"hint longer", func(a *decide.Attempt) { a.Hint.Delay = 5 * time.Second }, true, decide.Decision{Retry: true, Delay: 5 * time.Second}, 1},
		{"canceled, first attempt", func(a *decide.Attempt) { a.Number, a.Done = 1, context.Canceled }, true, decide.Decision{}, 0},
		{"canceled", func(a *decide.Attempt) { a.Done = context.Canceled }, true, decide.Decision{Reason: grpcbackoff.ReasonCanceled}, 0},
		{"canceled, the first answered attempt, two hedges unanswered", func(a *decide.Attempt) { a.Number, a.Unanswered, a.Done = 3, 2, context.Canceled }, true, decide.Decision{}, 0},
		{"canceled, a hedge answered before", func(a *decide.Attempt) { a.Number, a.Unanswered, a.Done = 3, 1, context.Canceled }, true, decide.Decision{Reason: grpcbackoff.ReasonCanceled}, 0},
		{"deadline passed", func(a *decide.Attempt) { a.Deadline = t0 }, true, decide.Decision{Reason: grpcbackoff.ReasonDeadline}, 0},
		{"not retryable", func(a *decide.Attempt) { a.Code = codes.NotFound }, true, decide.Decision{Reason: grpcbackoff.ReasonNotRetryable}, 0},
		{"timed out, code not in Codes", func(a *decide.Attempt) { a.Code, a.TimedOut = codes.DeadlineExceeded, true }, true, decide.Decision{Retry: true, Delay: 2 * time.Second}, 1},
		{"exhausted", func(a *decide.Attempt) { a.Number = 8 }, true, decide.Decision{Reason: grpcbackoff.ReasonExhausted}, 0},
		{"a new run: its first retry", func(a *decide.Attempt) { a.Number, a.Run = 12, 11 }, true, decide.Decision{Retry: true, Delay: time.Second}, 1},
		{"a new run: its third retry", func(a *decide.Attempt) { a.Number, a.Run = 14, 11 }, true, decide.Decision{Retry: true, Delay: 4 * time.Second}, 1},
		{"a new run: exhausted by its own attempts", func(a *decide.Attempt) { a.Number, a.Run = 19, 11 }, true, decide.Decision{Reason: grpcbackoff.ReasonExhausted}, 0},
		{"a new run: canceled, not the call's first attempt", func(a *decide.Attempt) { a.Number, a.Run, a.Done = 12, 11, context.Canceled }, true, decide.Decision{Reason: grpcbackoff.ReasonCanceled}, 0},
		{"server refused", func(a *decide.Attempt) { a.Hint.Stop = true }, true, decide.Decision{Reason: grpcbackoff.ReasonServerRefused}, 0},
		{"next retry past the deadline", func(a *decide.Attempt) { a.Deadline = t0.Add(2 * time.Second) }, true, decide.Decision{Reason: grpcbackoff.ReasonDeadline}, 0},
		{"throttled", func(*decide.Attempt) {}, false, decide.Decision{Reason: grpcbackoff.ReasonThrottled}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := base
			tt.edit(&a)
			b := &budgetFunc{ok: tt.budgetOK}
			if got := decide.Decide(&p, a, b, nil); got != tt.want {
				t.Errorf("Decide = %+v, want %+v", got, tt.want)
			}
			if b.calls != tt.asked {
				t.Errorf("budget asked %d times, want %d", b.calls, tt.asked)
			}
		})
	}
}

// TestDecideAdaptive checks that adaptive throttling is asked before the
// budget, and that a rejection spends no budget.
func TestDecideAdaptive(t *testing.T) {
	p := grpcbackoff.DefaultPolicy()
	ad, err := adaptive.New(grpcbackoff.DefaultAdaptiveThrottle())
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		ad.Record(t0, false) // p = 10/11
	}
	a := decide.Attempt{Number: 1, MaxAttempts: 8, Code: codes.Unavailable, Now: t0, U: 0.5}
	b := &budgetFunc{ok: true}
	if got := decide.Decide(&p, a, b, ad); got.Retry || got.Reason != grpcbackoff.ReasonRejectedLocally || b.calls != 0 {
		t.Errorf("Decide = %+v with %d budget calls; want ReasonRejectedLocally and none", got, b.calls)
	}
	a.U = 0.95
	if got := decide.Decide(&p, a, b, ad); !got.Retry || b.calls != 1 {
		t.Errorf("u above p: Decide = %+v with %d budget calls; want a retry paid by the budget", got, b.calls)
	}
	if got := decide.Decide(&p, a, nil, nil); !got.Retry {
		t.Errorf("no budget, no adaptive: Decide = %+v, want a retry", got)
	}
}

// TestEnded checks the Reason of each way a call's context ends.
func TestEnded(t *testing.T) {
	for _, tc := range []struct {
		first bool
		done  error
		want  grpcbackoff.Reason
	}{
		{true, context.Canceled, grpcbackoff.ReasonNone},
		{true, context.DeadlineExceeded, grpcbackoff.ReasonNone},
		{true, nil, grpcbackoff.ReasonNone},
		{false, context.Canceled, grpcbackoff.ReasonCanceled},
		{false, context.DeadlineExceeded, grpcbackoff.ReasonDeadline},
		{false, nil, grpcbackoff.ReasonDeadline}, // the deadline passed, the context not yet done
	} {
		if got := decide.Ended(tc.first, tc.done); got != tc.want {
			t.Errorf("Ended(%v, %v) = %v, want %v", tc.first, tc.done, got, tc.want)
		}
	}
}
