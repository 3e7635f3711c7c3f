package interceptor_test

// The helpers of the stream tests (stream_test.go and stream_timeout_test.go):
// what the attempts of internal/bufconntest's scripted server send and
// receive, and the checks of what it saw.

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// failWith is the step of an attempt that fails with code c at once.
func failWith(c codes.Code) bufconntest.Step {
	return bufconntest.Fail(status.Error(c, "scripted "+c.String()))
}

// responses returns the responses a successful attempt sends: r0, r1, …
func responses(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "r" + strconv.Itoa(i)
	}
	return out
}

// messages returns n caller messages m0, m1, …
func messages(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "m" + strconv.Itoa(i)
	}
	return out
}

// expectedResponses returns what a caller of kind k that sent msgs receives
// from a successful attempt that sends n responses.
func expectedResponses(k callKind, msgs []string, n int) []string {
	if k == clientStream {
		return []string{strconv.Itoa(len(msgs))}
	}
	return responses(n)
}

// attemptGaps returns the time between consecutive attempts.
func attemptGaps(as []bufconntest.Attempt) []time.Duration {
	var starts []time.Time
	for _, a := range as {
		starts = append(starts, a.At)
	}
	return bufconntest.Gaps(starts)
}

// callerMessages returns what the caller of a stream of kind k sends.
func callerMessages(k callKind) []string {
	if k == serverStream {
		return []string{"q"}
	}
	return messages(5)
}

// checkAttempts checks what the server saw of a stream whose caller sent
// msgs: every attempt got a prefix of msgs, the last one all of them and the
// half-close (if last), and attempt i was told of its i previous attempts.
func checkAttempts(t *testing.T, as []bufconntest.Attempt, msgs []string, lastComplete bool) {
	t.Helper()
	for i, a := range as {
		if len(a.Msgs) > len(msgs) || !slices.Equal(a.Msgs, msgs[:len(a.Msgs)]) {
			t.Errorf("attempt %d received %q, want a prefix of %q", i+1, a.Msgs, msgs)
		}
		want := []string(nil)
		if i > 0 {
			want = []string{strconv.Itoa(i)}
		}
		if got := a.MD.Get(interceptor.PreviousAttemptsKey); !slices.Equal(got, want) {
			t.Errorf("attempt %d: %s = %q, want %q", i+1, interceptor.PreviousAttemptsKey, got, want)
		}
		if got := a.MD.Get("x-user"); len(got) != 1 || got[0] != "kept" {
			t.Errorf("attempt %d: x-user = %q, want the caller's metadata kept", i+1, got)
		}
	}
	if lastComplete && len(as) > 0 {
		last := as[len(as)-1]
		if !slices.Equal(last.Msgs, msgs) || !last.HalfClosed {
			t.Errorf("last attempt received %q (half-closed %v), want %q and the half-close", last.Msgs, last.HalfClosed, msgs)
		}
	}
}

func callerContext(t *testing.T) context.Context {
	return metadata.AppendToOutgoingContext(t.Context(), "x-user", "kept")
}
