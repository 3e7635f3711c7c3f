// Package plan answers questions about a grpcbackoff.Policy before any call
// is made: its schedule of retries, which retry comes next after a given
// elapsed time, how many attempts fit a deadline, and which multiplier gives
// a wanted spacing. Command backoffplan prints its answers.
package plan

import (
	"fmt"
	"iter"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
)

// This file plans a Policy: its schedule of retries, the inverse (which
// retry comes next at a given elapsed time), and how it fits a deadline.
//
// The arithmetic follows the usual derivation for initial delay a and
// multiplier r, with retries numbered from 1 as the literature does: the
// delay before retry n is t_n = a·r^(n-1), the total delay up to retry n is
// T_n = a·(r^n - 1)/(r - 1), and so the delay after it is
//
//	t_{n+1} = a + (r - 1)·T_n
//
// After a long time the next wait is about (r - 1) times the time already
// waited: a multiplier of 1.1 retries about every 10% of the elapsed time.
// Retry n is attempt n+1, and its delay is drawn by Backoff(n-1).
//
// Everything here is a pure function of the Policy's Initial, Multiplier,
// Max, Jitter, JitterFactor and MaxAttempts (Codes plays no part), exact at every retry
// count: past the cap every delay is Max, and times saturate at the longest
// time.Duration (about 292 years) instead of overflowing.

// A Step is one retry in a Policy's schedule: its number, its delay and when
// it starts. All times are from the start of the first attempt and count the
// delays only: the attempts' own durations are not known here, so add them
// for wall-clock time.
type Step struct {
	// Retry is the retry's number, from 1: retry n is attempt n+1, and its
	// delay is drawn by grpcbackoff.Policy.Backoff(n-1). Retry 0 stands for the first
	// attempt, which has no delay.
	Retry int

	// Delay is the nominal delay before the retry, without jitter:
	// Nominal(Retry-1) = min(Initial·Multiplier^(Retry-1), Max), the t_n of
	// the derivation. Jitter only adds, so with JitterFactor 0 it is also
	// the shortest delay; otherwise the shortest is Delay·(1−JitterFactor).
	Delay time.Duration

	// MaxDelay is the longest delay before the retry, with the most jitter:
	// min(Delay+Jitter, Max)·(1+JitterFactor). It equals Delay when both
	// jitters are 0, and at the cap when JitterFactor is 0.
	MaxDelay time.Duration

	// Elapsed is when the retry starts if every delay is nominal: the sum of
	// Delay over retries 1 to Retry, the T_n of the derivation. Below the cap
	// it is computed in closed form, Initial·(r^n - 1)/(r - 1), so it may
	// differ from the sum of the truncated Delays by a few nanoseconds; past
	// the cap it grows by Max per retry. With JitterFactor 0 it is also the
	// earliest start; otherwise the earliest is Elapsed·(1−JitterFactor).
	Elapsed time.Duration

	// MaxElapsed is when the retry starts if every delay is MaxDelay: the
	// latest start, and so the longest the Policy can take to reach it.
	MaxElapsed time.Duration
}

// Retry returns retry number retry of p's schedule, counting from 1 (retry n
// is attempt n+1). A retry of 0 or less gives the first attempt: Retry 0 and
// all durations 0. It is not limited by MaxAttempts, so it also answers what
// a longer policy would do, and it takes constant time for any retry.
//
// For a Policy whose Initial, Multiplier, Max, Jitter, JitterFactor or
// MaxAttempts Validate rejects, it returns the zero Step.
func Retry(p grpcbackoff.Policy, retry int) Step {
	pl, ok := newPlanner(p)
	if !ok {
		return Step{}
	}
	return pl.step(retry)
}

// Schedule yields the MaxAttempts-1 retries of p in order, from retry 1, as
// a table like the derivation's: with Initial 1 s, Multiplier 2 and no cap
// the Elapsed times are 1, 3, 7, … 1023 s. For a longer table, raise
// MaxAttempts on a copy of p: nothing else depends on it. The sequence is
// lazy, so a huge MaxAttempts costs only what the caller consumes.
//
// For a Policy whose Initial, Multiplier, Max, Jitter, JitterFactor or
// MaxAttempts Validate rejects, Schedule yields nothing.
func Schedule(p grpcbackoff.Policy) iter.Seq[Step] {
	return func(yield func(Step) bool) {
		pl, ok := newPlanner(p)
		if !ok {
			return
		}
		for n := 1; n < p.MaxAttempts; n++ {
			if !yield(pl.step(n)) {
				return
			}
		}
	}
}

// NextAfter returns the first retry that starts strictly after elapsed on
// the nominal schedule (no jitter): the inverse of Schedule. Its Delay is the
// wait that follows the last retry started by then, and its Retry-1 is the
// number of retries started by then. At a retry's own start it returns the
// following retry: with Initial 1 s and Multiplier 2, NextAfter(1023 s) is
// retry 11, after a wait of 1024 s (t_{n+1} = a + (r-1)·T_n with n = 10).
//
// It honors Max (past the cap the waits are Max and the times grow by Max
// per retry), works for a Multiplier of 1 (a fixed interval), and counts a
// negative elapsed as 0, which gives retry 1. It is not limited by
// MaxAttempts: when Retry is MaxAttempts or more, p has given up by elapsed.
// Retry numbers stop growing at math.MaxInt.
//
// For a Policy whose Initial, Multiplier, Max, Jitter, JitterFactor or
// MaxAttempts Validate rejects, it returns the zero Step.
func NextAfter(p grpcbackoff.Policy, elapsed time.Duration) Step {
	pl, ok := newPlanner(p)
	if !ok {
		return Step{}
	}
	// The number of retries started by elapsed: Elapsed grows with the
	// retry number, so a binary search finds it in 63 steps at most.
	n := sort.Search(math.MaxInt-1, func(k int) bool { return pl.elapsed(k+1) > elapsed })
	return pl.step(n + 1)
}

// AttemptsWithin returns how many of p's attempts start before deadline,
// counting the first one at 0 and the delays only (not the attempts' own
// durations): fewest when every delay has the most jitter, most when every
// delay has the least (the nominal one, times 1−JitterFactor). Both are at most MaxAttempts; an attempt due exactly at the
// deadline does not count, as the interceptors do not start it. A deadline
// of 0 or less gives 0, 0.
//
// For a Policy whose Initial, Multiplier, Max, Jitter, JitterFactor or
// MaxAttempts Validate rejects, it returns 0, 0.
func AttemptsWithin(p grpcbackoff.Policy, deadline time.Duration) (fewest, most int) {
	pl, ok := newPlanner(p)
	if !ok || deadline <= 0 {
		return 0, 0
	}
	return pl.attemptsWithin(deadline, pl.maxElapsed), pl.attemptsWithin(deadline, pl.minElapsed)
}

// CheckDeadline reports whether p suits calls with the given deadline (for
// example the 600 s timeouts of the Cloud Redis client). It returns nil when
// it does, and otherwise an error that says why and what would fit:
//
//   - the delays before the last attempt can exceed the deadline (with the
//     most jitter), so some calls can never use all of MaxAttempts;
//   - the last attempt starts, even with the most jitter, before a tenth of
//     the deadline, so the policy gives up long before the caller would.
//
// Between the two, for example DefaultPolicy (at most 100 s) against 600 s,
// it returns nil. As for AttemptsWithin, the attempts' own durations are not
// counted. It returns Validate's error for a Policy whose Initial,
// Multiplier, Max, Jitter, JitterFactor or MaxAttempts Validate rejects, and an error for
// a deadline of 0 or less.
func CheckDeadline(p grpcbackoff.Policy, deadline time.Duration) error {
	pl, ok := newPlanner(p)
	if !ok {
		return planValidate(p)
	}
	if deadline <= 0 {
		return fmt.Errorf("grpcbackoff: deadline (%v) must be positive", deadline)
	}
	last := pl.maxElapsed(p.MaxAttempts - 1)
	// last < deadline/giveUpFraction in exact arithmetic, without overflow.
	early := deadline / giveUpFraction
	if deadline%giveUpFraction != 0 {
		early++
	}
	switch {
	case last >= deadline:
		fewest, most := pl.attemptsWithin(deadline, pl.maxElapsed), pl.attemptsWithin(deadline, pl.minElapsed)
		fit := strconv.Itoa(fewest)
		if most != fewest {
			fit += " to " + strconv.Itoa(most)
		}
		return fmt.Errorf("grpcbackoff: MaxAttempts (%d) needs up to %s of delays but the deadline is %s: only %s attempts start in time",
			p.MaxAttempts, planSeconds(last), planSeconds(deadline), fit)
	case last < early:
		wide := pl
		wide.p.MaxAttempts = math.MaxInt
		fit := wide.attemptsWithin(deadline, wide.maxElapsed)
		return fmt.Errorf("grpcbackoff: gives up after at most %s of delays, less than a tenth of the %s deadline: MaxAttempts up to %d would still fit",
			planSeconds(last), planSeconds(deadline), fit)
	}
	return nil
}

// giveUpFraction is the part of a deadline under which CheckDeadline says a
// policy gives up too early: 10, a tenth.
const giveUpFraction = 10

// MultiplierForRatio returns the Multiplier that makes each wait about ratio
// times the time already waited, once that time is long against Initial:
// 1 + ratio, since t(T) = a + (r - 1)·T. A ratio of 0.1, a retry about every
// 10% of the elapsed time, gives 1.1. It returns an error naming the value
// for a ratio that is not a positive finite number. A ratio too small to
// change 1 in a float64 (below about 1e-16) gives 1, a fixed interval.
func MultiplierForRatio(ratio float64) (float64, error) {
	switch {
	case math.IsNaN(ratio) || math.IsInf(ratio, 0):
		return 0, fmt.Errorf("grpcbackoff: ratio (%v) must be a finite number", ratio)
	case ratio <= 0:
		return 0, fmt.Errorf("grpcbackoff: ratio (%v) must be positive", ratio)
	}
	return 1 + ratio, nil
}

// RetryCountRatio returns about how many times as many retries the same
// elapsed time holds when the Multiplier changes from from to to:
// log(from)/log(to), since T_n grows as a·r^n. From 2 to 1.1 it is about
// 7.27. It is an upper estimate: the a term makes the real ratio smaller
// (about 5 at 1000 s for Initial 1 s).
//
// Both multipliers must be finite and greater than 1: with a fixed interval
// the count grows linearly, not logarithmically, and there is no such ratio.
// It returns an error naming the value otherwise.
func RetryCountRatio(from, to float64) (float64, error) {
	for _, m := range [...]struct {
		name string
		r    float64
	}{{"from", from}, {"to", to}} {
		if !(m.r > 1) || math.IsInf(m.r, 0) {
			return 0, fmt.Errorf("grpcbackoff: multiplier %s (%v) must be a finite number greater than 1", m.name, m.r)
		}
	}
	return math.Log(from) / math.Log(to), nil
}

// planner holds what every Step of a Policy needs, worked out once.
type planner struct {
	p grpcbackoff.Policy
	// capped is the number of retries whose delay is below Max: retries
	// 1..capped follow the geometric series, later ones wait Max.
	capped int
	// jittered is the number of retries whose delay plus Jitter is below Max:
	// retries 1..jittered wait up to Delay+Jitter, later ones up to Max.
	jittered int
	// logR is log(Multiplier), computed as log1p(Multiplier-1) for accuracy
	// near 1.
	logR float64
}

// planCodes stands in for the Codes of a Policy being planned, which the plan
// does not use, so that Validate checks only the other fields.
var planCodes = []codes.Code{codes.Unavailable}

// planValidate is Validate for the fields a plan uses.
func planValidate(p grpcbackoff.Policy) error {
	p.Codes = planCodes
	return p.Validate()
}

func newPlanner(p grpcbackoff.Policy) (planner, bool) {
	if planValidate(p) != nil {
		return planner{}, false
	}
	// Nominal grows with the retry number (Multiplier ≥ 1), so both counts
	// are binary searches, and they agree with Nominal exactly.
	return planner{
		p:        p,
		capped:   sort.Search(math.MaxInt, func(j int) bool { return p.Nominal(j) >= p.Max }),
		jittered: sort.Search(math.MaxInt, func(j int) bool { return planAdd(p.Nominal(j), p.Jitter) >= p.Max }),
		logR:     math.Log1p(p.Multiplier - 1),
	}, true
}

// step returns retry n (n ≤ 0: the first attempt).
func (pl planner) step(n int) Step {
	if n <= 0 {
		return Step{}
	}
	d := pl.p.Nominal(n - 1)
	return Step{
		Retry:      n,
		Delay:      d,
		MaxDelay:   pl.spread(min(planAdd(d, pl.p.Jitter), pl.p.Max), 1),
		Elapsed:    pl.elapsed(n),
		MaxElapsed: pl.maxElapsed(n),
	}
}

// geometric returns the sum of the first n uncapped delays, Initial·(r^n -
// 1)/(r - 1), saturated; n must be at most pl.capped.
func (pl planner) geometric(n int) time.Duration {
	if pl.p.Multiplier == 1 {
		return planMul(pl.p.Initial, n)
	}
	// expm1 and log1p keep the precision that r^n - 1 and r - 1 lose when
	// r is close to 1; dividing before multiplying keeps a huge r from
	// overflowing the first terms.
	f := math.Expm1(float64(n)*pl.logR) / (pl.p.Multiplier - 1) * float64(pl.p.Initial)
	return planDuration(f)
}

// elapsed returns the nominal start of retry n (n ≥ 0), saturated.
func (pl planner) elapsed(n int) time.Duration {
	k := min(n, pl.capped)
	return planAdd(pl.geometric(k), planMul(pl.p.Max, n-k))
}

// maxElapsed returns the latest start of retry n (n ≥ 0), saturated.
func (pl planner) maxElapsed(n int) time.Duration {
	k := min(n, pl.jittered)
	return pl.spread(planAdd(planAdd(pl.geometric(k), planMul(pl.p.Jitter, k)), planMul(pl.p.Max, n-k)), 1)
}

// minElapsed returns the earliest start of retry n (n ≥ 0), saturated.
func (pl planner) minElapsed(n int) time.Duration {
	return pl.spread(pl.elapsed(n), -1)
}

// spread returns d·(1+sign·JitterFactor), rounded and saturated: the
// longest (sign 1) or shortest (sign −1) that the multiplicative jitter
// makes of d. It is d itself when JitterFactor is 0.
func (pl planner) spread(d time.Duration, sign float64) time.Duration {
	if pl.p.JitterFactor == 0 {
		return d
	}
	return planDuration(float64(d) * (1 + sign*pl.p.JitterFactor))
}

// attemptsWithin returns how many attempts start before deadline (> 0) when
// retry n starts at start(n), at most MaxAttempts.
func (pl planner) attemptsWithin(deadline time.Duration, start func(int) time.Duration) int {
	// The first attempt starts at 0; count the retries that start in time.
	return 1 + sort.Search(pl.p.MaxAttempts-1, func(k int) bool { return start(k+1) >= deadline })
}

// planAdd returns a+b for non-negative a and b, saturated at the longest
// Duration.
func planAdd(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// planMul returns d·n for non-negative d and n, saturated at the longest
// Duration.
func planMul(d time.Duration, n int) time.Duration {
	if n == 0 || d == 0 {
		return 0
	}
	if d > math.MaxInt64/time.Duration(n) {
		return math.MaxInt64
	}
	return d * time.Duration(n)
}

// planDuration converts nanoseconds to a Duration, rounded, saturated at the
// longest Duration; NaN saturates too, so no NaN-born duration escapes.
func planDuration(ns float64) time.Duration {
	switch {
	case !(ns < math.MaxInt64): // also NaN; float64(MaxInt64) is 2^63
		return math.MaxInt64
	case ns <= 0:
		return 0
	}
	return time.Duration(math.Round(ns))
}

// planSeconds formats d as seconds to the millisecond, as in "100s" or
// "960.172s", which reads better than "1m40s" next to deadlines given in
// seconds. Below a second it uses Duration's format ("500ms").
func planSeconds(d time.Duration) string {
	if d < time.Second {
		return d.String()
	}
	s := strconv.FormatFloat(float64(d.Round(time.Millisecond))/1e9, 'f', 3, 64)
	return strings.TrimSuffix(strings.TrimRight(s, "0"), ".") + "s"
}
