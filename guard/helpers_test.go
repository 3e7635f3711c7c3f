package guard_test

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/guard"
	"github.com/platformkit/grpcbackoff/interceptor"
)

// method is the method of the attempts the tests make by hand.
const method = "/pkg.Svc/Get"

// transportStream is a grpc.ServerTransportStream that keeps the trailer
// it is given, as grpc-go's does.
type transportStream struct {
	mu      sync.Mutex
	trailer metadata.MD
}

func (s *transportStream) Method() string                  { return method }
func (s *transportStream) SetHeader(md metadata.MD) error  { return nil }
func (s *transportStream) SendHeader(md metadata.MD) error { return nil }
func (s *transportStream) SetTrailer(md metadata.MD) error {
	s.mu.Lock()
	s.trailer = metadata.Join(s.trailer, md)
	s.mu.Unlock()
	return nil
}

// attemptContext returns the context grpc-go gives the handler of an
// attempt from peer addr ("10.0.0.1:5000"), a retry after prev attempts if
// prev > 0, with ts as its transport stream, and kv as more request
// metadata.
func attemptContext(addr string, prev int, ts grpc.ServerTransportStream, kv ...string) context.Context {
	md := metadata.Pairs(append([]string{":authority", "svc.example", "content-type", "application/grpc", "user-agent", "grpc-go/1.85.0"}, kv...)...)
	if prev > 0 {
		md.Set(interceptor.PreviousAttemptsKey, strconv.Itoa(prev))
	}
	ctx := metadata.NewIncomingContext(context.Background(), md)
	ctx = peer.NewContext(ctx, &peer.Peer{Addr: net.TCPAddrFromAddrPort(netip.MustParseAddrPort(addr))})
	return grpc.NewContextWithServerTransportStream(ctx, ts)
}

// attempt makes an attempt of method from addr through g's unary
// interceptor, a retry after prev attempts if prev > 0, with kv as more
// request metadata, which the handler answers with err, and returns the
// pushback trailer's values the client gets (nil for none).
func attempt(t *testing.T, g *guard.Guard, addr string, prev int, err error, kv ...string) []string {
	t.Helper()
	var ts transportStream
	ctx := attemptContext(addr, prev, &ts, kv...)
	_, got := g.Unary(ctx, "req", &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) {
		if err != nil {
			return nil, err
		}
		return "resp", nil
	})
	if got != err {
		t.Fatalf("Unary returned %v, want the handler's %v", got, err)
	}
	return ts.trailer.Get(grpcbackoff.PushbackKey)
}

// newGuard returns a Guard for o, failing the test on error; without a
// Logger, it logs nothing.
func newGuard(t *testing.T, o guard.Options) *guard.Guard {
	t.Helper()
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	g, err := guard.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
