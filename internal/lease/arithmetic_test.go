package lease_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/budget"
	"github.com/platformkit/grpcbackoff/internal/lease"
)

// TestOneArithmetic runs a process's own budget (budget.Budget, the
// interceptors') and a Ledger (the fleet's, and so the Redis script's) side
// by side on random traffic: calls started and succeeded, quiet spells of
// several Windows, retries paid from the reserve or from the long-run pool
// alone. They hold the same tokens after every step and pay the same
// retries: one Throttle, one arithmetic. (Issue 35: after three quiet
// Windows the budget held 110 tokens, the Ledger 20.)
func TestOneArithmetic(t *testing.T) {
	if raceEnabled {
		t.Skip("an arithmetic compared over 300 random traces: run without -race (the README's test command)")
	}
	rng := rand.New(rand.NewPCG(35, 2))
	for trial := range 300 {
		th := grpcbackoff.Throttle{
			Ratio:      float64(rng.IntN(11)) / 10,
			PerSecond:  float64(rng.IntN(5)) / 4,
			Burst:      1 + rng.IntN(20),
			Reserve:    float64(rng.IntN(6)) / 10,
			MinReserve: rng.IntN(3) * rng.IntN(60),
			Window:     time.Duration(1+rng.IntN(20)) * time.Second,
		}
		if rng.IntN(5) == 0 {
			th.Reserve, th.MinReserve, th.Window = 0, 0, 0
		}
		start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		now := start
		b, err := budget.NewWithClock(th, func() time.Time { return now })
		if err != nil {
			t.Fatal(err)
		}
		p := lease.ParamsOf(th, time.Second, 1)
		var l lease.Ledger
		l.Count(start.UnixMicro(), p, 0, 0, 0) // makes it at start, its pool full
		for step := range 400 {
			switch rng.IntN(10) {
			case 0: // a quiet spell of up to 4 Windows
				now = now.Add(time.Duration(rng.Int64N(int64(4*max(th.Window, time.Second)) + 1)))
			default:
				now = now.Add(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
			}
			started, succeeded := rng.IntN(30), 0
			if rng.IntN(3) > 0 {
				succeeded = rng.IntN(started + 1)
			}
			for range started {
				b.Started()
			}
			for i := range succeeded {
				b.SucceededOn(i)
			}
			got := b.Tokens(now) // dates the successes now, as Count does
			l.Count(now.UnixMicro(), p, int64(started), int64(succeeded), 0)
			want := float64(l.Available(now.UnixMicro(), p)) / lease.Token
			if math.Abs(got-want) > 1e-3 {
				t.Fatalf("trial %d (%+v), step %d at +%v: the budget holds %v tokens, the Ledger %v", trial, th, step, now.Sub(start), got, want)
			}
			for range rng.IntN(8) {
				reserve := rng.IntN(4) > 0
				var gb, gl bool
				if reserve {
					gb = b.Allow(now)
				} else {
					gb = b.AllowLongRun(now)
				}
				gl = l.Take(now.UnixMicro(), p, reserve)
				if gb != gl {
					t.Fatalf("trial %d (%+v), step %d at +%v: a retry (reserve %v) paid by the budget %v, by the Ledger %v (tokens %v)",
						trial, th, step, now.Sub(start), reserve, gb, gl, got)
				}
			}
		}
	}
}
