package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	// Registers google.cloud.redis.v1.CloudRedis, with its google.api.http
	// bindings, in protoregistry: a service outside the pinned Google
	// clients' data is found there.
	_ "cloud.google.com/go/redis/apiv1/redispb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/cloudclients"
)

// serviceLines are what -service prints of a service: its methods, and
// what the methods it cannot list get.
type serviceLines struct {
	name    string
	methods []string // full names
	// whole says a googleapis file configures the whole service: its
	// methods not listed get that entry; unknown says no file names the
	// service and this build does not register it.
	whole, unknown bool
}

// explainService prints, for every method of s, the policy that the
// interceptor package carries out for it with Policy p and why, per code
// for the calls of the Google Cloud clients: interceptor.Retrier.Explain,
// or, on a ClientConn cc (non-nil: -conn-config, -xds), ExplainOn; then
// what the methods it does not list get.
func explainService(w io.Writer, p grpcbackoff.Policy, s serviceLines, cc *grpc.ClientConn, opts ...interceptor.Option) error {
	r, err := interceptor.New(p, opts...)
	if err != nil {
		return err
	}
	explain := r.Explain
	if cc != nil {
		explain = func(m string) interceptor.Decision { return r.ExplainOn(cc, m) }
	}
	for _, m := range s.methods {
		fmt.Fprintln(w, explain(m))
	}
	// What a method not listed gets depends on its name (interceptor.Safety):
	// a standard read's, or any other, treated as a write.
	others := fmt.Sprintf("a method named as a standard read (Get…, List…, BatchGet…, Search…): %s; any other: %s",
		explain("/"+s.name+"/GetResource"), explain("/"+s.name+"/{method}"))
	switch {
	case s.unknown:
		fmt.Fprintf(w, "%s: no googleapis service config names this service, and this build does not register it; %s; "+
			"a Google Cloud client's call of it (a gapic/ or gccl/ token in x-goog-api-client): no code left to its client, every code above retried here\n", s.name, others)
	case s.whole:
		fmt.Fprintf(w, "every other method of %s (an entry of its file names the whole service): %s\n", s.name, others)
	}
	return nil
}

// serviceMethods returns what -service prints of the service named name:
// the methods googleapis' service configs and the pinned clients' data
// know, whatever this build links, and those of its descriptor if this
// build registers it; a well-formed name that none knows is an unknown
// service. It fails for a malformed name, or one this build registers as
// something else than a service.
func serviceMethods(name string) (serviceLines, error) {
	s := serviceLines{name: name}
	if !protoreflect.FullName(name).IsValid() || !strings.Contains(name, ".") {
		return s, fmt.Errorf("-service %q: not a service's full name (package.Service)", name)
	}
	s.methods, s.whole = cloudclients.Methods(name)
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
	if err == nil {
		sd, ok := d.(protoreflect.ServiceDescriptor)
		if !ok {
			return s, fmt.Errorf("-service %q: a %s, not a service", name, descriptorKind(d))
		}
		for i := range sd.Methods().Len() {
			s.methods = append(s.methods, "/"+string(sd.FullName())+"/"+string(sd.Methods().Get(i).Name()))
		}
		slices.Sort(s.methods)
		s.methods = slices.Compact(s.methods)
		s.whole = false // every method is listed
	}
	s.unknown = len(s.methods) == 0 && !s.whole && !cloudclients.KnownService(name)
	return s, nil
}

func descriptorKind(d protoreflect.Descriptor) string {
	switch d.(type) {
	case protoreflect.MessageDescriptor:
		return "message"
	case protoreflect.EnumDescriptor:
		return "enum"
	case protoreflect.MethodDescriptor:
		return "method"
	}
	return fmt.Sprintf("%T", d)
}
