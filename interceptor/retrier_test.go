package interceptor_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/platformkit/grpcbackoff/internal/bufconntest"

	"google.golang.org/grpc"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
)

// A call its caller retries by itself (WithOuterRetry) gets one attempt and
// the server's error unchanged; another call through the same Retrier keeps
// the Policy.
func TestOuterRetryOneAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type outerKey struct{}
		r, err := interceptor.New(bufconntest.Exact(), interceptor.WithHedging("/pkg.Svc/Get", grpcbackoff.Hedging{MaxAttempts: 3}),
			interceptor.WithOuterRetry(func(ctx context.Context, method string, opts []grpc.CallOption) bool {
				return ctx.Value(outerKey{}) != nil
			}))
		if err != nil {
			t.Fatal(err)
		}
		outer := context.WithValue(t.Context(), outerKey{}, true)
		s := &script{errs: bufconntest.Unavailable(10)}
		err = r.Unary()(outer, "/pkg.Svc/Get", "req", new(string), nil, s.invoke)
		if len(s.times) != 1 || err != s.errs[0] {
			t.Errorf("outer retry: %d attempts, err %v; want 1 attempt and the server's error unchanged", len(s.times), err)
		}
		s = &script{errs: bufconntest.Unavailable(2)}
		if err := r.Unary()(t.Context(), "/pkg.Svc/List", "req", new(string), nil, s.invoke); err != nil || len(s.times) != 3 {
			t.Errorf("other call: %d attempts, err %v; want 3 attempts and success", len(s.times), err)
		}
	})
	if _, err := interceptor.New(bufconntest.Exact(), interceptor.WithOuterRetry(nil)); err == nil || err.Error() != "interceptor: WithOuterRetry(nil): the function is nil" {
		t.Errorf("WithOuterRetry(nil): err = %v, want it named", err)
	}
}
