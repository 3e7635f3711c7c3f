package bench

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/test/bufconn"

	"github.com/platformkit/grpcbackoff/guard"
	"github.com/platformkit/grpcbackoff/interceptor"
)

// The retry guard's cost on a server's success path: calls of a bare
// client to a server with the guard (guard.New(guard.Options{}), its
// ServerOptions) paired with calls to srv, which has none (see
// guardServers for the other columns). case=first is a first try;
// case=retry carries grpc-previous-rpc-attempts, as a retry does (it still
// succeeds); case=stream is a server stream of one message.

// guardServers returns the servers paired with srv, each with a connection
// (stopped when b ends): mech=bare, a second unguarded server; mech=noop, one
// with interceptors that only call the handler, which is what any server
// interceptor costs in grpc-go (its generated code allocates the call's
// info and handler); mech=guard, one with the guard's interceptors;
// mech=guard-registrar, one whose service is registered through
// Guard.Registrar, with no interceptor.
func guardServers(b *testing.B) []guardMech {
	g, err := guard.New(guard.Options{})
	if err != nil {
		b.Fatal(err)
	}
	noop := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return h(srv, ss)
		}),
	}
	var ms []guardMech
	for _, m := range []struct {
		name string
		opts []grpc.ServerOption
	}{{bare, nil}, {"noop", noop}, {"guard", g.ServerOptions()}, {"guard-registrar", nil}} {
		s := startServer(m.opts...)
		if m.name == "guard-registrar" {
			s.close()
			s = startRegistered(g)
		}
		cc := s.dial()
		b.Cleanup(func() {
			cc.Close()
			s.close()
		})
		ms = append(ms, guardMech{m.name, testgrpc.NewTestServiceClient(cc)})
	}
	return ms
}

// startRegistered is startServer with no server option, its TestService
// registered through g.Registrar.
func startRegistered(g *guard.Guard) *server {
	s := &server{
		lis:  bufconn.Listen(1 << 20),
		srv:  grpc.NewServer(),
		resp: &testgrpc.SimpleResponse{Payload: newPayload(payloadSize)},
		out:  &testgrpc.StreamingOutputCallResponse{Payload: newPayload(payloadSize)},
		in:   &testgrpc.StreamingInputCallResponse{AggregatedPayloadSize: payloadSize},
	}
	testgrpc.RegisterTestServiceServer(g.Registrar(s.srv), s)
	go s.srv.Serve(s.lis)
	return s
}

// guardMech is a server paired with srv, and a client of it.
type guardMech struct {
	name   string
	client testgrpc.TestServiceClient
}

func BenchmarkPairedGuard(b *testing.B) {
	base := srv.dial()
	defer base.Close()
	baseClient := testgrpc.NewTestServiceClient(base)
	mechs := guardServers(b)
	req, out := successRequest(), outputRequest(1)
	retryCtx := metadata.AppendToOutgoingContext(context.Background(), interceptor.PreviousAttemptsKey, "1")
	ops := []struct {
		name string
		op   func(c testgrpc.TestServiceClient) func() error
	}{
		{"first", func(c testgrpc.TestServiceClient) func() error {
			return func() error { _, err := c.UnaryCall(context.Background(), req); return err }
		}},
		{"retry", func(c testgrpc.TestServiceClient) func() error {
			return func() error { _, err := c.UnaryCall(retryCtx, req); return err }
		}},
		{"stream", func(c testgrpc.TestServiceClient) func() error {
			return func() error { return serverStream(context.Background(), &mech{client: c}, out, 1) }
		}},
	}
	for _, o := range ops {
		for _, i := range order(b, len(mechs)) {
			m := mechs[i]
			b.Run("case="+o.name+"/mech="+m.name, func(b *testing.B) {
				paired(b, o.op(baseClient), o.op(m.client))
			})
		}
	}
}

// BenchmarkPairedGuardParallel is case=first from 4 goroutines per core,
// all on one method: they count in the same window.
func BenchmarkPairedGuardParallel(b *testing.B) {
	base := srv.dial()
	defer base.Close()
	for _, m := range guardServers(b) {
		b.Run("mech="+m.name, func(b *testing.B) {
			pairedParallel(b, &mech{name: bare, client: testgrpc.NewTestServiceClient(base)}, &mech{name: m.name, client: m.client})
		})
	}
}

// BenchmarkIsolatedGuard calls the guard's unary interceptor directly, with
// the context grpc-go gives a handler (a TCP peer, request metadata), and a
// handler that returns at once: the guard's own cost.
func BenchmarkIsolatedGuard(b *testing.B) {
	g, err := guard.New(guard.Options{})
	if err != nil {
		b.Fatal(err)
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/grpc.testing.TestService/UnaryCall"}
	handler := func(context.Context, any) (any, error) { return info, nil }
	for _, c := range []struct {
		name string
		md   metadata.MD
	}{
		{"first", metadata.Pairs("user-agent", "grpc-go/1.85.0", "content-type", "application/grpc")},
		{"retry", metadata.Pairs("user-agent", "grpc-go/1.85.0", "content-type", "application/grpc", interceptor.PreviousAttemptsKey, "1")},
	} {
		ctx := peer.NewContext(metadata.NewIncomingContext(context.Background(), c.md),
			&peer.Peer{Addr: net.TCPAddrFromAddrPort(netip.MustParseAddrPort("10.0.0.1:41000"))})
		b.Run("case="+c.name+"/mech=guard", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				g.Unary(ctx, nil, info, handler)
			}
		})
	}
}
