// Package grpcbackoff describes how failed gRPC calls are retried: a Policy
// of exponential backoff with jitter (the Memorystore recipe by default), the
// codes that are retried, and the hints a server may give about when to come
// back. The interceptors that carry out a Policy are in the interceptor
// package.
//
// The delay before retry n (n = 0 for the first retry) is
//
//	min(Initial·Multiplier^n + U[0, Jitter], Max) · U[1−JitterFactor, 1+JitterFactor]
//
// where each U is a fresh uniform draw for every retry. With DefaultPolicy
// (JitterFactor 0) that is 1–2 s, 2–3 s, 4–5 s, 8–9 s, 16–17 s, then 32 s at
// the cap until MaxAttempts is reached. A policy read from a gRPC service
// config uses JitterFactor 0.2 and no Jitter instead, as grpc-go does:
// b·U[0.8, 1.2] with b = min(initialBackoff·multiplier^n, maxBackoff).
package grpcbackoff

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
)

// Policy says how often, how long and on which codes a call is retried.
//
// A Policy is a plain value: copy it and change fields freely. It has no
// usable zero value: every field must be set, and Validate says which are
// not. Start from DefaultPolicy and change what differs.
type Policy struct {
	// Initial is the delay before the first retry, before jitter (a in
	// t(T) = a + (r-1)·T). It must be positive. Default 1 s.
	Initial time.Duration

	// Multiplier is the factor by which the delay grows with each retry (r).
	// It must be a finite number ≥ 1; 1 gives a fixed interval. Default 2.
	Multiplier float64

	// Max caps every delay (maximum_backoff) after the additive Jitter and
	// before the multiplicative JitterFactor: once the exponential term
	// reaches Max, every further retry waits exactly Max with JitterFactor 0,
	// and Max·U[1−JitterFactor, 1+JitterFactor] otherwise. It must be at least
	// Initial. A server may ask for longer (see RetryDelay). Default 32 s.
	Max time.Duration

	// Jitter is the upper bound, inclusive, of the uniform random delay added
	// to every wait (random_number_milliseconds). It must not be negative;
	// 0 turns jitter off. Default 1 s.
	Jitter time.Duration

	// JitterFactor is the spread of a multiplicative jitter: every delay,
	// once capped by Max, is multiplied by a fresh uniform draw in
	// [1−JitterFactor, 1+JitterFactor] (gRFC A6 as grpc-go carries it out
	// uses 0.2). It must be a number in [0, 1); 0, the default, turns it
	// off. It may be combined with Jitter, which is added first.
	JitterFactor float64

	// MaxAttempts is the total number of attempts, the first one included:
	// 1 means no retry. It must be at least 1. Default 8.
	MaxAttempts int

	// AttemptTimeout bounds how long an attempt waits for the server to
	// answer: an attempt whose response headers have not arrived that long
	// after it started (for a stream, after the caller began waiting in one
	// operation: see interceptor.Stream) is cut, and retried like a
	// retryable code, whatever Codes says. Once its headers arrived, an
	// attempt is never cut: it lasts as long as the caller's deadline
	// allows. The timeout is the client's own, not sent to the server as a
	// deadline. It must not be negative; 0, the default, means no cut.
	AttemptTimeout time.Duration

	// Codes are the status codes that are retried. Other codes, and OK, are
	// returned to the caller at once. It must not be empty nor contain OK or
	// a code outside the 17 defined by gRPC. Default UNAVAILABLE and
	// RESOURCE_EXHAUSTED.
	Codes []codes.Code
}

// DefaultPolicy returns the Memorystore recipe: wait min(2^n s + U[0, 1 s],
// 32 s) after the n-th failure with UNAVAILABLE or RESOURCE_EXHAUSTED (the
// gRPC counterparts of HTTP 503 and 429), for at most 8 attempts.
//
// Eight attempts make seven waits of 1, 2, 4, 8, 16, 32 and 32 s plus up to
// 5 s of jitter: at most 100 s, a sixth of the 600 s timeouts of the Cloud
// Redis client, with two retries at the cap.
//
// It returns a fresh value each time; changing it changes nobody else's.
func DefaultPolicy() Policy {
	return Policy{
		Initial:     time.Second,
		Multiplier:  2,
		Max:         32 * time.Second,
		Jitter:      time.Second,
		MaxAttempts: 8,
		Codes:       []codes.Code{codes.Unavailable, codes.ResourceExhausted},
	}
}

// maxCode is the largest status code defined by gRPC (Unauthenticated).
const maxCode = codes.Unauthenticated

// Validate reports every field that makes p unusable, all at once, each named
// with its value. It returns nil for a usable Policy.
func (p Policy) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("grpcbackoff: "+format, args...))
	}
	if p.Initial <= 0 {
		bad("Initial (%v) must be positive", p.Initial)
	}
	switch {
	case math.IsNaN(p.Multiplier) || math.IsInf(p.Multiplier, 0):
		bad("Multiplier (%v) must be a finite number", p.Multiplier)
	case p.Multiplier < 1:
		bad("Multiplier (%v) must be at least 1", p.Multiplier)
	}
	if p.Max <= 0 {
		bad("Max (%v) must be positive", p.Max)
	} else if p.Initial > 0 && p.Max < p.Initial {
		bad("Max (%v) is less than Initial (%v)", p.Max, p.Initial)
	}
	if p.Jitter < 0 {
		bad("Jitter (%v) must not be negative", p.Jitter)
	}
	if !(p.JitterFactor >= 0 && p.JitterFactor < 1) {
		bad("JitterFactor (%v) must be a number in [0, 1)", p.JitterFactor)
	}
	if p.AttemptTimeout < 0 {
		bad("AttemptTimeout (%v) must not be negative", p.AttemptTimeout)
	}
	if p.MaxAttempts < 1 {
		bad("MaxAttempts (%d) must be at least 1", p.MaxAttempts)
	}
	if len(p.Codes) == 0 {
		bad("Codes is empty: no code would be retried")
	}
	checkCodes("Codes", p.Codes, bad)
	return errors.Join(errs...)
}

// checkCodes reports, through bad, every code of cs, a field named name,
// that is OK, not a gRPC status code, or listed twice.
func checkCodes(name string, cs []codes.Code, bad func(format string, args ...any)) {
	for i, c := range cs {
		switch {
		case c == codes.OK:
			bad("%s[%d] is OK, which is not an error", name, i)
		case c > maxCode:
			bad("%s[%d] (%d) is not a gRPC status code", name, i, uint32(c))
		case slices.Index(cs, c) < i:
			bad("%s[%d] (%v) is listed twice", name, i, c)
		}
	}
}

// Backoff returns the delay before retry number retry (0 for the first
// retry, the second attempt): min(Initial·Multiplier^retry + U[0, Jitter], Max),
// multiplied by U[1−JitterFactor, 1+JitterFactor] when JitterFactor is set,
// with fresh uniform draws on each call. A negative retry counts as 0.
//
// It is exact for any retry count: once the exponential term reaches Max
// (2^200 s is far past every clock), the result is Max (times the factor).
// For a valid Policy the result is always in (0, MaxBackoff()]. Backoff is
// safe for concurrent use.
func (p Policy) Backoff(retry int) time.Duration {
	d := p.Nominal(retry)
	if d < p.Max && p.Jitter > 0 {
		// Inclusive of both bounds, as "at most 1000 ms" is.
		d += time.Duration(rand.Uint64N(uint64(p.Jitter) + 1))
		if d > p.Max || d < 0 { // d < 0 only on overflow
			d = p.Max
		}
	}
	if p.JitterFactor > 0 {
		d = scale(d, 1-p.JitterFactor+2*p.JitterFactor*rand.Float64())
	}
	return d
}

// MaxBackoff returns the longest delay Backoff can return:
// Max·(1+JitterFactor), saturated at the longest time.Duration.
func (p Policy) MaxBackoff() time.Duration {
	return scale(p.Max, 1+p.JitterFactor)
}

// scale returns d·f for a positive f, at least 1 ns and saturated at the
// longest time.Duration.
func scale(d time.Duration, f float64) time.Duration {
	x := float64(d) * f
	switch {
	case !(x < math.MaxInt64): // float64(MaxInt64) is 2^63
		return math.MaxInt64
	case x < 1:
		return 1
	}
	return time.Duration(x)
}

// Nominal returns the delay before retry number retry without jitter:
// min(Initial·Multiplier^retry, Max). A negative retry counts as 0.
func (p Policy) Nominal(retry int) time.Duration {
	if retry < 0 {
		retry = 0
	}
	f := float64(p.Initial) * math.Pow(p.Multiplier, float64(retry))
	// The comparison is false for NaN, so an invalid Policy cannot produce a
	// NaN-born duration either.
	if !(f < float64(p.Max)) {
		return p.Max
	}
	return time.Duration(f)
}
