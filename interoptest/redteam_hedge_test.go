package interoptest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
)

// TestRedteamHedgeInFlightCallerEnds (red team, issue 41 item 1): grpc-go's
// interop UnaryCall, the server 10 ms slow, under the hedge-in-flight setup
// (a hedge sent 1 ms after the first attempt). The caller's own deadline
// (5 ms) or cancellation (at 5 ms) ends the call while both attempts are in
// flight: neither was answered, no retry was ever decided. A bare client,
// and every other setup (default, AttemptTimeout, hedged with no hedge
// sent yet, service config), returns grpc-go's error unchanged; with the
// hedge in flight the caller got a *grpcbackoff.Error whose reason is
// false: "next retry would pass the deadline" / "canceled while waiting".
// Unchanged is checked as the very error of one of the call's attempts (an
// interceptor chained inside the Retrier's records them), of bare grpc-go's
// code: its message is not compared with bare's, since grpc-go's own client
// races its deadline against the server's RST_STREAM at the same instant
// ("context deadline exceeded" or "stream terminated by RST_STREAM with
// error code: CANCEL", bare included, about 1 run in 6 each way).
func TestRedteamHedgeInFlightCallerEnds(t *testing.T) {
	var s setup
	for _, x := range setups() {
		if x.name == "hedge-in-flight" {
			s = x
		}
	}
	for _, how := range []string{"deadline", "cancel"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := newServer(t, s.slow)
				bare := srv.dial(t, nil)
				var mu sync.Mutex
				var attempts []error
				record := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
					err := invoker(ctx, method, req, reply, cc, opts...)
					mu.Lock()
					attempts = append(attempts, err)
					mu.Unlock()
					return err
				}
				cc := srv.dial(t, append(s.dial(t), grpc.WithChainUnaryInterceptor(record)))
				call := func(cc testgrpc.TestServiceClient) error {
					ctx, cancel := context.WithTimeout(t.Context(), 5*time.Millisecond)
					if how == "cancel" {
						ctx, cancel = context.WithCancel(t.Context())
						time.AfterFunc(5*time.Millisecond, cancel)
					}
					defer cancel()
					_, err := cc.UnaryCall(ctx, &testgrpc.SimpleRequest{})
					return err
				}
				want := call(testgrpc.NewTestServiceClient(bare))
				before := srv.unary.Load()
				got := call(testgrpc.NewTestServiceClient(cc))
				if sent := srv.unary.Load() - before; sent != 2 {
					t.Fatalf("%d attempts reached the server, want 2 (a hedge in flight)", sent)
				}
				var e *grpcbackoff.Error
				mu.Lock()
				unchanged := slices.Contains(attempts, got)
				mu.Unlock()
				if errors.As(got, &e) || !unchanged || status.Code(got) != status.Code(want) {
					t.Errorf("the caller's %s with a hedge in flight, no attempt answered: got %v (reason %q); want an attempt's error unchanged, of bare's code: %v",
						how, got, reasonOf(e), want)
				}
			})
		})
	}
}

func reasonOf(e *grpcbackoff.Error) string {
	if e == nil {
		return ""
	}
	return e.Reason.String()
}
