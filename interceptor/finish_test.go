package interceptor_test

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
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
				c := srv.Client(t, interceptor.DialOptions(bufconntest.Exact(), tc.opts...)...)
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
