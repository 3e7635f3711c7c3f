package lease

import (
	"fmt"
	"testing"
	"time"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/budget"
)

const sec = int64(time.Second / time.Microsecond)

// t0 is a time far from 0, as Unix microseconds are.
const t0 = 1_800_000_000 * sec

func fleetParams() Params { return ParamsOf(grpcbackoff.DefaultThrottle(), 750*time.Millisecond, 1) }

func TestParamsOf(t *testing.T) {
	p := ParamsOf(grpcbackoff.DefaultThrottle(), time.Second, 4)
	want := Params{Params: budget.Params{Ratio: 100_000, PerSecond: 125_000, Burst: 2_500_000, Reserve: 200_000, MinReserve: 25_000_000,
		Window: 10 * sec}, Interval: sec}
	if p != want {
		t.Errorf("ParamsOf(DefaultThrottle, 1s, 4) = %+v, want %+v", p, want)
	}
}

// TestLedgerLongRun: a new budget holds Burst; PerSecond and Ratio per
// call started refill it, up to Burst; a grant takes what it holds.
func TestLedgerLongRun(t *testing.T) {
	p := fleetParams()
	p.Window = 0 // the long-run allowance alone
	var l Ledger
	g := l.Renew(t0, p, Request{AskLongRun: 25 * Token})
	if g.LongRun != 10*Token || g.Pool != 0 || g.Earned+g.Floor != 0 {
		t.Fatalf("first grant %+v, want the Burst of 10 tokens and nothing left", g)
	}
	// 2 s later: 1 token from PerSecond, 3 from 30 calls.
	g = l.Renew(t0+2*sec, p, Request{Started: 30, AskLongRun: 2 * Token})
	if g.LongRun != 2*Token || g.Pool != 2*Token {
		t.Errorf("after 2 s and 30 calls: %+v, want 2 tokens granted, 2 left", g)
	}
	l.Renew(t0+3*sec, p, Request{Started: 1000, Return: Return{LongRun: 5 * Token}})
	if got := l.Available(t0+3*sec, p); got != 10*Token {
		t.Errorf("after 1000 calls: %d µtokens, want Burst", got)
	}
	if !l.Take(t0+3*sec, p, true) || l.Available(t0+3*sec, p) != 9*Token {
		t.Errorf("Take: %d µtokens left, want 9 tokens", l.Available(t0+3*sec, p))
	}
	// Only the server's clock moves the Ledger's: a time earlier than the
	// last seen (a failover to a server whose clock is behind) is now, and
	// credits nothing until it passes the last credit.
	if g := l.Renew(t0+2*sec, p, Request{AskLongRun: 100 * Token}); g.LongRun != 9*Token || g.Now != t0+2*sec {
		t.Errorf("renewal dated in the past: %+v, want the 9 tokens held, at its own time", g)
	}
	if g := l.Renew(t0+4*sec, p, Request{AskLongRun: 100 * Token}); g.LongRun != Token {
		t.Errorf("2 s later: %+v, want the 1 token of PerSecond", g)
	}
}

// TestLedgerReserve: successes earn Reserve each for the Window; MinReserve
// is paid at most once a Window and once since the last success; a return
// goes back to the tenth it came from, while it is in the Window. The
// Ledger learns of successes at renewals, after other processes may have
// spent the floor it granted them: a success makes the floor whole but for
// what it granted from two intervals before the earliest of them on (a
// lease is spent within a period of its grant), which stays paid.
func TestLedgerReserve(t *testing.T) {
	p := fleetParams()
	var l Ledger
	g := l.Renew(t0, p, Request{AskReserve: 1000 * Token})
	if g.Earned != 0 || g.Floor != 100*Token || g.Tenth != 0 {
		t.Fatalf("a young budget grants %+v, want MinReserve (100 tokens) from the floor", g)
	}
	g = l.Renew(t0+sec, p, Request{Succeeded: 1000, Span: sec, Return: Return{Tenth: 0, Floor: 40 * Token}, AskReserve: 150 * Token})
	if g.Earned != 150*Token || g.Floor != 0 || g.Reserve != 50*Token+40*Token || g.Tenth != 1 {
		t.Fatalf("after 1000 successes and 40 tokens back: %+v, want 150 from earnings, 50 + 40 left", g)
	}
	// The 60 the floor paid may have been spent after those successes:
	// they stay paid until a success whose span starts two intervals
	// after the lease was given back.
	l.Renew(t0+3*sec, p, Request{Succeeded: 1, Span: sec / 2})
	// 10.5 s after the successes their earnings and spending are gone.
	g = l.Renew(t0+12*sec, p, Request{AskReserve: 1000 * Token, Return: Return{Tenth: 1, Earned: 150 * Token}})
	if g.Earned != 0 || g.Floor != 100*Token || g.Reserve != 0 {
		t.Errorf("a Window after the last success: %+v, want MinReserve (a return from a tenth out of the Window gives nothing)", g)
	}
	g = l.Renew(t0+13*sec, p, Request{Succeeded: 10, Span: sec, AskReserve: 1000 * Token})
	if g.Earned != 2*Token || g.Floor != 0 {
		t.Errorf("a success again: %+v, want 2 tokens earned, and no floor: paid in the Window", g)
	}
	// The lease of the floor granted at +12 s was never given back: spent,
	// perhaps after the success of +13 s. A quiet spell keeps it paid, as
	// an outage in which nothing succeeds does.
	g = l.Renew(t0+100*sec, p, Request{AskReserve: 1000 * Token})
	if g.Earned != 0 || g.Floor != 0 {
		t.Errorf("after a quiet spell, the floor spent at +12 s: %+v, want nothing", g)
	}
	g = l.Renew(t0+101*sec, p, Request{Succeeded: 1, Span: sec, AskReserve: 1000 * Token})
	if g.Earned+g.Floor != 100*Token || g.Floor < 99*Token {
		t.Errorf("a success after it: %+v, want MinReserve (and its earnings, 0.2)", g)
	}
	// A quiet spell keeps the floor whole: the lease given back.
	l.Renew(t0+102*sec, p, Request{Return: Return{Tenth: g.Tenth, Floor: g.Floor, Earned: g.Earned}})
	g = l.Renew(t0+200*sec, p, Request{AskReserve: 1000 * Token})
	if g.Earned != 0 || g.Floor != 100*Token {
		t.Errorf("after a quiet spell, the floor given back: %+v, want MinReserve", g)
	}
}

// TestLedgerSize: the fleet's size is the processes that renewed in the
// last two intervals, each counted once however often it renews (issue 42:
// the renewals were counted, and the early ones a storm triggers made a
// fleet of 10 one of 64 and of 120); a process that leaves is not counted,
// nor one that stopped renewing two intervals ago.
func TestLedgerSize(t *testing.T) {
	p := fleetParams()
	var l Ledger
	var g Grant
	for i := range int64(30) { // 10 processes, each renewing 3 times in 750 ms
		g = l.Renew(t0+i*25_000, p, Request{ID: fmt.Sprint(i % 10)})
	}
	if g.Size != 10 {
		t.Errorf("10 processes renewing 30 times in one interval: size %d, want 10", g.Size)
	}
	if g = l.Renew(t0+800_000, p, Request{ID: "0"}); g.Size != 10 {
		t.Errorf("first renewal of the next interval: size %d, want the 10 of the last interval", g.Size)
	}
	if g = l.Renew(t0+810_000, p, Request{ID: "1", Leave: true}); g.Size != 9 {
		t.Errorf("a process that leaves: size %d, want 9", g.Size)
	}
	if g = l.Renew(t0+1_400_000, p, Request{ID: "0"}); g.Size != 9 {
		t.Errorf("within two intervals of their last renewal: size %d, want 9", g.Size)
	}
	if g = l.Renew(t0+2_300_000, p, Request{ID: "0"}); g.Size != 1 {
		t.Errorf("after two intervals without the others: size %d, want 1", g.Size)
	}
	if g = l.Renew(t0+5*sec, p, Request{ID: "2", Leave: true}); g.Size != 1 {
		t.Errorf("alone: size %d, want 1", g.Size)
	}
}

// TestLedgerBornAgain: a budget made again by a process that knew it (Redis
// lost it) is as old as it was and starts empty: no Burst, its floor paid
// until a call succeeds.
func TestLedgerBornAgain(t *testing.T) {
	p := fleetParams()
	var l Ledger
	g := l.Renew(t0+100*sec, p, Request{AskReserve: 1000 * Token, AskLongRun: 1000 * Token, Born: t0})
	if g.Born != t0 || g.LongRun != 0 || g.Earned+g.Floor != 0 {
		t.Errorf("made again: %+v, want born at t0 and nothing granted", g)
	}
}

// TestChargeOwes: a share charged for more than it holds pays it back from
// what it earns next.
func TestChargeOwes(t *testing.T) {
	p := fleetParams()
	p.Window = 0
	var l Ledger
	for range 12 {
		l.Charge(t0, p, false)
	}
	if l.Take(t0+2*sec, p, false) {
		t.Error("Take after 12 charges and 1 token earned: paid, want refused (2 owed)")
	}
	if !l.Take(t0+6*sec, p, false) {
		t.Error("Take once the debt is earned back: refused")
	}
}
