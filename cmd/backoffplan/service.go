package main

import (
	"fmt"
	"io"

	// Registers google.cloud.redis.v1.CloudRedis, with its google.api.http
	// bindings, in protoregistry: a service outside the pinned Google
	// clients' data is found there.
	_ "cloud.google.com/go/redis/apiv1/redispb"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/googleclients"
)

// explainService prints, for every method of methods, the policy that the
// interceptor package carries out for it with Policy p and why, per code
// for the calls of the Google Cloud clients: interceptor.Retrier.Explain.
func explainService(w io.Writer, p grpcbackoff.Policy, methods []string, opts ...interceptor.Option) error {
	r, err := interceptor.New(p, opts...)
	if err != nil {
		return err
	}
	for _, m := range methods {
		fmt.Fprintln(w, r.Explain(m))
	}
	return nil
}

// serviceMethods returns the full names of the methods of the service
// named name: those the data of the pinned Google Cloud clients knows,
// whatever this build links, or else those of its descriptor, if this
// build registered it.
func serviceMethods(name string) ([]string, error) {
	if ms := googleclients.Methods(name); len(ms) > 0 {
		return ms, nil
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
	if err != nil {
		return nil, fmt.Errorf("-service %q: no such service among the pinned Google Cloud clients', nor registered in this build", name)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, fmt.Errorf("-service %q: a %s, not a service", name, descriptorKind(d))
	}
	var ms []string
	for i := range sd.Methods().Len() {
		ms = append(ms, "/"+string(sd.FullName())+"/"+string(sd.Methods().Get(i).Name()))
	}
	return ms, nil
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
