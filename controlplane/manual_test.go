package controlplane

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// manualPlane is grpc-go's manual resolver in front of one backend: the
// service config it hands the channel is what a test says, when it says.
type manualPlane struct {
	r   *manual.Resolver
	srv *bufconntest.Server
}

// newManual returns a manual resolver whose first state carries the service
// config sc (JSON) and srv's address.
func newManual(srv *bufconntest.Server, sc string) *manualPlane {
	r := manual.NewBuilderWithScheme("cp")
	r.BuildCallback = func(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) {
		r.InitialState(state(cc, srv, sc)) // Build hands it to the channel
	}
	return &manualPlane{r: r, srv: srv}
}

func state(cc resolver.ClientConn, srv *bufconntest.Server, sc string) resolver.State {
	return resolver.State{
		Addresses:     []resolver.Address{{Addr: srv.Addr()}},
		ServiceConfig: cc.ParseServiceConfig(sc),
	}
}

// Conn returns a channel to the backend through the resolver, with opts; it
// is closed when the test ends.
func (m *manualPlane) Conn(t testing.TB, opts ...grpc.DialOption) *grpc.ClientConn {
	dial := m.srv.Dialer()
	base := []grpc.DialOption{
		grpc.WithResolvers(m.r),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return dial(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}
	return newClient(t, "cp:///backend", append(base, opts...)...)
}

// Push hands the channel the service config sc: UpdateState returns once
// the channel applied it, so the next call sees it.
func (m *manualPlane) Push(sc string) {
	m.r.UpdateState(state(m.r.CC(), m.srv, sc))
}
