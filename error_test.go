package grpcbackoff_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/platformkit/grpcbackoff"
)

func TestReasonString(t *testing.T) {
	tests := []struct {
		r    grpcbackoff.Reason
		want string
	}{
		{grpcbackoff.ReasonExhausted, "attempts exhausted"},
		{grpcbackoff.ReasonNotRetryable, "code not retryable"},
		{grpcbackoff.ReasonDeadline, "next retry would pass the deadline"},
		{grpcbackoff.ReasonCanceled, "canceled while waiting"},
		{grpcbackoff.ReasonServerRefused, "server asked not to retry"},
		{grpcbackoff.ReasonThrottled, "retry throttled"},
		{grpcbackoff.ReasonNone, "none"},
		{grpcbackoff.ReasonRejectedLocally, "rejected locally by adaptive throttling"},
		{grpcbackoff.ReasonClientRetries, "left to the client's own retry"},
		{grpcbackoff.ReasonGRPCRetries, "left to grpc-go's own retry"},
		{grpcbackoff.ReasonGRPCRetries + 1, "Reason(10)"},
		{-1, "Reason(-1)"},
		{1 << 40, "Reason(1099511627776)"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.r.String(); got != tt.want {
				t.Errorf("Reason(%d).String() = %q, want %q", int(tt.r), got, tt.want)
			}
		})
	}
}

func TestError(t *testing.T) {
	retry := retryInfo(2 * time.Second)
	info := &errdetails.ErrorInfo{Reason: "BACKEND_DOWN", Domain: "redis.googleapis.com", Metadata: map[string]string{"zone": "a"}}
	withDetails, err := status.New(codes.Unavailable, "backend down").WithDetails(retry, info)
	if err != nil {
		t.Fatalf("WithDetails: %v", err)
	}
	plain := errors.New("connection reset")
	canceled := status.FromContextError(context.Canceled).Err()

	tests := []struct {
		name     string
		e        *grpcbackoff.Error
		wantCode codes.Code
		wantMsg  string // the status message
		details  []proto.Message
	}{
		{
			name:     "details kept",
			e:        &grpcbackoff.Error{Err: withDetails.Err(), Attempts: 3, Elapsed: 7*time.Second + 200*time.Microsecond, Reason: grpcbackoff.ReasonExhausted},
			wantCode: codes.Unavailable,
			wantMsg:  "backend down (grpcbackoff: 3 attempts over 7s: attempts exhausted)",
			details:  []proto.Message{retry, info},
		},
		{
			name:     "one attempt",
			e:        &grpcbackoff.Error{Err: status.Error(codes.ResourceExhausted, "quota"), Attempts: 1, Elapsed: 1499 * time.Microsecond, Reason: grpcbackoff.ReasonDeadline},
			wantCode: codes.ResourceExhausted,
			wantMsg:  "quota (grpcbackoff: 1 attempt over 1ms: next retry would pass the deadline)",
		},
		{
			name:     "not retryable",
			e:        &grpcbackoff.Error{Err: status.Error(codes.NotFound, "no such key"), Attempts: 2, Elapsed: 1500 * time.Millisecond, Reason: grpcbackoff.ReasonNotRetryable},
			wantCode: codes.NotFound,
			wantMsg:  "no such key (grpcbackoff: 2 attempts over 1.5s: code not retryable)",
		},
		{
			name:     "server refused",
			e:        &grpcbackoff.Error{Err: status.Error(codes.Unavailable, ""), Attempts: 4, Elapsed: 15 * time.Second, Reason: grpcbackoff.ReasonServerRefused},
			wantCode: codes.Unavailable,
			wantMsg:  " (grpcbackoff: 4 attempts over 15s: server asked not to retry)",
		},
		{
			name:     "canceled",
			e:        &grpcbackoff.Error{Err: canceled, Attempts: 2, Elapsed: 1200 * time.Millisecond, Reason: grpcbackoff.ReasonCanceled},
			wantCode: codes.Canceled,
			wantMsg:  context.Canceled.Error() + " (grpcbackoff: 2 attempts over 1.2s: canceled while waiting)",
		},
		{
			name:     "not a status error",
			e:        &grpcbackoff.Error{Err: plain, Attempts: 2, Elapsed: 1500 * time.Millisecond, Reason: grpcbackoff.ReasonThrottled},
			wantCode: codes.Unknown,
			wantMsg:  "connection reset (grpcbackoff: 2 attempts over 1.5s: retry throttled)",
		},
		{
			name:     "wrapped status error",
			e:        &grpcbackoff.Error{Err: fmt.Errorf("get: %w", withDetails.Err()), Attempts: 8, Elapsed: 100 * time.Second, Reason: grpcbackoff.ReasonExhausted},
			wantCode: codes.Unavailable,
			wantMsg:  "get: rpc error: code = Unavailable desc = backend down (grpcbackoff: 8 attempts over 1m40s: attempts exhausted)",
			details:  []proto.Message{retry, info},
		},
		{
			name:     "unknown reason",
			e:        &grpcbackoff.Error{Err: status.Error(codes.Unavailable, "x"), Attempts: 2, Elapsed: time.Second, Reason: 42},
			wantCode: codes.Unavailable,
			wantMsg:  "x (grpcbackoff: 2 attempts over 1s: Reason(42))",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error = tt.e
			wantErr := fmt.Sprintf("rpc error: code = %v desc = %s", tt.wantCode, tt.wantMsg)
			if got := err.Error(); got != wantErr {
				t.Errorf("Error() = %q, want %q", got, wantErr)
			}

			// The error as the caller gets it, and wrapped once more by them.
			for _, e := range []error{err, fmt.Errorf("caller: %w", err)} {
				if got := status.Code(e); got != tt.wantCode {
					t.Errorf("status.Code(%q) = %v, want %v", e, got, tt.wantCode)
				}
				st, ok := status.FromError(e)
				if !ok {
					t.Fatalf("status.FromError(%q) ok = false, want true", e)
				}
				if st.Code() != tt.wantCode {
					t.Errorf("status.FromError(%q).Code() = %v, want %v", e, st.Code(), tt.wantCode)
				}
				if !strings.Contains(st.Message(), tt.wantMsg) {
					t.Errorf("status.FromError(%q).Message() = %q, want it to contain %q", e, st.Message(), tt.wantMsg)
				}
				checkDetails(t, st, tt.details)
			}

			if got := errors.Unwrap(err); got != tt.e.Err {
				t.Errorf("errors.Unwrap(err) = %v, want %v", got, tt.e.Err)
			}
			if !errors.Is(err, tt.e.Err) {
				t.Errorf("errors.Is(err, %v) = false, want true", tt.e.Err)
			}
			var target *grpcbackoff.Error
			if !errors.As(fmt.Errorf("caller: %w", err), &target) || target != tt.e {
				t.Errorf("errors.As(wrapped, *grpcbackoff.Error) = %v, want %v", target, tt.e)
			}
		})
	}

	// The original error is not changed by building the message.
	if got := status.Convert(withDetails.Err()).Message(); got != "backend down" {
		t.Errorf("original status message = %q after use, want %q", got, "backend down")
	}
	if !errors.Is(&grpcbackoff.Error{Err: fmt.Errorf("x: %w", context.DeadlineExceeded), Attempts: 2}, context.DeadlineExceeded) {
		t.Errorf("errors.Is(Error wrapping DeadlineExceeded, context.DeadlineExceeded) = false, want true")
	}
}

// checkDetails checks that st carries exactly the details want, in order.
func checkDetails(t *testing.T, st *status.Status, want []proto.Message) {
	t.Helper()
	got := st.Details()
	if len(got) != len(want) {
		t.Fatalf("Details() = %v, want %v", got, want)
	}
	for i := range want {
		m, ok := got[i].(proto.Message)
		if !ok || !proto.Equal(m, want[i]) {
			t.Errorf("Details()[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}
