package grpcbackoff_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
)

// budgetFunc is a RetryBudget that answers as told and counts its calls.
type budgetFunc struct {
	ok    bool
	calls int
}

func (b *budgetFunc) Allow(time.Time) bool { b.calls++; return b.ok }

// TestDecide checks each step of the decision in its order, with the time
// as an argument.
func TestDecide(t *testing.T) {
	p := grpcbackoff.DefaultPolicy()
	p.Jitter = 0
	base := grpcbackoff.Attempt{Number: 2, MaxAttempts: 8, Code: codes.Unavailable, Now: t0}
	tests := []struct {
		name     string
		edit     func(*grpcbackoff.Attempt)
		budgetOK bool
		want     grpcbackoff.Decision
		asked    int // budget calls
	}{
		{"retry", func(*grpcbackoff.Attempt) {}, true, grpcbackoff.Decision{Retry: true, Delay: 2 * time.Second}, 1},
		{"hint longer", func(a *grpcbackoff.Attempt) { a.Hint.Delay = 5 * time.Second }, true, grpcbackoff.Decision{Retry: true, Delay: 5 * time.Second}, 1},
		{"canceled, first attempt", func(a *grpcbackoff.Attempt) { a.Number, a.Done = 1, context.Canceled }, true, grpcbackoff.Decision{}, 0},
		{"canceled", func(a *grpcbackoff.Attempt) { a.Done = context.Canceled }, true, grpcbackoff.Decision{Reason: grpcbackoff.ReasonCanceled}, 0},
		{"deadline passed", func(a *grpcbackoff.Attempt) { a.Deadline = t0 }, true, grpcbackoff.Decision{Reason: grpcbackoff.ReasonDeadline}, 0},
		{"not retryable", func(a *grpcbackoff.Attempt) { a.Code = codes.NotFound }, true, grpcbackoff.Decision{Reason: grpcbackoff.ReasonNotRetryable}, 0},
		{"timed out, code not in Codes", func(a *grpcbackoff.Attempt) { a.Code, a.TimedOut = codes.DeadlineExceeded, true }, true, grpcbackoff.Decision{Retry: true, Delay: 2 * time.Second}, 1},
		{"exhausted", func(a *grpcbackoff.Attempt) { a.Number = 8 }, true, grpcbackoff.Decision{Reason: grpcbackoff.ReasonExhausted}, 0},
		{"server refused", func(a *grpcbackoff.Attempt) { a.Hint.Stop = true }, true, grpcbackoff.Decision{Reason: grpcbackoff.ReasonServerRefused}, 0},
		{"next retry past the deadline", func(a *grpcbackoff.Attempt) { a.Deadline = t0.Add(2 * time.Second) }, true, grpcbackoff.Decision{Reason: grpcbackoff.ReasonDeadline}, 0},
		{"throttled", func(*grpcbackoff.Attempt) {}, false, grpcbackoff.Decision{Reason: grpcbackoff.ReasonThrottled}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := base
			tt.edit(&a)
			b := &budgetFunc{ok: tt.budgetOK}
			if got := p.Decide(a, b, nil); got != tt.want {
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
	ad, err := grpcbackoff.NewAdaptive(grpcbackoff.DefaultAdaptiveThrottle())
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		ad.Record(t0, false) // p = 10/11
	}
	a := grpcbackoff.Attempt{Number: 1, MaxAttempts: 8, Code: codes.Unavailable, Now: t0, U: 0.5}
	b := &budgetFunc{ok: true}
	if got := p.Decide(a, b, ad); got.Retry || got.Reason != grpcbackoff.ReasonRejectedLocally || b.calls != 0 {
		t.Errorf("Decide = %+v with %d budget calls; want ReasonRejectedLocally and none", got, b.calls)
	}
	a.U = 0.95
	if got := p.Decide(a, b, ad); !got.Retry || b.calls != 1 {
		t.Errorf("u above p: Decide = %+v with %d budget calls; want a retry paid by the budget", got, b.calls)
	}
	if got := p.Decide(a, nil, nil); !got.Retry {
		t.Errorf("no budget, no adaptive: Decide = %+v, want a retry", got)
	}
}
