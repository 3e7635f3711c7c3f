package interceptor_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// finishes records the calls of a grpc.OnFinish function.
type finishes struct {
	mu    sync.Mutex
	codes []codes.Code
}

func (f *finishes) option() grpc.CallOption {
	return grpc.OnFinish(func(err error) {
		f.mu.Lock()
		f.codes = append(f.codes, status.Code(err))
		f.mu.Unlock()
	})
}

// grpc.OnFinish runs once per call, with the call's final status, as in
// grpc-go, whether the call retried, hedged or streamed. (Issue 27: it ran
// once per attempt, twice for a retried call and three times, overlapping,
// for a hedged one, the last with CANCELED for a call that succeeded.)
func TestOnFinishOncePerCall(t *testing.T) {
	hedging := interceptor.WithHedging("/grpc.testing.TestService/UnaryCall", grpcbackoff.Hedging{MaxAttempts: 3, Delay: 100 * time.Millisecond})
	for _, tc := range []struct {
		name  string
		kind  callKind
		steps []bufconntest.Step
		opts  []interceptor.Option
		code  codes.Code
	}{
		{"retried unary", unary, []bufconntest.Step{failWith(codes.Unavailable), bufconntest.Succeed(1)}, nil, codes.OK},
		{"failed unary", unary, []bufconntest.Step{failWith(codes.Unavailable), failWith(codes.NotFound)}, nil, codes.NotFound},
		{"hedged unary", unary, []bufconntest.Step{{Pause: time.Second, Send: 1}}, []interceptor.Option{hedging}, codes.OK},
		{"retried stream", serverStream, []bufconntest.Step{failWith(codes.Unavailable), bufconntest.Succeed(2)}, nil, codes.OK},
		{"failed stream", bidi, []bufconntest.Step{failWith(codes.Unavailable), failWith(codes.NotFound)}, nil, codes.NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := bufconntest.NewServer(t, bufconntest.Steps(tc.steps...))
				c := srv.Client(t, interceptor.DialOptions(bufconntest.Exact(), append(tc.opts, testService)...)...)
				f := &finishes{}
				res := runCall(t.Context(), c, tc.kind, []string{"q"}, howToRun{}, f.option())
				synctest.Wait()
				if status.Code(res.Err) != tc.code || len(f.codes) != 1 || f.codes[0] != tc.code {
					t.Errorf("call ended %v; OnFinish ran with %v, want once with %v", res.Err, f.codes, tc.code)
				}
			})
		})
	}
}

// TestOnFinishWhenContextEndsAsGRPC: a stream the caller leaves open, or
// whose code under it panicked (an interceptor chained after the Retrier's,
// in RecvMsg: the panic reaches the caller), runs its grpc.OnFinish once
// the caller's context ends, with CANCELED, as grpc-go runs it for the
// stream it made, side by side without the Retrier. (The Retrier ran it
// with the context's own error, UNKNOWN to status.Code, and, after a
// panic, since this first commits, never.)
func TestOnFinishWhenContextEndsAsGRPC(t *testing.T) {
	for _, panics := range []bool{false, true} {
		chained := grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil || !panics {
				return cs, err
			}
			return panicOnRecv{cs}, nil
		})
		for name, dial := range map[string][]grpc.DialOption{
			"grpc-go":     {chained},
			"grpcbackoff": append(interceptor.DialOptions(bufconntest.Exact()), chained),
		} {
			t.Run(fmt.Sprintf("panics=%v/%s", panics, name), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					srv := bufconntest.NewServer(t, bufconntest.Steps(bufconntest.Step{Recv: bufconntest.UntilHalfClose, Send: 1, Hang: true}))
					ctx, cancel := context.WithCancel(t.Context())
					f := &finishes{}
					raisedV := raised(func() {
						s, err := srv.Client(t, dial...).StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{}, f.option())
						if err == nil {
							_, err = s.Recv()
						}
						if err != nil {
							t.Errorf("the stream failed: %v", err)
						}
					})
					synctest.Wait()
					f.mu.Lock()
					before := len(f.codes)
					f.mu.Unlock()
					cancel()
					synctest.Wait()
					if want := map[bool]any{true: "recv", false: nil}[panics]; raisedV != want || before != 0 || len(f.codes) != 1 || f.codes[0] != codes.Canceled {
						t.Errorf("raised %v; OnFinish ran %d times before the context ended, then with %v; want %v raised, then once CANCELED", raisedV, before, f.codes, want)
					}
				})
			})
		}
	}
}

// panicOnRecv is a stream whose RecvMsg panics.
type panicOnRecv struct{ grpc.ClientStream }

func (panicOnRecv) RecvMsg(any) error { panic("recv") }
