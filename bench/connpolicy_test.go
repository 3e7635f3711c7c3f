package bench

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/stats"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
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

// The connections of the success-path benchmarks of issue 45's wiring, each
// a ClientConn over bufconn with the library's dial options:
//
//   - conn=plain: DialOptions, no service config: what every connection
//     without a control plane is.
//   - conn=resolver: DialOptions, the owners' retryPolicy for UnaryCall in
//     the connection's service config: read only at a first failure.
//   - conn=grpcretry: XDSDialOptions on the same resolver's channel:
//     grpc-go's retry on, nothing counted.
//   - conn=xds: XDSDialOptions on a channel whose target is xds:///
//     (a manual resolver under the scheme "xds"): every call counts
//     grpc-go's attempts (connpolicy.Attempts).
var connKinds = []string{"plain", "resolver", "grpcretry", "xds"}

// connOf returns a ClientConn of kind to the bench server, after one call,
// and the Retrier whose dial options it has.
func connOf(kind string) (*grpc.ClientConn, *interceptor.Retrier) {
	r, err := interceptor.New(grpcbackoff.DefaultPolicy())
	if err != nil {
		panic(err)
	}
	if kind == "plain" {
		return srv.dial(r.DialOptions()...), r
	}
	dial, scheme := r.DialOptions(), "cp"
	switch kind {
	case "grpcretry":
		dial = r.XDSDialOptions()
	case "xds":
		dial, scheme = r.XDSDialOptions(), "xds"
	}
	m := manual.NewBuilderWithScheme(scheme)
	m.BuildCallback = func(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) {
		m.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: "bufnet"}}, ServiceConfig: cc.ParseServiceConfig(ownersConfig)})
	}
	dial = append([]grpc.DialOption{grpc.WithResolvers(m),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return srv.lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials())}, dial...)
	cc, err := grpc.NewClient(scheme+":///bufnet", dial...)
	if err != nil {
		panic(fmt.Sprintf("bench: grpc.NewClient: %v", err))
	}
	if _, err := testgrpc.NewTestServiceClient(cc).EmptyCall(context.Background(), &testgrpc.Empty{}); err != nil {
		panic(fmt.Sprintf("bench: first call: %v", err))
	}
	return cc, r
}

// BenchmarkPairedConnPolicy pairs, with a bare call over bufconn, a
// successful UnaryCall on each kind of connection (connKinds).
func BenchmarkPairedConnPolicy(b *testing.B) {
	bareClient := testgrpc.NewTestServiceClient(srv.dial())
	ctx, req := context.Background(), successRequest()
	bareOp := func() error {
		_, err := bareClient.UnaryCall(ctx, req)
		return err
	}
	for _, i := range order(b, len(connKinds)) {
		kind := connKinds[i]
		b.Run("conn="+kind, func(b *testing.B) {
			cc, _ := connOf(kind)
			defer cc.Close()
			c := testgrpc.NewTestServiceClient(cc)
			paired(b, bareOp, func() error {
				_, err := c.UnaryCall(ctx, req)
				return err
			})
		})
	}
}

// BenchmarkIsolatedConnPolicy is a successful call through the library's
// unary interceptor on each kind of connection (connKinds), with the fake
// invoker of the isolated benchmarks: the library's own part. The
// interceptor is the Retrier's Unary, which finds the ClientConn as its
// dial options' first call left it (under XDSDialOptions: grpc-go's retry
// on, which their interceptor records on every call besides). On conn=xds
// connpolicy.Attempts' option is added, and the fake invoker never asks it.
// goroutines=2 makes the calls on 2 goroutines at once (RunParallel, 2
// cores; ns/op per call): none reads GetMethodConfig, whose read lock two
// goroutines contend for (BenchmarkGetMethodConfig).
func BenchmarkIsolatedConnPolicy(b *testing.B) {
	for _, kind := range connKinds {
		cc, r := connOf(kind)
		u := r.Unary()
		for _, g := range []int{1, 2} {
			b.Run("conn="+kind+"/goroutines="+strconv.Itoa(g), func(b *testing.B) {
				ctx, req, reply := context.Background(), new(int), new(int)
				op := func() error { return u(ctx, isoMethod, req, reply, cc, succeed) }
				warmUp(b, 1000, op)
				b.ReportAllocs()
				if g == 1 {
					for b.Loop() {
						if err := op(); err != nil {
							b.Fatal(err)
						}
					}
					return
				}
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := op(); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
		cc.Close()
	}
}
