package grpcbackoff

import (
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// PushbackKey is the trailer in which a gRPC server asks for a retry delay,
// in milliseconds, as gRFC A6 defines it.
const PushbackKey = "grpc-retry-pushback-ms"

// Retryable reports whether p retries code c.
func (p Policy) Retryable(c codes.Code) bool {
	for _, rc := range p.Codes {
		if rc == c {
			return true
		}
	}
	return false
}

// Hint is what a server said, in a failed attempt, about retrying it.
//
// A server can ask for a delay in two ways: a google.rpc.RetryInfo detail in
// the status (Google APIs), or the grpc-retry-pushback-ms trailer (gRFC A6).
// Both mean "not sooner than this"; when both are present the longer delay
// wins. A hint can only lengthen the wait the Policy computes, never shorten
// it, so no server can make a client retry in a tight loop.
type Hint struct {
	// Delay is the least delay the server asked for; 0 if it asked for none.
	Delay time.Duration
	// Stop is true when the server asked not to retry: a pushback trailer
	// that is negative, malformed or sent more than once (gRFC A6).
	Stop bool
}

// ServerHint reads the retry hints of a failed attempt from its status
// (RetryInfo details) and its trailer metadata (pushback), either of which
// may be nil.
//
// The bounds, for hostile or broken servers: a negative or malformed
// RetryInfo delay is ignored (the Policy's own delay applies), one too large
// for a protobuf Duration counts as the longest time.Duration; a pushback trailer that
// is not a single non-negative decimal integer of milliseconds means Stop; a
// delay too large for a time.Duration saturates. What a long delay means is
// decided by Policy.RetryDelay.
func ServerHint(st *status.Status, trailer metadata.MD) Hint {
	var h Hint
	if st != nil {
		h.Delay = retryInfoDelay(st)
	}
	if vals := trailer.Get(PushbackKey); len(vals) > 0 {
		d, ok := parsePushback(vals)
		if !ok {
			return Hint{Stop: true}
		}
		h.Delay = max(h.Delay, d)
	}
	return h
}

// retryInfoDelay returns the longest RetryInfo delay in st's details, or 0.
// (Details allocates nothing for a status without details, the common case.)
func retryInfoDelay(st *status.Status) time.Duration {
	var longest time.Duration
	for _, d := range st.Details() {
		ri, ok := d.(*errdetails.RetryInfo)
		if !ok || ri.GetRetryDelay() == nil {
			continue
		}
		d := ri.GetRetryDelay()
		switch {
		case d.CheckValid() == nil:
			// AsDuration saturates instead of overflowing.
			longest = max(longest, d.AsDuration())
		case d.GetSeconds() > 0 && d.GetNanos() >= 0:
			// Beyond the 10,000 years a Duration may hold, but clearly
			// positive: as long as a time.Duration can be.
			longest = time.Duration(1<<63 - 1)
		}
	}
	return longest
}

// parsePushback reads the values of a pushback trailer: exactly one
// non-negative decimal integer of milliseconds.
func parsePushback(vals []string) (time.Duration, bool) {
	if len(vals) != 1 {
		return 0, false
	}
	s := vals[0]
	if s == "" {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms > int64(time.Duration(1<<63-1)/time.Millisecond) {
		// Only digits, so too large: a valid but absurd value; saturate.
		return time.Duration(1<<63 - 1), true
	}
	return time.Duration(ms) * time.Millisecond, true
}

// MaxHintDelay is the longest delay a server hint can make a call wait, for
// a Policy whose MaxBackoff is shorter: a hint longer than both ends the
// retries at once (see RetryDelay). It keeps a call without a deadline from
// waiting hours or years because a server said so, while honouring the
// minute-scale waits of rate limits.
const MaxHintDelay = 5 * time.Minute

// RetryDelay returns how long to wait before retry number retry (0 for the
// first retry) given the server's hint, and whether to retry at all: the
// longer of Backoff(retry) and h.Delay.
//
// It returns false when the server asked not to retry (h.Stop), or asked for
// a delay longer than both MaxHintDelay and MaxBackoff: retrying sooner than
// the server asked would only add load, so the last error goes back to the
// caller at once. A hint longer than Max but within that cap is waited for
// (a server asking for 40 s under a 32 s Max gets its 40 s). The caller's
// deadline is not known here: the interceptors also end the retries at once
// when the delay would pass it.
func (p Policy) RetryDelay(retry int, h Hint) (time.Duration, bool) {
	if h.Stop || h.Delay > max(MaxHintDelay, p.MaxBackoff()) {
		return 0, false
	}
	return max(p.Backoff(retry), h.Delay), true
}
