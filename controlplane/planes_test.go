package controlplane

import (
	"testing"

	"google.golang.org/grpc"

	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// plane is a control plane that hands channels the owners' policy, or a
// variant of it, and a backend behind it.
type plane interface {
	// Conn returns a channel to the backend through the plane, with opts.
	Conn(t testing.TB, opts ...grpc.DialOption) *grpc.ClientConn
	// Publish hands every channel the owners' policy with attempts attempts
	// (0: no retry policy at all), and returns once a channel made before
	// applies it to its next call.
	Publish(t testing.TB, attempts int)
	// Backend is the backend behind the plane.
	Backend() *bufconntest.Server
}

// planes are the three control planes, each with the owners' policy at
// first, over loopback TCP.
var planes = []struct {
	name string
	new  func(t testing.TB) plane
}{
	{"manual", func(t testing.TB) plane {
		return newManual(bufconntest.NewServerTCP(t, script), owners)
	}},
	{"dns", func(t testing.TB) plane {
		return newDNS(t, bufconntest.NewServerTCP(t, script), owners)
	}},
	{"xds", func(t testing.TB) plane {
		return newXDS(t, bufconntest.NewServerTCP(t, script), ownersRoute())
	}},
}

func (m *manualPlane) Publish(_ testing.TB, attempts int) { m.Push(doc(attempts, "")) }
func (m *manualPlane) Backend() *bufconntest.Server       { return m.srv }

func (d *dnsPlane) Publish(t testing.TB, attempts int) { d.Set(t, doc(attempts, "")) }
func (d *dnsPlane) Backend() *bufconntest.Server       { return d.srv }

// Publish on xDS also waits for the client's ACK; the channel's config
// selector changes a moment after it, on the resolver's goroutine: tests
// that need the change see it in a bounded loop (eventually).
func (x *xdsPlane) Publish(t testing.TB, attempts int) {
	if attempts == 0 {
		x.Set(t, nil)
		return
	}
	x.Set(t, routePolicy("unavailable,internal", uint32(attempts-1)))
}
func (x *xdsPlane) Backend() *bufconntest.Server { return x.srv }
