package plan_test

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/plan"
)

// planPolicy returns a valid Policy with the given arithmetic.
func planPolicy(initial time.Duration, multiplier float64, maxDelay, jitter time.Duration, attempts int) grpcbackoff.Policy {
	p := grpcbackoff.DefaultPolicy()
	p.Initial, p.Multiplier, p.Max, p.Jitter, p.MaxAttempts = initial, multiplier, maxDelay, jitter, attempts
	return p
}

// planMillis returns d in whole milliseconds, rounded, as the source
// document's tables give times to 0.001 s.
func planMillis(d time.Duration) int64 { return int64(math.Round(d.Seconds() * 1000)) }

// TestSchedulePowersOfTwo reproduces the document's table for a = 1, r = 2:
// retry n waits 2^(n-1) s and starts at 2^n - 1 s, exactly.
func TestSchedulePowersOfTwo(t *testing.T) {
	p := planPolicy(time.Second, 2, time.Hour, 0, 12)
	steps := slices.Collect(plan.Schedule(p))
	if len(steps) != 11 {
		t.Fatalf("len(Schedule()) = %d, want 11 (MaxAttempts-1)", len(steps))
	}
	for i, s := range steps {
		n := i + 1
		want := plan.Step{
			Retry:      n,
			Delay:      time.Duration(1<<(n-1)) * time.Second,
			MaxDelay:   time.Duration(1<<(n-1)) * time.Second,
			Elapsed:    time.Duration(1<<n-1) * time.Second,
			MaxElapsed: time.Duration(1<<n-1) * time.Second,
		}
		if s != want {
			t.Errorf("Schedule()[%d] = %+v, want %+v", i, s, want)
		}
	}
	// The rows the document prints.
	for _, tc := range []struct {
		i              int
		delay, elapsed time.Duration
	}{
		{0, 1 * time.Second, 1 * time.Second},
		{1, 2 * time.Second, 3 * time.Second},
		{2, 4 * time.Second, 7 * time.Second},
		{9, 512 * time.Second, 1023 * time.Second},
		{10, 1024 * time.Second, 2047 * time.Second},
	} {
		if got := steps[tc.i].Delay; got != tc.delay {
			t.Errorf("Schedule()[%d].Delay = %v, want %v", tc.i, got, tc.delay)
		}
		if got := steps[tc.i].Elapsed; got != tc.elapsed {
			t.Errorf("Schedule()[%d].Elapsed = %v, want %v", tc.i, got, tc.elapsed)
		}
	}
}

// TestScheduleTenPercent reproduces the document's table for a = 1, r = 1.1
// to the millisecond.
func TestScheduleTenPercent(t *testing.T) {
	p := planPolicy(time.Second, 1.1, time.Hour, 0, 50)
	steps := slices.Collect(plan.Schedule(p))
	if len(steps) != 49 {
		t.Fatalf("len(Schedule()) = %d, want 49", len(steps))
	}
	for _, tc := range []struct {
		retry              int
		delayMs, elapsedMs int64
	}{
		{1, 1000, 1000},
		{2, 1100, 2100},
		{3, 1210, 3310},
		{48, 88197, 960172},
		{49, 97017, 1057190},
	} {
		s := steps[tc.retry-1]
		if s.Retry != tc.retry {
			t.Errorf("Schedule()[%d].Retry = %d, want %d", tc.retry-1, s.Retry, tc.retry)
		}
		if got := planMillis(s.Delay); got != tc.delayMs {
			t.Errorf("Schedule()[%d].Delay = %v, want %.3fs", tc.retry-1, s.Delay, float64(tc.delayMs)/1000)
		}
		if got := planMillis(s.Elapsed); got != tc.elapsedMs {
			t.Errorf("Schedule()[%d].Elapsed = %v, want %.3fs", tc.retry-1, s.Elapsed, float64(tc.elapsedMs)/1000)
		}
	}
}

// TestScheduleDefaultPolicy checks DefaultPolicy's table, jitter included:
// 1–2, 2–3, 4–5, 8–9, 16–17, 32, 32 s, so the last attempt starts between
// 95 s and 100 s.
func TestScheduleDefaultPolicy(t *testing.T) {
	s := func(n int, delay, maxDelay, elapsed, maxElapsed time.Duration) plan.Step {
		return plan.Step{Retry: n, Delay: delay * time.Second, MaxDelay: maxDelay * time.Second,
			Elapsed: elapsed * time.Second, MaxElapsed: maxElapsed * time.Second}
	}
	want := []plan.Step{
		s(1, 1, 2, 1, 2),
		s(2, 2, 3, 3, 5),
		s(3, 4, 5, 7, 10),
		s(4, 8, 9, 15, 19),
		s(5, 16, 17, 31, 36),
		s(6, 32, 32, 63, 68),
		s(7, 32, 32, 95, 100),
	}
	got := slices.Collect(plan.Schedule(grpcbackoff.DefaultPolicy()))
	if !slices.Equal(got, want) {
		t.Errorf("plan.Schedule(DefaultPolicy()) = %+v, want %+v", got, want)
	}
}

// planInvariants checks what every Step of a valid p must satisfy, against
// the Step before it.
func planInvariants(t *testing.T, p grpcbackoff.Policy, prev, s plan.Step) {
	t.Helper()
	if s.Retry != prev.Retry+1 {
		t.Fatalf("%+v: Step after retry %d is retry %d", p, prev.Retry, s.Retry)
	}
	if want := p.Nominal(s.Retry - 1); s.Delay != want {
		t.Errorf("%+v: Step(%d).Delay = %v, want Nominal(%d) = %v", p, s.Retry, s.Delay, s.Retry-1, want)
	}
	if s.Delay <= 0 || s.Delay > s.MaxDelay || s.MaxDelay > p.Max {
		t.Errorf("%+v: Step(%d) delays %v, %v not in (0, Max]", p, s.Retry, s.Delay, s.MaxDelay)
	}
	if s.MaxDelay < p.Max && s.MaxDelay != s.Delay+p.Jitter {
		t.Errorf("%+v: Step(%d).MaxDelay = %v, want Delay+Jitter = %v", p, s.Retry, s.MaxDelay, s.Delay+p.Jitter)
	}
	if s.Elapsed < prev.Elapsed || s.MaxElapsed < prev.MaxElapsed || s.Elapsed > s.MaxElapsed {
		t.Errorf("%+v: Step(%d) elapsed %v, %v after %v, %v: not growing", p, s.Retry, s.Elapsed, s.MaxElapsed, prev.Elapsed, prev.MaxElapsed)
	}
	// Unless saturated, Elapsed is the sum of the delays, up to the rounding
	// of the closed form in float64: a few ns below 100 days, a relative
	// 1e-14 beyond.
	slack := max(time.Microsecond, time.Duration(float64(s.MaxElapsed)*1e-13))
	if s.Elapsed < math.MaxInt64 {
		if d := s.Elapsed - prev.Elapsed - s.Delay; d < -slack || d > slack {
			t.Errorf("%+v: Step(%d).Elapsed - Step(%d).Elapsed = %v, want Delay %v", p, s.Retry, prev.Retry, s.Elapsed-prev.Elapsed, s.Delay)
		}
	}
	if s.MaxElapsed < math.MaxInt64 {
		if d := s.MaxElapsed - prev.MaxElapsed - s.MaxDelay; d < -slack || d > slack {
			t.Errorf("%+v: Step(%d).MaxElapsed - Step(%d).MaxElapsed = %v, want MaxDelay %v", p, s.Retry, prev.Retry, s.MaxElapsed-prev.MaxElapsed, s.MaxDelay)
		}
	}
}

// planPolicies are valid policies over the whole range of the arithmetic.
func planPolicies() []grpcbackoff.Policy {
	return []grpcbackoff.Policy{
		grpcbackoff.DefaultPolicy(),
		planPolicy(time.Second, 2, time.Hour, 0, 40),
		planPolicy(time.Second, 1.1, time.Hour, 0, 120),
		planPolicy(100*time.Millisecond, 1.5, 10*time.Second, 250*time.Millisecond, 30),
		planPolicy(time.Second, 1, time.Second, time.Second, 20),                                // fixed, at the cap from the start
		planPolicy(2*time.Second, 1, time.Minute, 500*time.Millisecond, 20),                     // fixed, below the cap
		planPolicy(time.Second, 1+1e-12, time.Minute, 0, 20),                                    // barely growing
		planPolicy(time.Nanosecond, 1e300, math.MaxInt64, 0, 10),                                // huge multiplier
		planPolicy(time.Second, 3, time.Minute, time.Hour, 10),                                  // Jitter > Max
		planPolicy(math.MaxInt64/4, 2, math.MaxInt64, math.MaxInt64, 10),                        // saturating
		planPolicy(time.Nanosecond, 2, math.MaxInt64, 0, 80),                                    // no practical cap
		planPolicy(time.Millisecond, math.MaxFloat64, time.Second, time.Millisecond, 5),         // largest multiplier
		planPolicy(time.Second, math.Nextafter(1, 2), 2*time.Second, time.Nanosecond, 10),       // smallest growth
		planPolicy(999*time.Millisecond, 1.0001, time.Second, 0, 30),                            // reaches the cap slowly
		planPolicy(time.Second, 2, math.MaxInt64, 0, 70),                                        // elapsed saturates
		planPolicy(time.Hour, 1, math.MaxInt64, math.MaxInt64, 10),                              // fixed, huge jitter
		planPolicy(time.Duration(1)<<40, 1.0000001, time.Duration(1)<<41, 0, 20),                // long below the cap
		planPolicy(3*time.Second, 2, 3*time.Second, 0, 5),                                       // Initial == Max
		planPolicy(time.Second, 2, 32*time.Second, time.Second, 8),                              // DefaultPolicy's numbers
		planPolicy(time.Second, 10, 32*time.Second, 31*time.Second, 8),                          // jitter reaches the cap first
		planPolicy(time.Nanosecond, 1.5, time.Microsecond, time.Nanosecond, 40),                 // nanoseconds
		planPolicy(time.Second, 2, time.Duration(1)<<62, time.Duration(1)<<61, 70),              // near overflow
		planPolicy(time.Duration(math.MaxInt64), 2, time.Duration(math.MaxInt64), 0, 3),         // the longest Initial
		planPolicy(time.Duration(math.MaxInt64), 1, time.Duration(math.MaxInt64), time.Hour, 3), // fixed at the longest
	}
}

func TestScheduleInvariants(t *testing.T) {
	for _, p := range planPolicies() {
		prev := plan.Retry(p, 0)
		if prev != (plan.Step{}) {
			t.Errorf("%+v: Step(0) = %+v, want the zero Step", p, prev)
		}
		n := 0
		for s := range plan.Schedule(p) {
			n++
			planInvariants(t, p, prev, s)
			if got := plan.Retry(p, s.Retry); got != s {
				t.Errorf("%+v: Step(%d) = %+v, want Schedule's %+v", p, s.Retry, got, s)
			}
			if d := p.Backoff(s.Retry - 1); d < s.Delay || d > s.MaxDelay {
				t.Errorf("%+v: Backoff(%d) = %v, want in [%v, %v]", p, s.Retry-1, d, s.Delay, s.MaxDelay)
			}
			prev = s
		}
		if n != p.MaxAttempts-1 {
			t.Errorf("%+v: Schedule() yields %d steps, want MaxAttempts-1 = %d", p, n, p.MaxAttempts-1)
		}
	}
}

func TestScheduleEdges(t *testing.T) {
	t.Run("one attempt", func(t *testing.T) {
		p := planPolicy(time.Second, 2, time.Minute, 0, 1)
		if got := slices.Collect(plan.Schedule(p)); len(got) != 0 {
			t.Errorf("Schedule() with MaxAttempts 1 = %+v, want no retry", got)
		}
	})
	t.Run("huge MaxAttempts is lazy", func(t *testing.T) {
		p := planPolicy(time.Second, 2, 32*time.Second, time.Second, math.MaxInt)
		var got []plan.Step
		for s := range plan.Schedule(p) {
			got = append(got, s)
			if len(got) == 8 {
				break
			}
		}
		if want := (plan.Step{Retry: 8, Delay: 32 * time.Second, MaxDelay: 32 * time.Second,
			Elapsed: 127 * time.Second, MaxElapsed: 132 * time.Second}); got[7] != want {
			t.Errorf("Schedule()[7] = %+v, want %+v", got[7], want)
		}
		last := plan.Retry(p, math.MaxInt)
		if last.Retry != math.MaxInt || last.Delay != 32*time.Second || last.Elapsed != math.MaxInt64 || last.MaxElapsed != math.MaxInt64 {
			t.Errorf("Step(MaxInt) = %+v, want Delay 32s and saturated times", last)
		}
	})
	t.Run("Codes are ignored", func(t *testing.T) {
		p := planPolicy(time.Second, 2, time.Minute, 0, 3)
		p.Codes = nil
		if got := slices.Collect(plan.Schedule(p)); len(got) != 2 {
			t.Errorf("Schedule() without Codes has %d steps, want 2", len(got))
		}
	})
	t.Run("negative retry", func(t *testing.T) {
		if got := plan.Retry(grpcbackoff.DefaultPolicy(), -3); got != (plan.Step{}) {
			t.Errorf("Step(-3) = %+v, want the zero Step", got)
		}
	})
	t.Run("fixed interval", func(t *testing.T) {
		p := planPolicy(2*time.Second, 1, time.Minute, time.Second, math.MaxInt)
		want := plan.Step{Retry: 1000, Delay: 2 * time.Second, MaxDelay: 3 * time.Second,
			Elapsed: 2000 * time.Second, MaxElapsed: 3000 * time.Second}
		if got := plan.Retry(p, 1000); got != want {
			t.Errorf("Step(1000) = %+v, want %+v", got, want)
		}
	})
	for _, tc := range []struct {
		name string
		edit func(*grpcbackoff.Policy)
	}{
		{"zero Initial", func(p *grpcbackoff.Policy) { p.Initial = 0 }},
		{"NaN Multiplier", func(p *grpcbackoff.Policy) { p.Multiplier = math.NaN() }},
		{"infinite Multiplier", func(p *grpcbackoff.Policy) { p.Multiplier = math.Inf(1) }},
		{"Multiplier below 1", func(p *grpcbackoff.Policy) { p.Multiplier = 0.5 }},
		{"Max below Initial", func(p *grpcbackoff.Policy) { p.Max = time.Millisecond }},
		{"negative Jitter", func(p *grpcbackoff.Policy) { p.Jitter = -1 }},
		{"zero MaxAttempts", func(p *grpcbackoff.Policy) { p.MaxAttempts = 0 }},
		{"zero Policy", func(p *grpcbackoff.Policy) { *p = grpcbackoff.Policy{} }},
	} {
		t.Run("invalid "+tc.name, func(t *testing.T) {
			p := grpcbackoff.DefaultPolicy()
			tc.edit(&p)
			if got := slices.Collect(plan.Schedule(p)); len(got) != 0 {
				t.Errorf("Schedule() = %+v, want nothing", got)
			}
			if got := plan.Retry(p, 3); got != (plan.Step{}) {
				t.Errorf("Step(3) = %+v, want the zero Step", got)
			}
			if got := plan.NextAfter(p, time.Minute); got != (plan.Step{}) {
				t.Errorf("NextAfter(1m) = %+v, want the zero Step", got)
			}
			if f, m := plan.AttemptsWithin(p, time.Minute); f != 0 || m != 0 {
				t.Errorf("AttemptsWithin(1m) = %d, %d, want 0, 0", f, m)
			}
			if err := plan.CheckDeadline(p, time.Minute); err == nil || !strings.HasPrefix(err.Error(), "grpcbackoff: ") {
				t.Errorf("CheckDeadline(1m) = %v, want Validate's error", err)
			} else if want := p.Validate(); !strings.Contains(want.Error(), err.Error()) {
				t.Errorf("CheckDeadline(1m) = %q, want part of Validate's %q", err, want)
			}
		})
	}
}

func TestNextAfter(t *testing.T) {
	const s = time.Second
	doubling := planPolicy(s, 2, time.Hour, 0, 8)
	tenPercent := planPolicy(s, 1.1, time.Hour, 0, 8)
	fixed := planPolicy(2*s, 1, time.Minute, s, 8)
	for _, tc := range []struct {
		name    string
		p       grpcbackoff.Policy
		elapsed time.Duration
		// the retry that comes next, its wait, and when it starts
		retry         int
		delay, starts time.Duration
	}{
		// The document: T_10 = 1023 gives t_11 = a + (r-1)·T_10 = 1024, n = 10.
		{"doubling at T10", doubling, 1023 * s, 11, 1024 * s, 2047 * s},
		{"doubling just before T10", doubling, 1023*s - 1, 10, 512 * s, 1023 * s},
		{"doubling at 1000s", doubling, 1000 * s, 10, 512 * s, 1023 * s},
		{"doubling at 0", doubling, 0, 1, s, s},
		{"doubling before 0", doubling, -time.Hour, 1, s, s},
		{"doubling past MaxAttempts", doubling, 100 * s, 7, 64 * s, 127 * s},
		// The document's question: a retry at about 1000 s, and a wait of
		// about 100 s around it.
		{"ten percent at 1000s", tenPercent, 1000 * s, 49, 97017233784, 1057189571634},
		// The document's 960.172 is rounded down: retry 48 starts at
		// 960.172338 s, so at 960.172 s it is still to come.
		{"ten percent at 960.172s", tenPercent, 960172 * time.Millisecond, 48, 88197485258, 960172337849},
		// Past the cap: retries every 32 s from 31 s on.
		{"default at 95s", grpcbackoff.DefaultPolicy(), 95 * s, 8, 32 * s, 127 * s},
		{"default at 1000s", grpcbackoff.DefaultPolicy(), 1000 * s, 36, 32 * s, 1023 * s},
		{"fixed at 7s", fixed, 7 * s, 4, 2 * s, 8 * s},
		{"fixed at 8s", fixed, 8 * s, 5, 2 * s, 10 * s},
		{"initial at the cap", planPolicy(3*s, 2, 3*s, 0, 8), 10 * s, 4, 3 * s, 12 * s},
		{"longest elapsed", doubling, math.MaxInt64, math.MaxInt, time.Hour, math.MaxInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := plan.NextAfter(tc.p, tc.elapsed)
			if got.Retry != tc.retry || got.Delay != tc.delay || got.Elapsed != tc.starts {
				t.Errorf("NextAfter(%v) = retry %d after %v at %v, want retry %d after %v at %v",
					tc.elapsed, got.Retry, got.Delay, got.Elapsed, tc.retry, tc.delay, tc.starts)
			}
			if want := plan.Retry(tc.p, tc.retry); got != want {
				t.Errorf("NextAfter(%v) = %+v, want Step(%d) = %+v", tc.elapsed, got, tc.retry, want)
			}
		})
	}
}

// TestNextAfterInvertsSchedule checks NextAfter against every Step: at a
// retry's start the next one follows, a nanosecond earlier the retry itself.
func TestNextAfterInvertsSchedule(t *testing.T) {
	for _, p := range planPolicies() {
		for s := range plan.Schedule(p) {
			if s.Elapsed == math.MaxInt64 {
				break
			}
			if got := plan.NextAfter(p, s.Elapsed); got.Retry != s.Retry+1 {
				t.Errorf("%+v: NextAfter(Step(%d).Elapsed = %v) = retry %d, want %d", p, s.Retry, s.Elapsed, got.Retry, s.Retry+1)
			}
			if got := plan.NextAfter(p, s.Elapsed-1); got != s {
				t.Errorf("%+v: NextAfter(Step(%d).Elapsed - 1ns) = %+v, want %+v", p, s.Retry, got, s)
			}
		}
	}
}

// TestNextAfterClosedForm checks the document's t(T) = a + (r-1)·T at every
// retry below the cap.
func TestNextAfterClosedForm(t *testing.T) {
	for _, r := range []float64{1.01, 1.1, 1.5, 2, 3, 10} {
		p := planPolicy(time.Second, r, 24*time.Hour, 0, 200)
		for s := range plan.Schedule(p) {
			next := plan.NextAfter(p, s.Elapsed)
			if next.Delay == p.Max {
				break
			}
			want := time.Second.Seconds() + (r-1)*s.Elapsed.Seconds()
			if got := next.Delay.Seconds(); math.Abs(got-want) > 1e-6*want {
				t.Errorf("r=%v: NextAfter(%v).Delay = %v, want a + (r-1)·T = %.9fs", r, s.Elapsed, next.Delay, want)
			}
			// n = log_r(1 + (r-1)·T/a)
			if n := math.Log1p((r-1)*s.Elapsed.Seconds()) / math.Log(r); math.Abs(n-float64(s.Retry)) > 1e-6 {
				t.Errorf("r=%v: log_r(1 + (r-1)·%v/a) = %v, want retry %d", r, s.Elapsed, n, s.Retry)
			}
		}
	}
}

func TestMultiplierForRatio(t *testing.T) {
	for _, tc := range []struct {
		ratio float64
		want  float64
	}{
		{0.1, 1.1},
		{1, 2},
		{0.5, 1.5},
		{1e-20, 1}, // too small to tell from a fixed interval
		{math.MaxFloat64, math.MaxFloat64},
	} {
		got, err := plan.MultiplierForRatio(tc.ratio)
		if got != tc.want || err != nil {
			t.Errorf("MultiplierForRatio(%v) = %v, %v, want %v, nil", tc.ratio, got, err, tc.want)
		}
		if p := planPolicy(time.Second, got, time.Hour, 0, 2); p.Validate() != nil {
			t.Errorf("MultiplierForRatio(%v) = %v, which Validate rejects: %v", tc.ratio, got, p.Validate())
		}
	}
	for _, tc := range []struct {
		ratio float64
		want  string
	}{
		{0, "grpcbackoff: ratio (0) must be positive"},
		{-0.1, "grpcbackoff: ratio (-0.1) must be positive"},
		{math.NaN(), "grpcbackoff: ratio (NaN) must be a finite number"},
		{math.Inf(1), "grpcbackoff: ratio (+Inf) must be a finite number"},
		{math.Inf(-1), "grpcbackoff: ratio (-Inf) must be a finite number"},
	} {
		got, err := plan.MultiplierForRatio(tc.ratio)
		if err == nil || err.Error() != tc.want || got != 0 {
			t.Errorf("MultiplierForRatio(%v) = %v, %v, want 0, %q", tc.ratio, got, err, tc.want)
		}
	}
}

func TestRetryCountRatio(t *testing.T) {
	for _, tc := range []struct {
		from, to float64
		want     float64 // to 4 decimals
	}{
		{2, 1.1, 7.2725},
		{1.1, 2, 0.1375},
		{2, 2, 1},
		{2, 4, 0.5},
		{math.MaxFloat64, 2, 1024},
	} {
		got, err := plan.RetryCountRatio(tc.from, tc.to)
		if math.Round(got*1e4)/1e4 != tc.want || err != nil {
			t.Errorf("RetryCountRatio(%v, %v) = %v, %v, want %v, nil", tc.from, tc.to, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		from, to float64
		want     string
	}{
		{1, 2, "multiplier from (1)"},
		{2, 1, "multiplier to (1)"},
		{0.5, 2, "multiplier from (0.5)"},
		{2, -3, "multiplier to (-3)"},
		{math.NaN(), 2, "multiplier from (NaN)"},
		{2, math.Inf(1), "multiplier to (+Inf)"},
	} {
		got, err := plan.RetryCountRatio(tc.from, tc.to)
		if err == nil || !strings.HasPrefix(err.Error(), "grpcbackoff: "+tc.want+" must be a finite number greater than 1") || got != 0 {
			t.Errorf("RetryCountRatio(%v, %v) = %v, %v, want 0 and an error about %s", tc.from, tc.to, got, err, tc.want)
		}
	}
}

// TestRetryCountRatioDocument compares the estimate with the real counts, as
// the document does: 7.27 estimated, about 5 at 1000 s.
func TestRetryCountRatioDocument(t *testing.T) {
	at := 1000 * time.Second
	n2 := plan.NextAfter(planPolicy(time.Second, 2, time.Hour, 0, 2), at).Retry - 1
	n11 := plan.NextAfter(planPolicy(time.Second, 1.1, time.Hour, 0, 2), at).Retry - 1
	if n2 != 9 || n11 != 48 {
		t.Fatalf("retries by %v = %d (r=2) and %d (r=1.1), want 9 and 48", at, n2, n11)
	}
	est, _ := plan.RetryCountRatio(2, 1.1)
	if ratio := float64(n11) / float64(n2); ratio > est || math.Round(ratio) != 5 {
		t.Errorf("real ratio at %v = %.2f, want about 5 and below the estimate %.2f", at, ratio, est)
	}
}

func TestAttemptsWithin(t *testing.T) {
	const s = time.Second
	def := grpcbackoff.DefaultPolicy()
	for _, tc := range []struct {
		name         string
		p            grpcbackoff.Policy
		deadline     time.Duration
		fewest, most int
	}{
		// Nominal starts 0, 1, 3, 7, 15, 31, 63, 95 s; latest 0, 2, 5, 10,
		// 19, 36, 68, 100 s.
		{"default 600s", def, 600 * s, 8, 8},
		{"default 100s", def, 100 * s, 7, 8},
		{"default just over 100s", def, 100*s + 1, 8, 8},
		{"default 60s", def, 60 * s, 6, 6},
		{"default 30s", def, 30 * s, 5, 5},
		{"default 10s", def, 10 * s, 3, 4},
		{"default 1s", def, s, 1, 1}, // retry 1 is due at 1s: not before it
		{"default 1s+1ns", def, s + 1, 1, 2},
		{"default 1ns", def, 1, 1, 1},
		{"default 0", def, 0, 0, 0},
		{"default negative", def, -s, 0, 0},
		{"default longest", def, math.MaxInt64, 8, 8},
		{"fixed, many attempts", planPolicy(s, 1, s, 0, math.MaxInt), 600 * s, 600, 600},
		{"fixed with jitter", planPolicy(s, 1, time.Minute, s, math.MaxInt), 600 * s, 300, 600},
		{"ten percent 1000s", planPolicy(s, 1.1, time.Hour, 0, 100), 1000 * s, 49, 49},
		{"saturating", planPolicy(time.Hour, 2, math.MaxInt64, math.MaxInt64, math.MaxInt), math.MaxInt64, 1, 22}, // the first retry is due at the longest Duration
	} {
		t.Run(tc.name, func(t *testing.T) {
			fewest, most := plan.AttemptsWithin(tc.p, tc.deadline)
			if fewest != tc.fewest || most != tc.most {
				t.Errorf("AttemptsWithin(%v) = %d, %d, want %d, %d", tc.deadline, fewest, most, tc.fewest, tc.most)
			}
		})
	}
}

func TestCheckDeadline(t *testing.T) {
	const s = time.Second
	def := grpcbackoff.DefaultPolicy()
	few := planPolicy(s, 2, 32*s, s, 3)
	for _, tc := range []struct {
		name     string
		p        grpcbackoff.Policy
		deadline time.Duration
		want     string // "" for nil
	}{
		// At most 100 s of delays, a sixth of the Cloud Redis client's 600 s:
		// by design (see DefaultPolicy), so no warning.
		{"default 600s", def, 600 * s, ""},
		{"default 1000s", def, 1000 * s, ""},
		{"default just over 100s", def, 100*s + 1, ""},
		{"default 100s", def, 100 * s,
			"grpcbackoff: MaxAttempts (8) needs up to 100s of delays but the deadline is 100s: only 7 to 8 attempts start in time"},
		{"default 60s", def, 60 * s,
			"grpcbackoff: MaxAttempts (8) needs up to 100s of delays but the deadline is 60s: only 6 attempts start in time"},
		{"default 30s", def, 30 * s,
			"grpcbackoff: MaxAttempts (8) needs up to 100s of delays but the deadline is 30s: only 5 attempts start in time"},
		{"default 1000s+1ns", def, 1000*s + 1,
			"grpcbackoff: gives up after at most 100s of delays, less than a tenth of the 1000s deadline: MaxAttempts up to 36 would still fit"},
		{"default 1h", def, time.Hour,
			"grpcbackoff: gives up after at most 100s of delays, less than a tenth of the 3600s deadline: MaxAttempts up to 117 would still fit"},
		{"three attempts 600s", few, 600 * s,
			"grpcbackoff: gives up after at most 5s of delays, less than a tenth of the 600s deadline: MaxAttempts up to 23 would still fit"},
		{"one attempt", planPolicy(s, 2, 32*s, s, 1), 600 * s,
			"grpcbackoff: gives up after at most 0s of delays, less than a tenth of the 600s deadline: MaxAttempts up to 23 would still fit"},
		{"ten percent 600s", planPolicy(s, 1.1, time.Hour, 0, 50), 600 * s,
			"grpcbackoff: MaxAttempts (50) needs up to 1057.19s of delays but the deadline is 600s: only 44 attempts start in time"},
		{"huge MaxAttempts", planPolicy(s, 2, 32*s, s, math.MaxInt), 600 * s,
			"grpcbackoff: MaxAttempts (9223372036854775807) needs up to 9223372036.855s of delays but the deadline is 600s: only 23 attempts start in time"},
		{"sub-second", planPolicy(time.Millisecond, 2, 100*time.Millisecond, 0, 5), 10 * time.Millisecond,
			"grpcbackoff: MaxAttempts (5) needs up to 15ms of delays but the deadline is 10ms: only 4 attempts start in time"},
		{"zero deadline", def, 0, "grpcbackoff: deadline (0s) must be positive"},
		{"negative deadline", def, -s, "grpcbackoff: deadline (-1s) must be positive"},
		{"invalid policy", planPolicy(2*s, 2, s, 0, 8), 600 * s, "grpcbackoff: Max (1s) is less than Initial (2s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := plan.CheckDeadline(tc.p, tc.deadline)
			if got := planErrString(err); got != tc.want {
				t.Errorf("CheckDeadline(%v) = %q, want %q", tc.deadline, got, tc.want)
			}
		})
	}
}

// planErrString returns err's message, or "" for nil.
func planErrString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// FuzzPlan checks, for any Policy and retry, that the plan never panics nor
// yields a negative duration, and that NextAfter and AttemptsWithin agree
// with Step.
func FuzzPlan(f *testing.F) {
	f.Add(int64(time.Second), 2.0, int64(32*time.Second), int64(time.Second), 8, 7, int64(600*time.Second))
	f.Add(int64(time.Second), 1.1, int64(time.Hour), int64(0), 50, 48, int64(1000*time.Second))
	f.Add(int64(1), 1.0, int64(1), int64(math.MaxInt64), math.MaxInt, math.MaxInt, int64(math.MaxInt64))
	f.Add(int64(1), math.Nextafter(1, 2), int64(math.MaxInt64), int64(0), 3, 1<<60, int64(1)<<62)
	f.Add(int64(math.MaxInt64), 1e308, int64(math.MaxInt64), int64(math.MaxInt64), 2, 1, int64(-1))
	f.Fuzz(func(t *testing.T, initial int64, r float64, maxDelay, jitter int64, attempts, retry int, at int64) {
		p := planPolicy(time.Duration(initial), r, time.Duration(maxDelay), time.Duration(jitter), attempts)
		s := plan.Retry(p, retry)
		next := plan.NextAfter(p, time.Duration(at))
		fewest, most := plan.AttemptsWithin(p, time.Duration(at))
		err := plan.CheckDeadline(p, time.Duration(at))
		if p.Validate() != nil {
			if s != (plan.Step{}) || next != (plan.Step{}) || fewest != 0 || most != 0 || err == nil {
				t.Fatalf("%+v is invalid, yet Step = %+v, NextAfter = %+v, AttemptsWithin = %d, %d, CheckDeadline = %v", p, s, next, fewest, most, err)
			}
			return
		}
		if retry >= 1 {
			planInvariants(t, p, plan.Retry(p, retry-1), s)
		}
		// NextAfter: the first retry after at.
		if next.Retry < 1 || (next.Elapsed <= time.Duration(at) && next.Elapsed < math.MaxInt64) {
			t.Errorf("%+v: NextAfter(%v) = %+v, not after it", p, time.Duration(at), next)
		}
		if prev := plan.Retry(p, next.Retry-1); prev.Elapsed > max(time.Duration(at), 0) {
			t.Errorf("%+v: NextAfter(%v) = retry %d, but retry %d starts at %v, after it", p, time.Duration(at), next.Retry, prev.Retry, prev.Elapsed)
		}
		if at <= 0 {
			if fewest != 0 || most != 0 || err == nil {
				t.Errorf("%+v: AttemptsWithin(%v) = %d, %d and CheckDeadline = %v, want 0, 0 and an error", p, time.Duration(at), fewest, most, err)
			}
			return
		}
		if fewest < 1 || fewest > most || most > p.MaxAttempts {
			t.Errorf("%+v: AttemptsWithin(%v) = %d, %d, want 1 ≤ fewest ≤ most ≤ MaxAttempts", p, time.Duration(at), fewest, most)
		}
		if s := plan.Retry(p, most-1); s.Elapsed >= time.Duration(at) {
			t.Errorf("%+v: AttemptsWithin(%v) most = %d, but retry %d starts at %v", p, time.Duration(at), most, s.Retry, s.Elapsed)
		}
		if most < p.MaxAttempts {
			if s := plan.Retry(p, most); s.Elapsed < time.Duration(at) {
				t.Errorf("%+v: AttemptsWithin(%v) most = %d, but retry %d starts at %v, in time", p, time.Duration(at), most, s.Retry, s.Elapsed)
			}
		}
	})
}

// TestJitterFactor checks the plan of a policy read from a service config
// (multiplicative jitter, as grpc-go draws it): every drawn delay lies in
// [Delay·0.8, MaxDelay], and AttemptsWithin counts from both ends.
func TestJitterFactor(t *testing.T) {
	p := planPolicy(100*time.Millisecond, 2, time.Second, 0, 6)
	p.JitterFactor = 0.2
	want := []struct{ delay, maxDelay, elapsed, maxElapsed time.Duration }{
		{100 * time.Millisecond, 120 * time.Millisecond, 100 * time.Millisecond, 120 * time.Millisecond},
		{200 * time.Millisecond, 240 * time.Millisecond, 300 * time.Millisecond, 360 * time.Millisecond},
		{400 * time.Millisecond, 480 * time.Millisecond, 700 * time.Millisecond, 840 * time.Millisecond},
		{800 * time.Millisecond, 960 * time.Millisecond, 1500 * time.Millisecond, 1800 * time.Millisecond},
		{time.Second, 1200 * time.Millisecond, 2500 * time.Millisecond, 3000 * time.Millisecond},
	}
	i := 0
	for s := range plan.Schedule(p) {
		w := want[i]
		if s.Delay != w.delay || s.MaxDelay != w.maxDelay || s.Elapsed != w.elapsed || s.MaxElapsed != w.maxElapsed {
			t.Errorf("retry %d = %+v, want Delay %v, MaxDelay %v, Elapsed %v, MaxElapsed %v", s.Retry, s, w.delay, w.maxDelay, w.elapsed, w.maxElapsed)
		}
		for range 1000 {
			if d := p.Backoff(s.Retry - 1); d < s.Delay*8/10 || d > s.MaxDelay {
				t.Fatalf("Backoff(%d) = %v, want in [%v, %v]", s.Retry-1, d, s.Delay*8/10, s.MaxDelay)
			}
		}
		i++
	}
	if i != len(want) {
		t.Errorf("Schedule yielded %d retries, want %d", i, len(want))
	}
	// Before 1.3 s: at most retries 1–3 start (the earliest, 0.8·1.5 s =
	// 1.2 s, lets retry 4 in too); at least retries 1–2 (the latest third
	// starts at 0.84 s, the fourth at 1.8 s).
	if fewest, most := plan.AttemptsWithin(p, 1300*time.Millisecond); fewest != 4 || most != 5 {
		t.Errorf("AttemptsWithin(1.3 s) = %d, %d, want 4, 5", fewest, most)
	}
}

// TestHugeMultiplier: a Multiplier Validate accepts, however large, plans the
// schedule it gives: retry 1 after Initial, every later one after Max.
// Before, the first terms of the series overflowed for 1e300: retry 1
// started at 2562047h and AttemptsWithin(600 s) said 1 of 8.
func TestHugeMultiplier(t *testing.T) {
	p := grpcbackoff.DefaultPolicy()
	p.Jitter = 0
	p.Multiplier = 1e300
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	for n, want := range map[int]time.Duration{1: time.Second, 2: 33 * time.Second, 7: 193 * time.Second} {
		if got := plan.Retry(p, n).Elapsed; got != want {
			t.Errorf("Retry(p, %d).Elapsed = %v, want %v", n, got, want)
		}
	}
	if fewest, most := plan.AttemptsWithin(p, 600*time.Second); fewest != 8 || most != 8 {
		t.Errorf("AttemptsWithin(p, 600s) = %d, %d; want 8, 8", fewest, most)
	}
	if err := plan.CheckDeadline(p, 600*time.Second); err != nil {
		t.Errorf("CheckDeadline(p, 600s) = %v, want nil", err)
	}
}
