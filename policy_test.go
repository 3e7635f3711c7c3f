package grpcbackoff_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
)

// maxDuration is the longest time.Duration.
const maxDuration = time.Duration(math.MaxInt64)

// noJitter returns DefaultPolicy with Jitter off, so that delays are exact.
func noJitter() grpcbackoff.Policy {
	p := grpcbackoff.DefaultPolicy()
	p.Jitter = 0
	return p
}

// policy returns a valid Policy with the given arithmetic and no jitter.
func policy(initial time.Duration, multiplier float64, maxDelay time.Duration) grpcbackoff.Policy {
	p := grpcbackoff.DefaultPolicy()
	p.Initial, p.Multiplier, p.Max, p.Jitter = initial, multiplier, maxDelay, 0
	return p
}

func TestDefaultPolicy(t *testing.T) {
	got := grpcbackoff.DefaultPolicy()
	want := grpcbackoff.Policy{
		Initial:     time.Second,
		Multiplier:  2,
		Max:         32 * time.Second,
		Jitter:      time.Second,
		MaxAttempts: 8,
		Codes:       []codes.Code{codes.Unavailable, codes.ResourceExhausted},
	}
	if got.Initial != want.Initial || got.Multiplier != want.Multiplier || got.Max != want.Max ||
		got.Jitter != want.Jitter || got.MaxAttempts != want.MaxAttempts || !slices.Equal(got.Codes, want.Codes) {
		t.Errorf("DefaultPolicy() = %+v, want %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("DefaultPolicy().Validate() = %v, want nil", err)
	}
}

func TestDefaultPolicyIsFresh(t *testing.T) {
	p := grpcbackoff.DefaultPolicy()
	p.Codes[0] = codes.Internal
	p.Codes = append(p.Codes, codes.Aborted)
	p.Initial = time.Hour

	q := grpcbackoff.DefaultPolicy()
	if want := []codes.Code{codes.Unavailable, codes.ResourceExhausted}; !slices.Equal(q.Codes, want) {
		t.Errorf("DefaultPolicy().Codes after changing an earlier one = %v, want %v", q.Codes, want)
	}
	if q.Initial != time.Second {
		t.Errorf("DefaultPolicy().Initial after changing an earlier one = %v, want %v", q.Initial, time.Second)
	}
	// Two fresh values must not share a backing array either.
	r := grpcbackoff.DefaultPolicy()
	r.Codes[1] = codes.Aborted
	if q.Codes[1] != codes.ResourceExhausted {
		t.Errorf("DefaultPolicy() values share Codes: changing one made the other %v", q.Codes)
	}
}

func TestBackoffWithoutJitter(t *testing.T) {
	tests := []struct {
		name  string
		p     grpcbackoff.Policy
		retry int
		want  time.Duration
	}{
		{"default/0", noJitter(), 0, 1 * time.Second},
		{"default/1", noJitter(), 1, 2 * time.Second},
		{"default/2", noJitter(), 2, 4 * time.Second},
		{"default/3", noJitter(), 3, 8 * time.Second},
		{"default/4", noJitter(), 4, 16 * time.Second},
		{"default/5", noJitter(), 5, 32 * time.Second},
		{"default/6", noJitter(), 6, 32 * time.Second},
		{"default/7", noJitter(), 7, 32 * time.Second},
		{"default/62", noJitter(), 62, 32 * time.Second},
		{"default/63", noJitter(), 63, 32 * time.Second},
		{"default/64", noJitter(), 64, 32 * time.Second},
		{"default/200", noJitter(), 200, 32 * time.Second},
		{"default/1000", noJitter(), 1000, 32 * time.Second},
		{"default/1100", noJitter(), 1100, 32 * time.Second},
		{"default/MaxInt", noJitter(), math.MaxInt, 32 * time.Second},
		{"default/-1", noJitter(), -1, 1 * time.Second},
		{"default/MinInt", noJitter(), math.MinInt, 1 * time.Second},

		{"fixed interval/0", policy(3*time.Second, 1, 32*time.Second), 0, 3 * time.Second},
		{"fixed interval/1", policy(3*time.Second, 1, 32*time.Second), 1, 3 * time.Second},
		{"fixed interval/1000", policy(3*time.Second, 1, 32*time.Second), 1000, 3 * time.Second},
		{"fixed interval/MaxInt", policy(3*time.Second, 1, 32*time.Second), math.MaxInt, 3 * time.Second},

		// 1 s · 1.1^n, truncated to the nanosecond.
		{"fractional/0", policy(time.Second, 1.1, 32*time.Second), 0, 1 * time.Second},
		{"fractional/1", policy(time.Second, 1.1, 32*time.Second), 1, 1100 * time.Millisecond},
		{"fractional/2", policy(time.Second, 1.1, 32*time.Second), 2, 1210 * time.Millisecond},
		{"fractional/3", policy(time.Second, 1.1, 32*time.Second), 3, 1331 * time.Millisecond},
		{"fractional/10", policy(time.Second, 1.1, 32*time.Second), 10, 2593742460},
		{"fractional/36", policy(time.Second, 1.1, 32*time.Second), 36, 30912680532},
		{"fractional/37", policy(time.Second, 1.1, 32*time.Second), 37, 32 * time.Second},
		{"fractional/MaxInt", policy(time.Second, 1.1, 32*time.Second), math.MaxInt, 32 * time.Second},

		{"Max == Initial/0", policy(5*time.Second, 2, 5*time.Second), 0, 5 * time.Second},
		{"Max == Initial/1", policy(5*time.Second, 2, 5*time.Second), 1, 5 * time.Second},
		{"Max == Initial/MaxInt", policy(5*time.Second, 2, 5*time.Second), math.MaxInt, 5 * time.Second},

		{"Initial just under Max/0", policy(32*time.Second-1, 2, 32*time.Second), 0, 32*time.Second - 1},
		{"Initial just under Max/1", policy(32*time.Second-1, 2, 32*time.Second), 1, 32 * time.Second},
		{"huge Initial/0", policy(1<<62, 2, maxDuration), 0, 1 << 62},
		{"huge Initial/1", policy(1<<62, 2, maxDuration), 1, maxDuration},
		{"huge Initial/MaxInt", policy(1<<62, 2, maxDuration), math.MaxInt, maxDuration},
		{"Initial == Max == MaxInt64/0", policy(maxDuration, 1, maxDuration), 0, maxDuration},
		{"Initial == Max == MaxInt64/MaxInt", policy(maxDuration, 3, maxDuration), math.MaxInt, maxDuration},

		{"1ns doubling/62", policy(1, 2, maxDuration), 62, 1 << 62},
		{"1ns doubling/63", policy(1, 2, maxDuration), 63, maxDuration},
		{"1ns doubling/1100", policy(1, 2, maxDuration), 1100, maxDuration},
		{"1ns ·1e18/0", policy(1, 1e18, maxDuration), 0, 1},
		{"1ns ·1e18/1", policy(1, 1e18, maxDuration), 1, 1e18},
		{"1ns ·1e18/2", policy(1, 1e18, maxDuration), 2, maxDuration},
		{"1ns ·1e18, Max 32s/1", policy(1, 1e18, 32*time.Second), 1, 32 * time.Second},
		{"1ns ·MaxFloat64/0", policy(1, math.MaxFloat64, 32*time.Second), 0, 1},
		{"1ns ·MaxFloat64/1", policy(1, math.MaxFloat64, 32*time.Second), 1, 32 * time.Second},
		{"1ns ·MaxFloat64/2", policy(1, math.MaxFloat64, 32*time.Second), 2, 32 * time.Second},
		{"1ns ·MaxFloat64/MaxInt", policy(1, math.MaxFloat64, maxDuration), math.MaxInt, maxDuration},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Nominal(tt.retry); got != tt.want {
				t.Errorf("Nominal(%d) = %v, want %v", tt.retry, got, tt.want)
			}
			if got := tt.p.Backoff(tt.retry); got != tt.want {
				t.Errorf("Backoff(%d) = %v, want %v", tt.retry, got, tt.want)
			}
		})
	}
}

// backoff calls p.Backoff(retry), turning a panic into an error.
func backoff(p grpcbackoff.Policy, retry int) (d time.Duration, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return p.Backoff(retry), nil
}

// TestBackoffBounds checks, for valid Policies at the edges, that every delay
// is in (0, Max], within [Nominal, min(Nominal+Jitter, Max)], and that
// Nominal never decreases.
func TestBackoffBounds(t *testing.T) {
	withJitter := func(p grpcbackoff.Policy, j time.Duration) grpcbackoff.Policy {
		p.Jitter = j
		return p
	}
	tests := []struct {
		name string
		p    grpcbackoff.Policy
	}{
		{"default", grpcbackoff.DefaultPolicy()},
		{"no jitter", noJitter()},
		{"fixed interval", withJitter(policy(3*time.Second, 1, 32*time.Second), time.Second)},
		{"fractional", withJitter(policy(time.Second, 1.1, 32*time.Second), time.Second)},
		{"Max == Initial", withJitter(policy(5*time.Second, 2, 5*time.Second), time.Second)},
		{"1ns jitter", withJitter(policy(time.Nanosecond, 2, time.Second), time.Nanosecond)},
		{"jitter above Max", withJitter(policy(time.Millisecond, 2, time.Second), time.Hour)},
		{"1ns ·1e18", withJitter(policy(1, 1e18, maxDuration), time.Second)},
		{"1ns ·MaxFloat64", withJitter(policy(1, math.MaxFloat64, maxDuration), time.Second)},
		{"huge Initial, huge jitter", withJitter(policy(1<<62, 2, maxDuration), 1<<62)},
		{"jitter overflows", withJitter(policy(1<<62, 2, maxDuration), maxDuration-1)},
		// The largest Jitter Validate accepts.
		{"Jitter MaxInt64", withJitter(policy(time.Second, 2, maxDuration), maxDuration)},
	}
	retries := []int{math.MinInt, -1}
	for r := 0; r <= 130; r++ {
		retries = append(retries, r)
	}
	retries = append(retries, 1000, 1100, math.MaxInt)

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.p.Validate(); err != nil {
				t.Fatalf("Validate() = %v, want nil", err)
			}
			prev := time.Duration(0)
			for _, r := range retries {
				n := tt.p.Nominal(r)
				if n <= 0 || n > tt.p.Max {
					t.Errorf("Nominal(%d) = %v, want in (0, %v]", r, n, tt.p.Max)
				}
				if r >= 0 && n < prev {
					t.Errorf("Nominal(%d) = %v, less than Nominal of the retry before (%v)", r, n, prev)
				}
				prev = n
				hi := tt.p.Max
				if n <= tt.p.Max-tt.p.Jitter {
					hi = n + tt.p.Jitter
				}
				for range 20 {
					d, err := backoff(tt.p, r)
					if err != nil {
						t.Fatalf("Backoff(%d): %v, want a delay in [%v, %v]", r, err, n, hi)
					}
					if d <= 0 || d > tt.p.Max {
						t.Fatalf("Backoff(%d) = %v, want in (0, %v]", r, d, tt.p.Max)
					}
					if d < n || d > hi {
						t.Fatalf("Backoff(%d) = %v, want in [%v, %v]", r, d, n, hi)
					}
				}
			}
		})
	}
}

func TestBackoffJitterRange(t *testing.T) {
	p := grpcbackoff.DefaultPolicy() // 1 s jitter, 32 s cap
	p.Max = 20 * time.Second
	p.Jitter = 5 * time.Second
	tests := []struct {
		retry  int
		lo, hi time.Duration
	}{
		{0, 1 * time.Second, 6 * time.Second},
		{1, 2 * time.Second, 7 * time.Second},
		{2, 4 * time.Second, 9 * time.Second},
		{3, 8 * time.Second, 13 * time.Second},
		{4, 16 * time.Second, 20 * time.Second}, // jitter cut by the cap
		{5, 20 * time.Second, 20 * time.Second}, // at the cap: exactly Max
		{6, 20 * time.Second, 20 * time.Second},
		{math.MaxInt, 20 * time.Second, 20 * time.Second},
	}
	const n = 2000
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.retry), func(t *testing.T) {
			atMax := 0
			for range n {
				d := p.Backoff(tt.retry)
				if d < tt.lo || d > tt.hi {
					t.Fatalf("Backoff(%d) = %v, want in [%v, %v]", tt.retry, d, tt.lo, tt.hi)
				}
				if d == p.Max {
					atMax++
				}
			}
			switch {
			case tt.lo == p.Max && atMax != n:
				t.Errorf("Backoff(%d) was Max %d times in %d, want every time", tt.retry, atMax, n)
			case tt.retry == 4 && (atMax == 0 || atMax == n):
				// 16 s + U[0, 5 s] is capped whenever the draw is ≥ 4 s: a fifth.
				t.Errorf("Backoff(%d) was Max %d times in %d, want about a fifth", tt.retry, atMax, n)
			}
		})
	}
}

// TestBackoffJitterFactor checks the multiplicative jitter as grpc-go draws
// it: b·U[0.8, 1.2] with b = min(Initial·Multiplier^n, Max), so that the cap
// comes before the jitter and a delay at the cap reaches 1.2·Max.
func TestBackoffJitterFactor(t *testing.T) {
	p := noJitter()
	p.Initial, p.Max, p.JitterFactor = 100*time.Millisecond, time.Second, 0.2
	if got, want := p.MaxBackoff(), 1200*time.Millisecond; got != want {
		t.Errorf("MaxBackoff() = %v, want %v", got, want)
	}
	const n = 4000
	for retry, b := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		b *= time.Millisecond
		lo, hi := b*8/10, b*12/10
		var sum float64
		below, above := 0, 0
		for range n {
			d := p.Backoff(retry)
			if d < lo || d > hi {
				t.Fatalf("Backoff(%d) = %v, want in [%v, %v]", retry, d, lo, hi)
			}
			sum += float64(d) / float64(b)
			if d < b*9/10 {
				below++
			}
			if d > b*11/10 {
				above++
			}
		}
		// Uniform on [0.8, 1.2]: mean 1, a quarter of the draws in each
		// outer tenth (±5 standard deviations at n = 4000 is about ±0.034).
		if mean := sum / n; math.Abs(mean-1) > 0.01 {
			t.Errorf("Backoff(%d): mean factor %.4f, want 1 ± 0.01", retry, mean)
		}
		for _, c := range []int{below, above} {
			if f := float64(c) / n; math.Abs(f-0.25) > 0.034 {
				t.Errorf("Backoff(%d): %.3f of the draws in an outer tenth, want 0.25", retry, f)
			}
		}
	}
	// With both jitters, the additive one comes first and Max caps it.
	p.Jitter = 500 * time.Millisecond
	for range n {
		if d := p.Backoff(3); d < 640*time.Millisecond || d > 1200*time.Millisecond {
			t.Fatalf("Backoff(3) with both jitters = %v, want in [640ms, 1.2s]", d)
		}
	}
	// The default policy is untouched: the exact additive recipe.
	if d := grpcbackoff.DefaultPolicy(); d.JitterFactor != 0 || d.MaxBackoff() != d.Max {
		t.Errorf("DefaultPolicy JitterFactor = %v, MaxBackoff = %v, want 0 and Max", d.JitterFactor, d.MaxBackoff())
	}
}

// TestBackoffJitterDistribution checks that the jitter of DefaultPolicy is a
// fresh uniform draw from [0, 1 s] on every call.
func TestBackoffJitterDistribution(t *testing.T) {
	const (
		n    = 20000
		bins = 10
		// Critical value of χ² with 9 degrees of freedom for p = 6e-7: a
		// correct implementation fails about once in two million runs.
		chi2Critical = 46.0
	)
	p := grpcbackoff.DefaultPolicy()
	lo, width := time.Second, time.Second // U[1 s, 2 s]

	samples := make([]time.Duration, n)
	for i := range samples {
		samples[i] = p.Backoff(0)
	}

	var sum float64
	counts := make([]int, bins)
	distinct := make(map[time.Duration]bool, n)
	lower, upper, equalNeighbours := 0, 0, 0
	for i, d := range samples {
		if d < lo || d > lo+width {
			t.Fatalf("Backoff(0) = %v, want in [%v, %v]", d, lo, lo+width)
		}
		x := float64(d - lo) // in [0, 1e9]
		sum += x
		// Bins over the width+1 possible values, so that the inclusive
		// upper bound falls in the last bin.
		counts[int(x*bins/(float64(width)+1))]++
		distinct[d] = true
		if x < float64(width)/2 {
			lower++
		} else {
			upper++
		}
		if i > 0 && d == samples[i-1] {
			equalNeighbours++
		}
	}

	// With 1e9+1 values, 20000 draws repeat a value 0.2 times on average.
	if len(distinct) < n-10 {
		t.Errorf("Backoff(0) gave %d distinct values in %d calls, want at least %d: jitter is not fresh", len(distinct), n, n-10)
	}
	if equalNeighbours > 1 {
		t.Errorf("Backoff(0) gave the same value on %d consecutive calls, want at most 1 in %d", equalNeighbours, n)
	}

	mean := sum / n
	sdMean := float64(width) / math.Sqrt(12*n)
	if want := float64(width) / 2; math.Abs(mean-want) > 6*sdMean {
		t.Errorf("mean jitter of Backoff(0) = %v, want %v ± %v", time.Duration(mean), time.Duration(want), time.Duration(6*sdMean))
	}

	sdHalf := math.Sqrt(n) / 2
	for _, h := range []struct {
		name  string
		count int
	}{{"lower", lower}, {"upper", upper}} {
		if math.Abs(float64(h.count)-n/2) > 6*sdHalf {
			t.Errorf("Backoff(0) fell in the %s half of [1s, 2s] %d times in %d, want %d ± %.0f", h.name, h.count, n, n/2, 6*sdHalf)
		}
	}

	var chi2 float64
	expected := float64(n) / bins
	for _, c := range counts {
		chi2 += (float64(c) - expected) * (float64(c) - expected) / expected
	}
	if chi2 > chi2Critical {
		t.Errorf("χ² of Backoff(0) over %d bins = %.1f, want ≤ %.1f; counts %v", bins, chi2, chi2Critical, counts)
	}
}

// TestBackoffJitterInclusive checks that the upper bound of the jitter is
// reached: with 1 ns of jitter, half the delays are 1 ns longer.
func TestBackoffJitterInclusive(t *testing.T) {
	p := grpcbackoff.DefaultPolicy()
	p.Jitter = time.Nanosecond
	seen := map[time.Duration]int{}
	for range 200 {
		d := p.Backoff(0)
		if d != time.Second && d != time.Second+1 {
			t.Fatalf("Backoff(0) = %v, want %v or %v", d, time.Second, time.Second+1)
		}
		seen[d]++
	}
	if seen[time.Second] == 0 || seen[time.Second+1] == 0 {
		t.Errorf("Backoff(0) over 200 calls gave %v, want both 1s and 1.000000001s", seen)
	}
}

func TestBackoffConcurrent(t *testing.T) {
	p := grpcbackoff.DefaultPolicy()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				r := (g + i) % 10
				if d, n := p.Backoff(r), p.Nominal(r); d < n || d > p.Max {
					t.Errorf("Backoff(%d) = %v, want in [%v, %v]", r, d, n, p.Max)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestValidate(t *testing.T) {
	with := func(f func(*grpcbackoff.Policy)) grpcbackoff.Policy {
		p := grpcbackoff.DefaultPolicy()
		f(&p)
		return p
	}
	allCodes := func() []codes.Code {
		var cs []codes.Code
		for c := codes.Canceled; c <= codes.Unauthenticated; c++ {
			cs = append(cs, c)
		}
		return cs
	}
	tests := []struct {
		name string
		p    grpcbackoff.Policy
		want []string // one fragment per error expected; nil: valid
	}{
		{"default", grpcbackoff.DefaultPolicy(), nil},
		{"no jitter", noJitter(), nil},
		{"one attempt", with(func(p *grpcbackoff.Policy) { p.MaxAttempts = 1 }), nil},
		{"fixed interval", with(func(p *grpcbackoff.Policy) { p.Multiplier = 1 }), nil},
		{"Max == Initial", with(func(p *grpcbackoff.Policy) { p.Max = p.Initial }), nil},
		{"every code but OK", with(func(p *grpcbackoff.Policy) { p.Codes = allCodes() }), nil},
		{"1ns Initial", with(func(p *grpcbackoff.Policy) { p.Initial = 1 }), nil},

		{"zero Policy", grpcbackoff.Policy{}, []string{
			"Initial (0s) must be positive",
			"Multiplier (0) must be at least 1",
			"Max (0s) must be positive",
			"MaxAttempts (0) must be at least 1",
			"Codes is empty",
		}},
		{"negative Initial", with(func(p *grpcbackoff.Policy) { p.Initial = -time.Second }), []string{
			"Initial (-1s) must be positive",
		}},
		{"NaN Multiplier", with(func(p *grpcbackoff.Policy) { p.Multiplier = math.NaN() }), []string{
			"Multiplier (NaN) must be a finite number",
		}},
		{"+Inf Multiplier", with(func(p *grpcbackoff.Policy) { p.Multiplier = math.Inf(1) }), []string{
			"Multiplier (+Inf) must be a finite number",
		}},
		{"-Inf Multiplier", with(func(p *grpcbackoff.Policy) { p.Multiplier = math.Inf(-1) }), []string{
			"Multiplier (-Inf) must be a finite number",
		}},
		{"Multiplier 0.5", with(func(p *grpcbackoff.Policy) { p.Multiplier = 0.5 }), []string{
			"Multiplier (0.5) must be at least 1",
		}},
		{"negative Multiplier", with(func(p *grpcbackoff.Policy) { p.Multiplier = -2 }), []string{
			"Multiplier (-2) must be at least 1",
		}},
		{"negative Max", with(func(p *grpcbackoff.Policy) { p.Max = -time.Second }), []string{
			"Max (-1s) must be positive",
		}},
		{"Max < Initial", with(func(p *grpcbackoff.Policy) { p.Initial, p.Max = 2*time.Second, time.Second }), []string{
			"Max (1s) is less than Initial (2s)",
		}},
		{"negative Jitter", with(func(p *grpcbackoff.Policy) { p.Jitter = -time.Millisecond }), []string{
			"Jitter (-1ms) must not be negative",
		}},
		{"JitterFactor 0.2", with(func(p *grpcbackoff.Policy) { p.JitterFactor = 0.2 }), nil},
		{"negative JitterFactor", with(func(p *grpcbackoff.Policy) { p.JitterFactor = -0.1 }), []string{
			"JitterFactor (-0.1) must be a number in [0, 1)",
		}},
		{"JitterFactor 1", with(func(p *grpcbackoff.Policy) { p.JitterFactor = 1 }), []string{
			"JitterFactor (1) must be a number in [0, 1)",
		}},
		{"NaN JitterFactor", with(func(p *grpcbackoff.Policy) { p.JitterFactor = math.NaN() }), []string{
			"JitterFactor (NaN) must be a number in [0, 1)",
		}},
		{"negative MaxAttempts", with(func(p *grpcbackoff.Policy) { p.MaxAttempts = -3 }), []string{
			"MaxAttempts (-3) must be at least 1",
		}},
		{"no Codes", with(func(p *grpcbackoff.Policy) { p.Codes = nil }), []string{
			"Codes is empty",
		}},
		{"OK in Codes", with(func(p *grpcbackoff.Policy) { p.Codes = []codes.Code{codes.Unavailable, codes.OK} }), []string{
			"Codes[1] is OK",
		}},
		{"code 17", with(func(p *grpcbackoff.Policy) { p.Codes = []codes.Code{17} }), []string{
			"Codes[0] (17) is not a gRPC status code",
		}},
		{"code 99", with(func(p *grpcbackoff.Policy) { p.Codes = []codes.Code{codes.Unavailable, 99} }), []string{
			"Codes[1] (99) is not a gRPC status code",
		}},
		{"duplicate code", with(func(p *grpcbackoff.Policy) {
			p.Codes = []codes.Code{codes.Unavailable, codes.ResourceExhausted, codes.Unavailable}
		}), []string{
			"Codes[2] (Unavailable) is listed twice",
		}},
		{"everything wrong", grpcbackoff.Policy{
			Initial:     2 * time.Second,
			Multiplier:  math.NaN(),
			Max:         time.Second,
			Jitter:      -time.Second,
			MaxAttempts: 0,
			Codes:       []codes.Code{codes.OK, 17, codes.Aborted, codes.Aborted},
		}, []string{
			"Multiplier (NaN) must be a finite number",
			"Max (1s) is less than Initial (2s)",
			"Jitter (-1s) must not be negative",
			"MaxAttempts (0) must be at least 1",
			"Codes[0] is OK",
			"Codes[1] (17) is not a gRPC status code",
			"Codes[3] (Aborted) is listed twice",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			checkJoined(t, "Validate()", err, tt.want)
		})
	}
}

// checkJoined checks that err holds exactly one error per fragment in want,
// each prefixed with the package name and containing its fragment.
func checkJoined(t *testing.T, call string, err error, want []string) {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Errorf("%s = %v, want nil", call, err)
		}
		return
	}
	if err == nil {
		t.Fatalf("%s = nil, want errors %q", call, want)
	}
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	if len(errs) != len(want) {
		t.Errorf("%s gave %d errors, want %d:\n%v", call, len(errs), len(want), err)
	}
	for _, e := range errs {
		if !strings.HasPrefix(e.Error(), "grpcbackoff: ") {
			t.Errorf("%s error %q, want the prefix %q", call, e, "grpcbackoff: ")
		}
	}
	for _, w := range want {
		if !slices.ContainsFunc(errs, func(e error) bool { return strings.Contains(e.Error(), w) }) {
			t.Errorf("%s = %q, want an error containing %q", call, err, w)
		}
	}
}
