package gate

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/budget"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

type open struct{}

func (open) Closed() bool { return false }

// TestBudgetPrice: what the process's own budget takes for a retry, where
// from, and what it gives back: a RESOURCE_EXHAUSTED retry budget.Cost's
// tokens, any other one; a sheddable call's retry and a hedge from the
// long-run allowance alone; a retry whose attempt succeeds given back, a
// hedge never, a retry that fails never.
func TestBudgetPrice(t *testing.T) {
	th := grpcbackoff.Throttle{Burst: 10, MinReserve: 100, Window: 10 * time.Second}
	for _, c := range []struct {
		name      string
		r         Reservation
		ended     error
		cost      int64
		longRun   bool // paid from the long-run pool
		givenBack bool
	}{
		{"UNAVAILABLE, failed", Reservation{Code: codes.Unavailable}, errFailed, budget.Token, false, false},
		{"UNAVAILABLE, succeeded", Reservation{Code: codes.Unavailable}, nil, budget.Token, false, true},
		{"RESOURCE_EXHAUSTED, failed", Reservation{Code: codes.ResourceExhausted}, errFailed, budget.ThrottledCost * budget.Token, false, false},
		{"RESOURCE_EXHAUSTED, succeeded", Reservation{Code: codes.ResourceExhausted}, nil, budget.ThrottledCost * budget.Token, false, true},
		{"cut attempt, succeeded", Reservation{Code: codes.DeadlineExceeded, LongRun: true}, nil, budget.Token, true, true},
		{"sheddable, succeeded", Reservation{Code: codes.Unavailable, Criticality: Sheddable}, nil, budget.Token, true, true},
		{"critical, succeeded", Reservation{Code: codes.Unavailable, Criticality: Critical}, nil, budget.Token, false, true},
		{"hedge, won", Reservation{Code: codes.ResourceExhausted, LongRun: true, Hedge: true}, nil, budget.Token, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := budget.New(th, t0)
			if err != nil {
				t.Fatal(err)
			}
			g := Budget{B: b}
			r := c.r
			if why := g.Pay(&r, t0); why != 0 {
				t.Fatalf("Pay = %v, want paid", why)
			}
			if r.Cost != c.cost {
				t.Errorf("paid %d µtokens, want %d", r.Cost, c.cost)
			}
			if got := r.Receipt.LongRun > 0; got != c.longRun {
				t.Errorf("receipt %+v: from the long-run pool %v, want %v", r.Receipt, got, c.longRun)
			}
			before := b.Tokens(t0)
			g.Ended(context.Background(), c.ended, Outcome{Conn: open{}, Reservation: &r, Won: true})
			want := before
			if c.givenBack {
				want += float64(c.cost) / budget.Token
			}
			if got := b.Tokens(t0); got != want {
				t.Errorf("after the attempt ended (%v): %v retries, want %v", c.ended, got, want)
			}
			// Told again (a stream's attempt is recorded once, but a
			// Reservation given back holds nothing more).
			g.Ended(context.Background(), c.ended, Outcome{Conn: open{}, Reservation: &r, Won: true})
			if got := b.Tokens(t0); got != want {
				t.Errorf("told twice: %v retries, want %v", got, want)
			}
		})
	}
}

var errFailed = errors.New("failed")

// TestSheddableSpendsNoReserve: once the long-run pool is spent, a
// sheddable call's retry is refused while the reserve still pays the
// others'.
func TestSheddableSpendsNoReserve(t *testing.T) {
	b, err := budget.New(grpcbackoff.Throttle{Burst: 2, MinReserve: 100, Window: 10 * time.Second}, t0)
	if err != nil {
		t.Fatal(err)
	}
	g := Budget{B: b}
	shed := func() grpcbackoff.Reason {
		r := Reservation{Code: codes.Unavailable, Criticality: Sheddable}
		return g.Pay(&r, t0)
	}
	for i := range 2 {
		if why := shed(); why != 0 {
			t.Fatalf("sheddable retry %d: %v, want paid by the long-run pool", i+1, why)
		}
	}
	if why := shed(); why != grpcbackoff.ReasonThrottled {
		t.Errorf("third sheddable retry: %v, want throttled (the pool is spent)", why)
	}
	r := Reservation{Code: codes.Unavailable}
	if why := g.Pay(&r, t0); why != 0 || r.Receipt.Floor != budget.Token {
		t.Errorf("a plain retry: %v, receipt %+v; want paid by the reserve's floor", why, r.Receipt)
	}
}

// shared is a SharedBudget, a CostedBudget if costed, a DeferredBudget if
// deferred, that counts what it is asked.
type shared struct {
	tokens                    int
	allow, allowN, want, back int
	longRun                   []bool
}

func (*shared) Started()   {}
func (*shared) Succeeded() {}
func (s *shared) Allow(time.Time) bool {
	s.allow++
	return s.take(1)
}
func (s *shared) AllowLongRun(time.Time) bool {
	s.allow++
	s.longRun = append(s.longRun, true)
	return s.take(1)
}
func (s *shared) take(n int) bool {
	if s.tokens < n {
		return false
	}
	s.tokens -= n
	return true
}

type costed struct{ *shared }

func (c costed) AllowN(_ time.Time, longRun bool, n int) bool {
	c.allowN++
	c.longRun = append(c.longRun, longRun)
	return c.take(n)
}
func (c costed) Refund(_ time.Time, _ bool, n int) { c.back++; c.tokens += n }

type costedDeferred struct{ costed }

func (c costedDeferred) Want(time.Time, time.Time, bool) bool { c.want++; return true }

// TestSharedCosted: a SharedBudget that is a CostedBudget is asked AllowN
// with the retry's cost, told of a deferred one's cost by as many Wants,
// and given back a retry whose attempt succeeded; one that is not is asked
// Allow or AllowLongRun, one retry each, and given nothing back.
func TestSharedCosted(t *testing.T) {
	re := func() *Reservation {
		return &Reservation{Decided: t0, Due: t0.Add(time.Second), Code: codes.ResourceExhausted}
	}
	ok := Outcome{Conn: open{}, Won: true}

	plain := &shared{tokens: 10}
	g := NewShared(plain)
	r := re()
	if why := g.Reserve(r); why != 0 || r.WhenDue {
		t.Fatalf("plain: Reserve = %v, WhenDue %v; want 0, false", why, r.WhenDue)
	}
	if why := g.Pay(r, t0); why != 0 || plain.allow != 1 || plain.tokens != 9 {
		t.Errorf("plain: Pay = %v, %d Allows, %d tokens left; want one retry paid by Allow", why, plain.allow, plain.tokens)
	}
	ok.Reservation = r
	g.Ended(context.Background(), nil, ok)
	if plain.tokens != 9 {
		t.Errorf("plain: %d tokens after the retry succeeded, want 9 (nothing given back)", plain.tokens)
	}

	c := costedDeferred{costed{&shared{tokens: 10}}}
	g = NewShared(c)
	r = re()
	r.Criticality = Sheddable
	if why := g.Reserve(r); why != 0 || !r.WhenDue || c.want != budget.ThrottledCost {
		t.Fatalf("costed: Reserve = %v, WhenDue %v, %d Wants; want 0, true, %d", why, r.WhenDue, c.want, budget.ThrottledCost)
	}
	if why := g.Pay(r, t0); why != 0 || c.allowN != 1 || c.allow != 0 || c.tokens != 10-budget.ThrottledCost || !c.longRun[0] {
		t.Errorf("costed: Pay = %v, %d AllowN, %d Allow, %d tokens left, long run %v; want AllowN of %d from the long run",
			why, c.allowN, c.allow, c.tokens, c.longRun, budget.ThrottledCost)
	}
	ok.Reservation = r
	g.Ended(context.Background(), nil, ok)
	g.Ended(context.Background(), nil, ok)
	if c.tokens != 10 || c.back != 1 {
		t.Errorf("costed: %d tokens after the retry succeeded, %d refunds; want 10, 1", c.tokens, c.back)
	}
	h := &Reservation{Decided: t0, Due: t0, LongRun: true, Hedge: true}
	if why := g.Pay(h, t0); why != 0 || c.tokens != 9 {
		t.Errorf("costed: a hedge: %v, %d tokens left; want one paid", why, c.tokens)
	}
	ok.Reservation = h
	g.Ended(context.Background(), nil, ok)
	if c.tokens != 9 {
		t.Errorf("costed: a hedge that won: %d tokens, want 9 (never given back)", c.tokens)
	}
}

// TestCancelGivesBack: a retry paid and then not sent (its call ended
// during the wait, or a gate after the budget refused it) costs nothing:
// Cancel gives back what it paid, once, to the process's budget and to a
// CostedBudget; a budget that is not one is given nothing, as it was paid
// one retry and keeps no receipt.
func TestCancelGivesBack(t *testing.T) {
	b, err := budget.New(grpcbackoff.Throttle{Burst: 10, MinReserve: 100, Window: 10 * time.Second}, t0)
	if err != nil {
		t.Fatal(err)
	}
	g := Budget{B: b}
	before := b.Tokens(t0)
	r := Reservation{Code: codes.ResourceExhausted}
	if why := g.Pay(&r, t0); why != 0 || b.Tokens(t0) != before-budget.ThrottledCost {
		t.Fatalf("Pay = %v, %v retries left; want %v", why, b.Tokens(t0), before-budget.ThrottledCost)
	}
	g.Cancel(&r, t0)
	g.Cancel(&r, t0)
	if got := b.Tokens(t0); got != before {
		t.Errorf("after Cancel, twice: %v retries, want %v, the budget as before the retry", got, before)
	}

	c := costed{&shared{tokens: 10}}
	s := NewShared(c)
	r = Reservation{Code: codes.Unavailable}
	if why := s.Pay(&r, t0); why != 0 || c.tokens != 9 {
		t.Fatalf("costed: Pay = %v, %d tokens left; want 9", why, c.tokens)
	}
	s.Cancel(&r, t0)
	s.Cancel(&r, t0)
	if c.tokens != 10 || c.back != 1 {
		t.Errorf("costed: after Cancel, twice: %d tokens, %d refunds; want 10, 1", c.tokens, c.back)
	}

	plain := &shared{tokens: 10}
	s = NewShared(plain)
	r = Reservation{Code: codes.Unavailable}
	s.Pay(&r, t0)
	s.Cancel(&r, t0)
	if plain.tokens != 9 {
		t.Errorf("plain: %d tokens after Cancel, want 9 (nothing given back)", plain.tokens)
	}
}
