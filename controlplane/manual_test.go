package controlplane

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// manualPlane is grpc-go's manual resolver in front of one backend: the
// service config it hands its channels (each its own resolver) is what a
// test says, when it says.
type manualPlane struct {
	srv *bufconntest.Server

	mu    sync.Mutex
	sc    string
	built []*manual.Resolver
}

// newManual returns a manual plane whose channels start with the service
// config sc (JSON) and srv's address.
func newManual(srv *bufconntest.Server, sc string) *manualPlane {
	return &manualPlane{srv: srv, sc: sc}
}

func state(cc resolver.ClientConn, srv *bufconntest.Server, sc string) resolver.State {
	return resolver.State{
		Addresses:     []resolver.Address{{Addr: srv.Addr()}},
		ServiceConfig: cc.ParseServiceConfig(sc),
	}
}

// Conn returns a channel to the backend through a manual resolver of its
// own, with opts; it is closed when the test ends.
func (m *manualPlane) Conn(t testing.TB, opts ...grpc.DialOption) *grpc.ClientConn {
	r := manual.NewBuilderWithScheme("cp")
	r.BuildCallback = func(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) {
		m.mu.Lock()
		defer m.mu.Unlock()
		r.InitialState(state(cc, m.srv, m.sc)) // Build hands it to the channel
		m.built = append(m.built, r)
	}
	dial := m.srv.Dialer()
	base := []grpc.DialOption{
		grpc.WithResolvers(r),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return dial(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}
	return newClient(t, "cp:///backend", append(base, opts...)...)
}

// Push hands every channel the service config sc: UpdateState returns once
// a channel applied it, so its next call sees it. Channels whose resolver
// is not built yet (no call made) start with it.
func (m *manualPlane) Push(sc string) {
	m.mu.Lock()
	m.sc = sc
	built := slices.Clone(m.built)
	m.mu.Unlock()
	for _, r := range built {
		r.UpdateState(state(r.CC(), m.srv, sc))
	}
}
