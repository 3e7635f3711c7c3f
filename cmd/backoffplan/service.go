package main

import (
	"fmt"
	"io"

	// Registers google.cloud.redis.v1.CloudRedis, with its google.api.http
	// bindings, in protoregistry, for -service.
	_ "cloud.google.com/go/redis/apiv1/redispb"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
)

// explainService prints, for every method of the service named service (a
// full proto name registered in protoregistry.GlobalFiles, such as
// google.cloud.redis.v1.CloudRedis), the policy that the interceptor package
// carries out for it with Policy p and why: interceptor.Retrier.Explain.
func explainService(w io.Writer, p grpcbackoff.Policy, sd protoreflect.ServiceDescriptor, opts ...interceptor.Option) error {
	r, err := interceptor.New(p, opts...)
	if err != nil {
		return err
	}
	methods := sd.Methods()
	for i := range methods.Len() {
		fmt.Fprintln(w, r.Explain("/"+string(sd.FullName())+"/"+string(methods.Get(i).Name())))
	}
	return nil
}

// findService returns the service registered in this build under name.
func findService(name string) (protoreflect.ServiceDescriptor, error) {
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
	if err != nil {
		return nil, fmt.Errorf("-service %q: no such service registered (this build knows google.cloud.redis.v1.CloudRedis)", name)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, fmt.Errorf("-service %q: a %s, not a service", name, descriptorKind(d))
	}
	return sd, nil
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
