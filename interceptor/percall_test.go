package interceptor_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// A per-call gax.WithRetry (issue 42): the client resends a call whose
// method its CallOptions do not retry (Secret Manager's GetSecret), with
// the context gax.Invoke was given. The Retrier cannot see that Retryer,
// but knows the context again: the client's resends get what is left of
// MaxAttempts, at least one attempt each, so that at most the client's
// attempts + MaxAttempts − 1 reach the server, not their product (issue
// 42: 24 = 3 × 8). A call of the client with a context of its own, as a
// poller's next call has, gets all its retries (TestClientRetriesTwoServersOneRequest).
// With gax's tracing on, each resend's context is a new one: not known
// (gaxretry.Adopt knows such a Retryer, by the call's gax options).
func TestClientPerCallRetryBounded(t *testing.T) {
	for _, clientMax := range []int{2, 3, 5} {
		t.Run(fmt.Sprintf("client attempts %d", clientMax), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := bufconntest.Exact()
				p.Initial, p.Max, p.MaxAttempts = time.Millisecond, time.Millisecond, 8
				ic := interceptor.Unary(p, interceptor.WithoutThrottle())
				s := &script{errs: errsOf(repeat(codes.Unavailable, 100)...)}
				req := new(string)
				calls, err := gaxLike(asClient(t.Context()), clientMax, codes.Unavailable, false, func(ctx context.Context) error {
					return ic(ctx, getSecret, req, new(string), nil, s.invoke)
				})
				if want := calls + p.MaxAttempts - 1; len(s.times) != want || calls != clientMax || err == nil {
					t.Errorf("%d attempts of the client, %d on the wire, err %v; want %d and %d", calls, len(s.times), err, clientMax, want)
				}
			})
		})
	}
}

func repeat(c codes.Code, n int) []codes.Code {
	cs := make([]codes.Code, n)
	for i := range cs {
		cs[i] = c
	}
	return cs
}
