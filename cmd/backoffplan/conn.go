package main

import (
	"context"
	"errors"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// errNoNetwork is what the ClientConn of connWith gets when it dials:
// backoffplan only reads the service config grpc-go holds for it.
var errNoNetwork = errors.New("backoffplan: no connection is made")

// connWith returns a ClientConn whose resolver hands it the service config
// sc ("" for none), as a name resolver publishes one (DNS TXT _grpc_config,
// a manual resolver), and whose target is xds:/// with xds (as an xDS
// channel's: what a route's retry_policy may do is known only per call):
// interceptor.Retrier.ExplainOn explains a method on it. It dials nothing.
// The caller closes it. It returns an error naming sc's fault if grpc-go
// refuses sc.
func connWith(sc string, xds bool) (*grpc.ClientConn, error) {
	scheme := "backoffplan"
	if xds {
		scheme = "xds"
	}
	var refused error
	r := manual.NewBuilderWithScheme(scheme)
	r.BuildCallback = func(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) {
		st := resolver.State{Addresses: []resolver.Address{{Addr: "backend"}}}
		if sc != "" {
			parsed := cc.ParseServiceConfig(sc)
			refused, st.ServiceConfig = parsed.Err, parsed
		}
		r.InitialState(st)
	}
	cc, err := grpc.NewClient(scheme+":///backend", grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return nil, errNoNetwork }))
	if err != nil {
		return nil, err
	}
	cc.Connect() // builds the resolver, which hands sc over at once
	if refused != nil {
		_ = cc.Close()
		return nil, fmt.Errorf("grpc-go refuses the service config: %w", refused)
	}
	return cc, nil
}
