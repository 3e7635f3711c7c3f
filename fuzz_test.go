package grpcbackoff

import (
	"math"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// FuzzBackoff checks that for any Policy that Validate accepts and any retry
// count, Backoff and Nominal stay in (0, Max], never panic, and that
// Backoff lies within Jitter above Nominal (or at Max).
func FuzzBackoff(f *testing.F) {
	f.Add(int64(time.Second), 2.0, int64(32*time.Second), int64(time.Second), 8, 0)
	f.Add(int64(1), 1.0, int64(1), int64(0), 1, 1000)
	f.Add(int64(100*time.Millisecond), math.E, int64(5*time.Minute), int64(10*time.Millisecond), 50, 200)
	f.Add(int64(1), math.MaxFloat64, int64(math.MaxInt64), int64(math.MaxInt64), 2, math.MaxInt)
	f.Add(int64(math.MaxInt64), 1.0000001, int64(math.MaxInt64), int64(0), 3, -5)
	f.Fuzz(func(t *testing.T, initial int64, mult float64, maxd int64, jitter int64, attempts int, retry int) {
		p := Policy{
			Initial: time.Duration(initial), Multiplier: mult, Max: time.Duration(maxd),
			Jitter: time.Duration(jitter), MaxAttempts: attempts, Codes: []codes.Code{codes.Unavailable},
		}
		if p.Validate() != nil {
			return
		}
		n := p.Nominal(retry)
		if n <= 0 || n > p.Max {
			t.Fatalf("%+v: Nominal(%d) = %v, want in (0, %v]", p, retry, n, p.Max)
		}
		b := p.Backoff(retry)
		if b <= 0 || b > p.Max {
			t.Fatalf("%+v: Backoff(%d) = %v, want in (0, %v]", p, retry, b, p.Max)
		}
		if b < n || (b != p.Max && b-n > p.Jitter) {
			t.Fatalf("%+v: Backoff(%d) = %v, want within Jitter above Nominal %v", p, retry, b, n)
		}
		if next := p.Nominal(retry + 1); retry < math.MaxInt && retry >= 0 && next < n {
			t.Fatalf("%+v: Nominal(%d) = %v < Nominal(%d) = %v, want non-decreasing", p, retry+1, next, retry, n)
		}
	})
}

// FuzzValidate checks that Validate never panics, and that every Policy it
// accepts can compute delays and server hints without panicking.
func FuzzValidate(f *testing.F) {
	f.Add(int64(0), 0.0, int64(0), int64(0), 0, uint32(0), uint32(0))
	f.Add(int64(-1), math.NaN(), int64(-1), int64(-1), -1, uint32(17), uint32(14))
	f.Add(int64(time.Second), math.Inf(1), int64(time.Second/2), int64(1), 3, uint32(14), uint32(14))
	f.Fuzz(func(t *testing.T, initial int64, mult float64, maxd int64, jitter int64, attempts int, c1, c2 uint32) {
		p := Policy{
			Initial: time.Duration(initial), Multiplier: mult, Max: time.Duration(maxd),
			Jitter: time.Duration(jitter), MaxAttempts: attempts, Codes: []codes.Code{codes.Code(c1), codes.Code(c2)},
		}
		if err := p.Validate(); err != nil {
			if err.Error() == "" {
				t.Fatal("Validate returned an error with no message")
			}
			return
		}
		for _, retry := range []int{0, 1, 63, 64, 1 << 20, math.MaxInt} {
			if d, ok := p.RetryDelay(retry, Hint{Delay: p.Max}); !ok || d != p.Max {
				t.Fatalf("%+v: RetryDelay(%d, Max) = %v, %v; want Max, true", p, retry, d, ok)
			}
		}
	})
}

// FuzzServerHint checks the parsing of hostile server hints: RetryInfo
// durations of any sign and size, and pushback trailers of any content.
func FuzzServerHint(f *testing.F) {
	f.Add(int64(1), int32(0), "100", false)
	f.Add(int64(-1), int32(-5), "-1", true)
	f.Add(int64(math.MaxInt64), int32(999999999), "99999999999999999999", true)
	f.Add(int64(0), int32(0), "", true)
	f.Add(int64(3), int32(-1), "1e3", true)
	f.Add(int64(0), int32(0), " 7", true)
	f.Fuzz(func(t *testing.T, secs int64, nanos int32, pushback string, withPushback bool) {
		st, err := status.New(codes.Unavailable, "x").WithDetails(&errdetails.RetryInfo{
			RetryDelay: &durationpb.Duration{Seconds: secs, Nanos: nanos},
		})
		if err != nil {
			t.Fatal(err)
		}
		var md metadata.MD
		if withPushback {
			md = metadata.MD{PushbackKey: []string{pushback}}
		}
		h := ServerHint(st, md)
		if h.Delay < 0 {
			t.Fatalf("ServerHint(%ds %dns, %q) delay = %v, want ≥ 0", secs, nanos, pushback, h.Delay)
		}
		digits := pushback != ""
		for _, r := range pushback {
			digits = digits && r >= '0' && r <= '9'
		}
		if withPushback && h.Stop == digits {
			t.Fatalf("pushback %q: Stop = %v, want %v", pushback, h.Stop, !digits)
		}
		p := DefaultPolicy()
		d, ok := p.RetryDelay(0, h)
		if ok && (d <= 0 || d > max(p.Max, h.Delay)) {
			t.Fatalf("RetryDelay(0, %+v) = %v, want in (0, max(Max, hint)]", h, d)
		}
		if ok == (h.Stop || h.Delay > MaxHintDelay) {
			t.Fatalf("RetryDelay(0, %+v) ok = %v", h, ok)
		}
	})
}
