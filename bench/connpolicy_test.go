package bench

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/stats"

	"github.com/platformkit/grpcbackoff/internal/connpolicy"
)

// What reading a connection's retry policy costs a call (issue 45).

// ownersConfig is a service config with a retryPolicy for UnaryCall alone,
// as a resolver would hand it (here through grpc.WithDefaultServiceConfig,
// which grpc-go applies the same way).
const ownersConfig = `{"methodConfig": [{
	"name": [{"service": "grpc.testing.TestService", "method": "UnaryCall"}],
	"retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.01s", "maxBackoff": "0.1s",
		"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE", "INTERNAL"]}}]}`

// BenchmarkGetMethodConfig measures cc.GetMethodConfig(method), which takes
// the ClientConn's read lock, and connpolicy's Lookup on top of it (its
// cache of compiled policies), from 1 and from 2 goroutines on one
// ClientConn: for a method the config names (policy=named) and one it does
// not (policy=none). ns/op is per read, summed over the goroutines' reads.
func BenchmarkGetMethodConfig(b *testing.B) {
	cc := srv.dial(grpc.WithDefaultServiceConfig(ownersConfig), grpc.WithDisableRetry())
	defer cc.Close()
	src := connpolicy.New(cc)
	for _, read := range []struct {
		name string
		f    func(method string) bool
	}{
		{"getmethodconfig", func(m string) bool { return cc.GetMethodConfig(m).RetryPolicy != nil }},
		{"lookup", func(m string) bool { p, _ := src.Lookup(m); return p.Retry != nil }},
	} {
		for _, m := range []struct{ name, method string }{
			{"named", "/grpc.testing.TestService/UnaryCall"},
			{"none", "/grpc.testing.TestService/EmptyCall"},
		} {
			if got, want := read.f(m.method), m.name == "named"; got != want {
				b.Fatalf("%s(%s): policy %v, want %v", read.name, m.method, got, want)
			}
			for _, g := range []int{1, 2} {
				b.Run("read="+read.name+"/policy="+m.name+"/goroutines="+strconv.Itoa(g), func(b *testing.B) {
					b.ReportAllocs()
					var wg sync.WaitGroup
					per := b.N / g
					for range g {
						wg.Go(func() {
							for range per {
								read.f(m.method)
							}
						})
					}
					wg.Wait()
				})
			}
		}
	}
}

// BenchmarkPairedSignal measures, paired with a bare call over bufconn,
// what each way of learning per call that grpc-go retried costs a
// successful unary call, on a channel with grpc-go's retry on:
//
//   - signal=none: a bare call against itself: the method's own error.
//   - signal=statshandler: a no-op stats handler on the ClientConn, which
//     every call of the channel pays for.
//   - signal=callcreds: connpolicy.Attempts, a per-call credentials option
//     that counts the call's attempts, made anew for each call.
func BenchmarkPairedSignal(b *testing.B) {
	bareClient := testgrpc.NewTestServiceClient(srv.dial())
	watched := testgrpc.NewTestServiceClient(srv.dial(grpc.WithStatsHandler(noopHandler{})))
	ctx, req := context.Background(), successRequest()
	bareOp := func() error {
		_, err := bareClient.UnaryCall(ctx, req)
		return err
	}
	for _, c := range []struct {
		name string
		op   func() error
	}{
		{"none", bareOp},
		{"statshandler", func() error {
			_, err := watched.UnaryCall(ctx, req)
			return err
		}},
		{"callcreds", func() error {
			a := new(connpolicy.Attempts)
			_, err := bareClient.UnaryCall(ctx, req, a.CallOption(nil))
			return err
		}},
	} {
		b.Run("signal="+c.name, func(b *testing.B) {
			paired(b, bareOp, c.op)
		})
	}
}

// noopHandler is a stats.Handler that does nothing.
type noopHandler struct{}

func (noopHandler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (noopHandler) HandleRPC(context.Context, stats.RPCStats)                         {}
func (noopHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (noopHandler) HandleConn(context.Context, stats.ConnStats)                       {}
