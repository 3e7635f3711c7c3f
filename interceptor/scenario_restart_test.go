package interceptor_test

// A routine restart over real TCP: calls in flight when the server stops
// are retried on the server that replaces it on the same port.

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// TestRestartInFlight: 50 calls in flight over loopback TCP when the server
// stops; a new server takes its port at once. With DefaultThrottle every call
// is retried onto the new server and succeeds, the reserve of a new budget
// paying for the 50 retries. The long-run allowance alone (the budget as it
// was: Burst 10) lets only about 10 of them retry.
func TestRestartInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("real TCP and a real 1–2 s backoff")
	}
	t.Parallel() // real time: beside the other tests
	const inFlight = 50
	longRunOnly := grpcbackoff.Throttle{Ratio: 0.1, PerSecond: 0.5, Burst: 10}
	cases := []struct {
		name      string
		th        grpcbackoff.Throttle
		wantOK    int // at least
		wantAtMax int // at most
	}{
		{"DefaultThrottle", grpcbackoff.DefaultThrottle(), inFlight, inFlight},
		{"long-run allowance alone", longRunOnly, 0, 15},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := lis.Addr().String()
			held := make(chan struct{}, inFlight)
			first := bufconntest.NewServerOn(t, lis, bufconntest.Steps(bufconntest.Step{Before: func(ctx context.Context) error {
				held <- struct{}{}
				<-ctx.Done() // until the server stops
				return ctx.Err()
			}}))

			r, err := interceptor.New(grpcbackoff.DefaultPolicy(), testService, interceptor.WithThrottle(tc.th))
			if err != nil {
				t.Fatal(err)
			}
			cc, err := grpc.NewClient("passthrough:///"+addr,
				append(r.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			client := testgrpc.NewTestServiceClient(cc)

			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			errs := make([]error, inFlight)
			for i := range inFlight {
				wg.Go(func() {
					_, errs[i] = client.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(false))
				})
			}
			for range inFlight {
				select {
				case <-held:
				case <-ctx.Done():
					t.Fatal("the calls did not all reach the first server")
				}
			}

			// The restart: stop, and serve again on the same port.
			first.Stop()
			lis2, err := net.Listen("tcp", addr)
			if err != nil {
				t.Fatalf("listening again on %s: %v", addr, err)
			}
			second := bufconntest.NewServerOn(t, lis2, bufconntest.Steps(bufconntest.Succeed(1)))
			wg.Wait()

			ok, throttled := 0, 0
			for _, err := range errs {
				var e *grpcbackoff.Error
				switch {
				case err == nil:
					ok++
				case errors.As(err, &e) && e.Reason == grpcbackoff.ReasonThrottled:
					throttled++
				default:
					t.Errorf("call failed otherwise: %v", err)
				}
			}
			t.Logf("%d calls in flight across the restart: %d succeeded (%d attempts on the new server), %d throttled",
				inFlight, ok, second.Count(), throttled)
			if ok < tc.wantOK || ok > tc.wantAtMax {
				t.Errorf("%d calls succeeded, want between %d and %d", ok, tc.wantOK, tc.wantAtMax)
			}
		})
	}
}

// TestRestartHedged: 30 calls start while the server is down for a 1.5 s
// restart, over loopback TCP, with the README's hedging (2 attempts, 50 ms
// apart) beside the same calls unhedged. Failures answer to the Policy
// (backoff, the reserve) in every case, so all 30 succeed each time. Before
// issue 20 all 30 hedged calls failed: UNAVAILABLE, fatal, ended them, and
// made non-fatal it sent the next hedge at once, burning the attempts.
func TestRestartHedged(t *testing.T) {
	if testing.Short() {
		t.Skip("real TCP and real 1–3 s backoffs")
	}
	t.Parallel() // real time: beside the other tests
	const calls = 30
	hedging := grpcbackoff.Hedging{MaxAttempts: 2, Delay: 50 * time.Millisecond}
	nonFatal := hedging
	nonFatal.NonFatalCodes = []codes.Code{codes.Unavailable}
	cases := []struct {
		name string
		opts []interceptor.Option
	}{
		{"unhedged", nil},
		{"hedged", []interceptor.Option{interceptor.WithHedging("/grpc.testing.TestService/UnaryCall", hedging)}},
		{"hedged, UNAVAILABLE non-fatal", []interceptor.Option{interceptor.WithHedging("/grpc.testing.TestService/UnaryCall", nonFatal)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := lis.Addr().String()
			srv1 := bufconntest.NewServerOn(t, lis, bufconntest.Steps(bufconntest.Succeed(1)))
			r, err := interceptor.New(grpcbackoff.DefaultPolicy(), append(tc.opts, testService)...)
			if err != nil {
				t.Fatal(err)
			}
			cc, err := grpc.NewClient("passthrough:///"+addr, append(r.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			client := testgrpc.NewTestServiceClient(cc)
			if _, err := client.UnaryCall(t.Context(), &testgrpc.SimpleRequest{}); err != nil {
				t.Fatal(err)
			}

			srv1.Stop() // the restart begins
			restarted := make(chan *bufconntest.Server, 1)
			time.AfterFunc(1500*time.Millisecond, func() {
				lis2, err := net.Listen("tcp", addr)
				if err != nil {
					t.Errorf("listening again on %s: %v", addr, err)
					restarted <- nil
					return
				}
				restarted <- bufconntest.NewServerOn(t, lis2, bufconntest.Steps(bufconntest.Succeed(1)))
			})
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			var failed atomic.Int64
			for range calls {
				wg.Go(func() {
					if _, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
						failed.Add(1)
						t.Logf("call failed: %v", err)
					}
				})
			}
			wg.Wait()
			<-restarted // stopped when the test ends
			if n := failed.Load(); n != 0 {
				t.Errorf("%d of %d calls failed across the restart, want none", n, calls)
			}
		})
	}
}
