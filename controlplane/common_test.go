package controlplane

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver/dns"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// The methods of the tests: the control planes name unary and the server
// stream serverStream (the owners' policy applies to them), never unnamed.
const (
	unary        = "/grpc.testing.TestService/UnaryCall"
	serverStream = "/grpc.testing.TestService/StreamingOutputCall"
	unnamed      = "/grpc.testing.Unnamed/Call"
)

// idempotent states both services idempotent: their descriptors say
// nothing, and the library treats what nothing establishes as a write
// (issue 42), which these tests, about who retries, are not.
var idempotent = []interceptor.Option{
	interceptor.WithSafety("/grpc.testing.TestService/", interceptor.Idempotent),
	interceptor.WithSafety("/grpc.testing.Unnamed/", interceptor.Idempotent),
}

func TestMain(m *testing.M) {
	// grpc-go's DNS resolver re-resolves at most every 30 s: the tests ask it
	// again at once (dnsResolver.ResolveNow).
	dns.SetMinResolutionInterval(time.Millisecond)
	goleak.VerifyTestMain(m)
}

// owners is the service config the service's owners publish: 4 attempts,
// 10 → 100 ms, UNAVAILABLE and INTERNAL, on unary and serverStream.
var owners = doc(4, "")

// doc returns a service config with the owners' retryPolicy on unary with
// maxAttempts attempts (none if 0), and retryThrottling if throttling is not
// "" (a JSON object).
func doc(maxAttempts int, throttling string) string {
	var parts []string
	if maxAttempts > 0 {
		parts = append(parts, fmt.Sprintf(`"methodConfig": [{
			"name": [{"service": "grpc.testing.TestService", "method": "UnaryCall"},
				{"service": "grpc.testing.TestService", "method": "StreamingOutputCall"}],
			"retryPolicy": {
				"maxAttempts": %d, "initialBackoff": "0.01s", "maxBackoff": "0.1s",
				"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE", "INTERNAL"]
			}
		}]`, maxAttempts))
	}
	if throttling != "" {
		parts = append(parts, `"retryThrottling": `+throttling)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// short is a short library Policy of 6 attempts: 10 ms, ×2, up to 100 ms,
// UNAVAILABLE alone.
func short() grpcbackoff.Policy {
	return grpcbackoff.Policy{
		Initial: 10 * time.Millisecond, Multiplier: 2, Max: 100 * time.Millisecond,
		MaxAttempts: 6, Codes: []codes.Code{codes.Unavailable},
	}
}

// script is the backend's: a call whose id is "CODE/N/…" (CODE a number)
// fails its first N attempts with CODE, trailers-only (as a server that
// refuses at once), then answers; any other call answers at once.
func script(id string, n int) bufconntest.Step {
	f := strings.SplitN(id, "/", 3)
	if len(f) < 3 {
		return bufconntest.Succeed(1)
	}
	c, err1 := strconv.Atoi(f[0])
	k, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		panic(fmt.Sprintf("script: call %q is not CODE/N/…", id))
	}
	if n < k {
		return bufconntest.Fail(status.Errorf(codes.Code(c), "attempt %d of %d refused", n+1, k))
	}
	return bufconntest.Succeed(1)
}

// always is a number of failures no policy of the tests outlasts.
const always = 100

var calls atomic.Int64

// result is what one call did: its error and the attempts the backend saw.
type result struct {
	err      error
	attempts []bufconntest.Attempt
}

// Code is the call's status code.
func (r result) Code() codes.Code { return status.Code(r.err) }

// N is the number of attempts on the wire.
func (r result) N() int { return len(r.attempts) }

// Waits are the gaps between the attempts' arrivals at the backend.
func (r result) Waits() []time.Duration {
	var ws []time.Duration
	for i := 1; i < len(r.attempts); i++ {
		ws = append(ws, r.attempts[i].At.Sub(r.attempts[i-1].At))
	}
	return ws
}

// Previous is the grpc-previous-rpc-attempts header of each attempt, "" where
// it had none.
func (r result) Previous() []string {
	var ps []string
	for _, a := range r.attempts {
		v := a.MD.Get("grpc-previous-rpc-attempts")
		ps = append(ps, strings.Join(v, ","))
	}
	return ps
}

func (r result) String() string {
	return fmt.Sprintf("%v after %d attempts (waits %v)", r.Code(), r.N(), r.Waits())
}

// call makes one call of method on cc, a call the backend srv fails fails
// times with code before it answers, with opts, and returns what it did.
func call(ctx context.Context, srv *bufconntest.Server, cc *grpc.ClientConn, method string, code codes.Code, fails int, opts ...grpc.CallOption) result {
	id := fmt.Sprintf("%d/%d/%d", code, fails, calls.Add(1))
	ctx = metadata.AppendToOutgoingContext(ctx, bufconntest.StreamKey, id)
	err := cc.Invoke(ctx, method, new(emptypb.Empty), new(emptypb.Empty), opts...)
	return result{err: err, attempts: srv.Attempts(id)}
}

// stream opens a server stream of serverStream on cc, one the backend srv
// fails fails times with code before it answers, reads it to its end, and
// returns what it did.
func stream(ctx context.Context, srv *bufconntest.Server, cc *grpc.ClientConn, code codes.Code, fails int) result {
	id := fmt.Sprintf("%d/%d/%d", code, fails, calls.Add(1))
	ctx = metadata.AppendToOutgoingContext(ctx, bufconntest.StreamKey, id)
	s, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, serverStream)
	if err == nil {
		err = s.SendMsg(new(emptypb.Empty))
	}
	if err == nil {
		err = s.CloseSend()
	}
	for err == nil {
		err = s.RecvMsg(new(emptypb.Empty))
	}
	if err == io.EOF {
		err = nil
	}
	return result{err: err, attempts: srv.Attempts(id)}
}

// want checks that r ended with code after n attempts.
func want(t *testing.T, what string, r result, code codes.Code, n int) {
	t.Helper()
	if r.Code() != code || r.N() != n {
		t.Errorf("%s: %v, want %v after %d attempts", what, r, code, n)
	}
}

// eventually calls try until it reports true, at most 200 times and for 10 s
// at most: for what a control plane's push changes, which reaches the
// channel on goroutines of grpc-go's. Each try is a call, which takes time of
// its own: the loop never sleeps.
func eventually(t *testing.T, what string, try func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < 200 && time.Now().Before(deadline); i++ {
		if try() {
			return
		}
	}
	t.Fatalf("%s: not seen within 200 tries or 10 s", what)
}

// newClient returns grpc.NewClient(target, opts...), closed when the test
// ends.
func newClient(t testing.TB, target string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatalf("grpc.NewClient(%q): %v", target, err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}
