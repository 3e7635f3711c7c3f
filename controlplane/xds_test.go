package controlplane

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/xds"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// xdsNode is the node id of the tests' xDS client.
const xdsNode = "cp-test"

// xdsPlane is an xDS management server (go-control-plane's server and
// snapshot cache, over ADS on 127.0.0.1) serving one listener, cp.test:
// routes for unary and serverStream with the retry policy a test says (gRFC
// A44), a route for every other method without one, and a cluster of one endpoint, the
// backend. Channels reach it with grpc-go's own xDS client (xds:///cp.test).
type xdsPlane struct {
	srv       *bufconntest.Server // on loopback TCP
	cache     cachev3.SnapshotCache
	addr      string
	bootstrap []byte

	mu      sync.Mutex
	version int
	acked   map[string]bool // listener versions the client accepted
	nacked  string          // the client's last refusal
	changed chan struct{}   // closed and replaced on each ACK or NACK
}

// newXDS starts a management server serving the route policy rp (nil: no
// retry policy) to srv; it stops when the test ends.
func newXDS(t testing.TB, srv *bufconntest.Server, rp *routev3.RetryPolicy) *xdsPlane {
	x := &xdsPlane{srv: srv, cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil), acked: map[string]bool{}, changed: make(chan struct{})}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	x.addr = lis.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	xs := serverv3.NewServer(ctx, x.cache, serverv3.CallbackFuncs{StreamRequestFunc: x.request})
	gs := grpc.NewServer()
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(gs, xs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() {
		gs.Stop()
		cancel()
		<-done
	})
	x.bootstrap = fmt.Appendf(nil, `{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": %q}
	}`, x.addr, xdsNode)
	x.set(t, rp)
	return x
}

// request records the client's ACKs and NACKs of listener versions.
func (x *xdsPlane) request(_ int64, req *discoverygrpc.DiscoveryRequest) error {
	if req.GetTypeUrl() != resource.ListenerType {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if d := req.GetErrorDetail(); d != nil {
		x.nacked = d.GetMessage()
	} else if v := req.GetVersionInfo(); v != "" {
		x.acked[v] = true
	}
	close(x.changed)
	x.changed = make(chan struct{})
	return nil
}

// Conn returns a channel to xds:///cp.test through grpc-go's xDS resolver
// with this server's bootstrap, with opts; it is closed when the test ends.
func (x *xdsPlane) Conn(t testing.TB, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	b, err := xds.NewXDSResolverWithConfigForTesting(x.bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	base := []grpc.DialOption{grpc.WithResolvers(b), grpc.WithTransportCredentials(insecure.NewCredentials())}
	return newClient(t, "xds:///"+dnsName, append(base, opts...)...)
}

// Set pushes a new version of the listener with the route policy rp and
// returns once a client that watches it accepted it.
func (x *xdsPlane) Set(t testing.TB, rp *routev3.RetryPolicy) {
	t.Helper()
	v := x.set(t, rp)
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		x.mu.Lock()
		acked, nacked, changed := x.acked[v], x.nacked, x.changed
		x.mu.Unlock()
		switch {
		case acked:
			return
		case nacked != "":
			t.Fatalf("xds: the client refused version %s: %s", v, nacked)
		}
		select {
		case <-changed:
		case <-timeout.C:
			t.Fatalf("xds: version %s not accepted within 10 s", v)
		}
	}
}

func (x *xdsPlane) set(t testing.TB, rp *routev3.RetryPolicy) string {
	x.mu.Lock()
	x.version++
	v := strconv.Itoa(x.version)
	x.mu.Unlock()
	snap, err := cachev3.NewSnapshot(v, x.resources(rp))
	if err != nil {
		t.Fatal(err)
	}
	if err := x.cache.SetSnapshot(context.Background(), xdsNode, snap); err != nil {
		t.Fatal(err)
	}
	return v
}

func (x *xdsPlane) resources(rp *routev3.RetryPolicy) map[resource.Type][]types.Resource {
	const cluster = "backend"
	to := func(rp *routev3.RetryPolicy) *routev3.Route_Route {
		return &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster},
			RetryPolicy:      rp,
		}}
	}
	routes := &routev3.RouteConfiguration{
		Name: "routes",
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    "cp",
			Domains: []string{dnsName},
			Routes: []*routev3.Route{
				{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Path{Path: unary}}, Action: to(rp)},
				{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Path{Path: serverStream}}, Action: to(rp)},
				{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}, Action: to(nil)},
			},
		}},
	}
	hcm := &hcmv3.HttpConnectionManager{
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: routes},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       "router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})},
		}},
	}
	host, port, _ := net.SplitHostPort(x.srv.Addr())
	p, _ := strconv.Atoi(port)
	ads := &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}
	return map[resource.Type][]types.Resource{
		resource.ListenerType: {&listenerv3.Listener{
			Name:        dnsName,
			ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(hcm)},
		}},
		resource.ClusterType: {&clusterv3.Cluster{
			Name:                 cluster,
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
			EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: ads},
			LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
		}},
		resource.EndpointType: {&endpointv3.ClusterLoadAssignment{
			ClusterName: cluster,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{
				Locality:            &corev3.Locality{Region: "local"},
				LoadBalancingWeight: wrapperspb.UInt32(1),
				LbEndpoints: []*endpointv3.LbEndpoint{{
					HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
						Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
							Protocol:      corev3.SocketAddress_TCP,
							Address:       host,
							PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)},
						}}},
					}},
				}},
			}},
		}},
	}
}

// routePolicy is a route's retry_policy: the codes of retryOn (Envoy's
// names: "unavailable,internal"), numRetries retries, backing off from 10 ms
// up to 100 ms, as the owners' service config does.
func routePolicy(retryOn string, numRetries uint32) *routev3.RetryPolicy {
	return &routev3.RetryPolicy{
		RetryOn:    retryOn,
		NumRetries: wrapperspb.UInt32(numRetries),
		RetryBackOff: &routev3.RetryPolicy_RetryBackOff{
			BaseInterval: durationpb.New(10 * time.Millisecond),
			MaxInterval:  durationpb.New(100 * time.Millisecond),
		},
	}
}

// ownersRoute is the owners' policy as a route's: 4 attempts, UNAVAILABLE
// and INTERNAL.
func ownersRoute() *routev3.RetryPolicy { return routePolicy("unavailable,internal", 3) }

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err)
	}
	return a
}
