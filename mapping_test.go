package grpcbackoff_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/platformkit/grpcbackoff"
)

// unavailable returns an UNAVAILABLE status with the given details. It
// panics if they cannot be attached.
func unavailable(details ...protoadapt.MessageV1) *status.Status {
	st, err := status.New(codes.Unavailable, "try later").WithDetails(details...)
	if err != nil {
		panic(fmt.Sprintf("WithDetails: %v", err))
	}
	return st
}

// retryInfo returns a RetryInfo detail asking for d.
func retryInfo(d time.Duration) *errdetails.RetryInfo {
	return &errdetails.RetryInfo{RetryDelay: durationpb.New(d)}
}

// rawRetryInfo returns a RetryInfo detail with a delay that may be invalid.
func rawRetryInfo(seconds int64, nanos int32) *errdetails.RetryInfo {
	return &errdetails.RetryInfo{RetryDelay: &durationpb.Duration{Seconds: seconds, Nanos: nanos}}
}

// pushback returns a trailer with the given pushback values.
func pushback(vals ...string) metadata.MD {
	md := metadata.MD{}
	md.Append(grpcbackoff.PushbackKey, vals...)
	return md
}

func TestRetryable(t *testing.T) {
	p := grpcbackoff.DefaultPolicy()
	tests := []struct {
		code codes.Code
		want bool
	}{
		{codes.Unavailable, true},
		{codes.ResourceExhausted, true},
		{codes.OK, false},
		{codes.Internal, false},
		{codes.DeadlineExceeded, false},
		{codes.Canceled, false},
		{codes.Aborted, false},
		{codes.Unauthenticated, false},
		{17, false},
	}
	for _, tt := range tests {
		t.Run(tt.code.String(), func(t *testing.T) {
			if got := p.Retryable(tt.code); got != tt.want {
				t.Errorf("Retryable(%v) = %v, want %v", tt.code, got, tt.want)
			}
		})
	}
	p.Codes = []codes.Code{codes.Aborted}
	if !p.Retryable(codes.Aborted) || p.Retryable(codes.Unavailable) {
		t.Errorf("with Codes %v: Retryable(Aborted) = %v, Retryable(Unavailable) = %v, want true, false",
			p.Codes, p.Retryable(codes.Aborted), p.Retryable(codes.Unavailable))
	}
}

func TestPushbackKey(t *testing.T) {
	if grpcbackoff.PushbackKey != "grpc-retry-pushback-ms" {
		t.Errorf("PushbackKey = %q, want %q (gRFC A6)", grpcbackoff.PushbackKey, "grpc-retry-pushback-ms")
	}
}

func TestServerHint(t *testing.T) {
	const (
		year = 365 * 24 * time.Hour
		// The largest seconds a google.protobuf.Duration may hold (10000 years).
		maxPBSeconds = 315_576_000_000
	)
	tests := []struct {
		name    string
		st      *status.Status
		trailer metadata.MD
		want    grpcbackoff.Hint
	}{
		{"nothing", nil, nil, grpcbackoff.Hint{}},
		{"empty trailer", nil, metadata.MD{}, grpcbackoff.Hint{}},
		{"other trailers", nil, metadata.Pairs("retry-after", "5", "grpc-status", "14"), grpcbackoff.Hint{}},
		{"status without details", status.New(codes.Unavailable, "down"), nil, grpcbackoff.Hint{}},
		{"OK status", status.New(codes.OK, ""), nil, grpcbackoff.Hint{}},

		// RetryInfo.
		{"RetryInfo 0", unavailable(retryInfo(0)), nil, grpcbackoff.Hint{}},
		{"RetryInfo 3s", unavailable(retryInfo(3 * time.Second)), nil, grpcbackoff.Hint{Delay: 3 * time.Second}},
		{"RetryInfo 1.5ms", unavailable(retryInfo(1500 * time.Microsecond)), nil, grpcbackoff.Hint{Delay: 1500 * time.Microsecond}},
		{"RetryInfo -1s ignored", unavailable(retryInfo(-time.Second)), nil, grpcbackoff.Hint{}},
		{"RetryInfo 100 years", unavailable(retryInfo(100 * year)), nil, grpcbackoff.Hint{Delay: 100 * year}},
		{"RetryInfo 10000 years saturates", unavailable(rawRetryInfo(maxPBSeconds, 0)), nil, grpcbackoff.Hint{Delay: maxDuration}},
		{"RetryInfo 293 years saturates", unavailable(rawRetryInfo(293*365*24*3600, 0)), nil, grpcbackoff.Hint{Delay: maxDuration}},
		{"RetryInfo without delay", unavailable(&errdetails.RetryInfo{}), nil, grpcbackoff.Hint{}},
		{"RetryInfo 1s -1ns invalid", unavailable(rawRetryInfo(1, -1)), nil, grpcbackoff.Hint{}},
		{"RetryInfo -1s +1ns invalid", unavailable(rawRetryInfo(-1, 1)), nil, grpcbackoff.Hint{}},
		{"RetryInfo 1e9 nanos invalid", unavailable(rawRetryInfo(0, 1e9)), nil, grpcbackoff.Hint{}},
		{"RetryInfo past 10000 years saturates", unavailable(rawRetryInfo(maxPBSeconds+1, 0)), nil, grpcbackoff.Hint{Delay: math.MaxInt64}},
		{"RetryInfo past 10000 years, negative, ignored", unavailable(rawRetryInfo(-maxPBSeconds-1, 0)), nil, grpcbackoff.Hint{}},
		{"several RetryInfo: longest wins", unavailable(retryInfo(time.Second), retryInfo(5*time.Second), retryInfo(2*time.Second)), nil,
			grpcbackoff.Hint{Delay: 5 * time.Second}},
		{"invalid RetryInfo beside a valid one", unavailable(rawRetryInfo(-maxPBSeconds-1, 0), retryInfo(2*time.Second), rawRetryInfo(9, -1)), nil,
			grpcbackoff.Hint{Delay: 2 * time.Second}},
		{"other details ignored", unavailable(
			&errdetails.ErrorInfo{Reason: "RATE_LIMITED", Domain: "example.com"},
			&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: "project:p"}}},
			&errdetails.DebugInfo{Detail: "no retry here"},
		), nil, grpcbackoff.Hint{}},
		{"RetryInfo among other details", unavailable(
			&errdetails.ErrorInfo{Reason: "RATE_LIMITED"},
			retryInfo(4*time.Second),
			&errdetails.DebugInfo{Detail: "x"},
		), nil, grpcbackoff.Hint{Delay: 4 * time.Second}},

		// Pushback trailer (gRFC A6).
		{`pushback "0"`, nil, pushback("0"), grpcbackoff.Hint{}},
		{`pushback "1500"`, nil, pushback("1500"), grpcbackoff.Hint{Delay: 1500 * time.Millisecond}},
		{`pushback "00015"`, nil, pushback("00015"), grpcbackoff.Hint{Delay: 15 * time.Millisecond}},
		{`pushback via Pairs`, nil, metadata.Pairs(grpcbackoff.PushbackKey, "250"), grpcbackoff.Hint{Delay: 250 * time.Millisecond}},
		{`pushback "9223372036854" (largest in range)`, nil, pushback("9223372036854"), grpcbackoff.Hint{Delay: 9223372036854 * time.Millisecond}},
		{`pushback "9223372036855" saturates`, nil, pushback("9223372036855"), grpcbackoff.Hint{Delay: maxDuration}},
		{`pushback "9223372036854775807" saturates`, nil, pushback("9223372036854775807"), grpcbackoff.Hint{Delay: maxDuration}},
		{`pushback "99999999999999999999" saturates`, nil, pushback("99999999999999999999"), grpcbackoff.Hint{Delay: maxDuration}},
		{`pushback "-1"`, nil, pushback("-1"), grpcbackoff.Hint{Stop: true}},
		{`pushback "-0"`, nil, pushback("-0"), grpcbackoff.Hint{Stop: true}},
		{`pushback "abc"`, nil, pushback("abc"), grpcbackoff.Hint{Stop: true}},
		{`pushback ""`, nil, pushback(""), grpcbackoff.Hint{Stop: true}},
		{`pushback "+5"`, nil, pushback("+5"), grpcbackoff.Hint{Stop: true}},
		{`pushback " 5"`, nil, pushback(" 5"), grpcbackoff.Hint{Stop: true}},
		{`pushback "5 "`, nil, pushback("5 "), grpcbackoff.Hint{Stop: true}},
		{`pushback "1.5"`, nil, pushback("1.5"), grpcbackoff.Hint{Stop: true}},
		{`pushback "1e3"`, nil, pushback("1e3"), grpcbackoff.Hint{Stop: true}},
		{`pushback "0x10"`, nil, pushback("0x10"), grpcbackoff.Hint{Stop: true}},
		{`pushback "1_000"`, nil, pushback("1_000"), grpcbackoff.Hint{Stop: true}},
		{`pushback "١٢" (Arabic digits)`, nil, pushback("١٢"), grpcbackoff.Hint{Stop: true}},
		{`pushback "-99999999999999999999"`, nil, pushback("-99999999999999999999"), grpcbackoff.Hint{Stop: true}},
		// Malformed, though it starts with more digits than an int64 holds:
		// "not a non-negative decimal integer" must mean Stop, not saturate.
		{`pushback "99999999999999999999x"`, nil, pushback("99999999999999999999x"), grpcbackoff.Hint{Stop: true}},
		{`pushback "99999999999999999999.5"`, nil, pushback("99999999999999999999.5"), grpcbackoff.Hint{Stop: true}},
		{`pushback "99999999999999999999 "`, nil, pushback("99999999999999999999 "), grpcbackoff.Hint{Stop: true}},
		{"two pushback values", nil, pushback("100", "100"), grpcbackoff.Hint{Stop: true}},
		{"two different pushback values", nil, pushback("100", "5000"), grpcbackoff.Hint{Stop: true}},

		// Both.
		{"RetryInfo longer than pushback", unavailable(retryInfo(3 * time.Second)), pushback("1500"), grpcbackoff.Hint{Delay: 3 * time.Second}},
		{"pushback longer than RetryInfo", unavailable(retryInfo(time.Second)), pushback("2500"), grpcbackoff.Hint{Delay: 2500 * time.Millisecond}},
		{"RetryInfo and pushback 0", unavailable(retryInfo(time.Second)), pushback("0"), grpcbackoff.Hint{Delay: time.Second}},
		{"RetryInfo and malformed pushback", unavailable(retryInfo(3 * time.Second)), pushback("-1"), grpcbackoff.Hint{Stop: true}},
		{"invalid RetryInfo and pushback", unavailable(rawRetryInfo(1, -1)), pushback("700"), grpcbackoff.Hint{Delay: 700 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := grpcbackoff.ServerHint(tt.st, tt.trailer); got != tt.want {
				t.Errorf("ServerHint(st, %v) = %+v, want %+v", tt.trailer, got, tt.want)
			}
		})
	}
}

func TestRetryDelay(t *testing.T) {
	p := noJitter() // 1, 2, 4, 8, 16, 32, 32 s
	tests := []struct {
		name   string
		retry  int
		h      grpcbackoff.Hint
		want   time.Duration
		wantOK bool
	}{
		{"no hint", 0, grpcbackoff.Hint{}, time.Second, true},
		{"no hint, retry 3", 3, grpcbackoff.Hint{}, 8 * time.Second, true},
		{"no hint, at the cap", 10, grpcbackoff.Hint{}, 32 * time.Second, true},
		{"Stop", 0, grpcbackoff.Hint{Stop: true}, 0, false},
		{"Stop with a delay", 0, grpcbackoff.Hint{Delay: time.Second, Stop: true}, 0, false},
		{"Delay > Max is waited for", 0, grpcbackoff.Hint{Delay: 32*time.Second + 1}, 32*time.Second + 1, true},
		{"Delay 40 s under a 32 s Max", 0, grpcbackoff.Hint{Delay: 40 * time.Second}, 40 * time.Second, true},
		{"Delay == MaxHintDelay", 0, grpcbackoff.Hint{Delay: grpcbackoff.MaxHintDelay}, grpcbackoff.MaxHintDelay, true},
		{"Delay > MaxHintDelay", 0, grpcbackoff.Hint{Delay: grpcbackoff.MaxHintDelay + 1}, 0, false},
		{"Delay saturated", 0, grpcbackoff.Hint{Delay: maxDuration}, 0, false},
		{"Delay == Max", 0, grpcbackoff.Hint{Delay: 32 * time.Second}, 32 * time.Second, true},
		{"hint shorter than backoff", 0, grpcbackoff.Hint{Delay: 500 * time.Millisecond}, time.Second, true},
		{"hint shorter than backoff, retry 3", 3, grpcbackoff.Hint{Delay: 3 * time.Second}, 8 * time.Second, true},
		{"hint longer than backoff", 0, grpcbackoff.Hint{Delay: 3 * time.Second}, 3 * time.Second, true},
		{"hint longer than backoff, retry 3", 3, grpcbackoff.Hint{Delay: 20 * time.Second}, 20 * time.Second, true},
		{"hint equal to backoff", 2, grpcbackoff.Hint{Delay: 4 * time.Second}, 4 * time.Second, true},
		{"negative hint", 0, grpcbackoff.Hint{Delay: -time.Second}, time.Second, true},
		{"negative retry", -5, grpcbackoff.Hint{}, time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := p.RetryDelay(tt.retry, tt.h)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("RetryDelay(%d, %+v) = %v, %v, want %v, %v", tt.retry, tt.h, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestRetryDelayWithJitter(t *testing.T) {
	p := grpcbackoff.DefaultPolicy() // retry 0: U[1 s, 2 s]
	tests := []struct {
		name   string
		h      grpcbackoff.Hint
		lo, hi time.Duration
	}{
		{"no hint", grpcbackoff.Hint{}, time.Second, 2 * time.Second},
		{"hint inside the jitter", grpcbackoff.Hint{Delay: 1500 * time.Millisecond}, 1500 * time.Millisecond, 2 * time.Second},
		{"hint past the jitter", grpcbackoff.Hint{Delay: 5 * time.Second}, 5 * time.Second, 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 1000 {
				got, ok := p.RetryDelay(0, tt.h)
				if !ok || got < tt.lo || got > tt.hi {
					t.Fatalf("RetryDelay(0, %+v) = %v, %v, want in [%v, %v], true", tt.h, got, ok, tt.lo, tt.hi)
				}
			}
		})
	}
}

// TestServerHintRetryDelay checks what a client does with what servers say.
func TestServerHintRetryDelay(t *testing.T) {
	t.Run("a Max beyond MaxHintDelay is the cap", func(t *testing.T) {
		p := noJitter()
		p.Max = time.Hour
		p.JitterFactor = 0.2
		if d, ok := p.RetryDelay(0, grpcbackoff.Hint{Delay: 72 * time.Minute}); !ok || d != 72*time.Minute {
			t.Errorf("RetryDelay(0, 72 min) under Max 1 h, JitterFactor 0.2 = %v, %v, want 72m0s, true", d, ok)
		}
		if _, ok := p.RetryDelay(0, grpcbackoff.Hint{Delay: 72*time.Minute + 1}); ok {
			t.Error("RetryDelay(0, 72 min + 1 ns) under Max 1 h, JitterFactor 0.2 is honoured, want refused")
		}
	})
	p := noJitter()
	tests := []struct {
		name    string
		st      *status.Status
		trailer metadata.MD
		want    time.Duration
		wantOK  bool
	}{
		{"no hint", status.New(codes.Unavailable, ""), nil, time.Second, true},
		{"RetryInfo 10s", unavailable(retryInfo(10 * time.Second)), nil, 10 * time.Second, true},
		{"RetryInfo 40s", unavailable(retryInfo(40 * time.Second)), nil, 40 * time.Second, true},
		{"RetryInfo 1h", unavailable(retryInfo(time.Hour)), nil, 0, false},
		{"RetryInfo 0 does not make a tight loop", unavailable(retryInfo(0)), pushback("0"), time.Second, true},
		{"pushback 32000", nil, pushback("32000"), 32 * time.Second, true},
		{"pushback 32001", nil, pushback("32001"), 32001 * time.Millisecond, true},
		{"pushback 300000", nil, pushback("300000"), 5 * time.Minute, true},
		{"pushback 300001", nil, pushback("300001"), 0, false},
		{"pushback absurd", nil, pushback("99999999999999999999"), 0, false},
		{"pushback malformed", nil, pushback("soon"), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := grpcbackoff.ServerHint(tt.st, tt.trailer)
			got, ok := p.RetryDelay(0, h)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("RetryDelay(0, %+v) = %v, %v, want %v, %v", h, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}
