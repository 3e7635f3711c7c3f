package guard

import (
	"context"

	"google.golang.org/grpc"
)

// Registrar returns a grpc.ServiceRegistrar that registers services on s
// with the guard around each of their methods' handlers: the same guard as
// ServerOptions installs, without a server interceptor.
//
//	pb.RegisterGreeterServer(g.Registrar(srv), impl)
//
// grpc-go's generated code allocates a call's info and handler closure
// whenever a server has a unary interceptor (2 allocations a call, which
// any interceptor costs, ServerOptions' too); a service registered here
// pays none of them on a server without interceptors. The guard then sees
// what the handler answers, inside the server's interceptors: not the
// failures an interceptor answers itself (one that sheds load, or refuses
// a request), nor the methods of an unknown-service handler. Use one of
// Registrar and ServerOptions for a service, not both.
func (g *Guard) Registrar(s grpc.ServiceRegistrar) grpc.ServiceRegistrar {
	return registrar{g: g, s: s}
}

type registrar struct {
	g *Guard
	s grpc.ServiceRegistrar
}

// RegisterService registers desc and impl on the server, each method's and
// stream's handler wrapped by the guard.
func (r registrar) RegisterService(desc *grpc.ServiceDesc, impl any) {
	d := *desc
	d.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, md := range desc.Methods {
		name, h := "/"+desc.ServiceName+"/"+md.MethodName, md.Handler
		d.Methods[i] = grpc.MethodDesc{MethodName: md.MethodName,
			Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				a := r.g.begin(ctx, name, true)
				resp, err := h(srv, ctx, dec, ic)
				if md := r.g.end(ctx, &a, err); md != nil {
					grpc.SetTrailer(ctx, md)
				}
				return resp, err
			}}
	}
	d.Streams = make([]grpc.StreamDesc, len(desc.Streams))
	for i, sd := range desc.Streams {
		name, h := "/"+desc.ServiceName+"/"+sd.StreamName, sd.Handler
		d.Streams[i] = sd
		d.Streams[i].Handler = func(srv any, ss grpc.ServerStream) error {
			a := r.g.begin(ss.Context(), name, true)
			err := h(srv, ss)
			if md := r.g.end(ss.Context(), &a, err); md != nil {
				ss.SetTrailer(md)
			}
			return err
		}
	}
	r.s.RegisterService(&d, impl)
}
