package interceptor

import (
	"strings"
	"unicode"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

func describe(method string) knowledge {
	service, name, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		return knowledge{SafetyUnknown, "no descriptor registered for " + service}
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return knowledge{SafetyUnknown, service + " is not a service"}
	}
	md := sd.Methods().ByName(protoreflect.Name(name))
	if md == nil {
		return knowledge{SafetyUnknown, "no method " + name + " in service " + service}
	}
	opts, _ := md.Options().(*descriptorpb.MethodOptions)
	switch lvl := opts.GetIdempotencyLevel(); lvl {
	case descriptorpb.MethodOptions_NO_SIDE_EFFECTS, descriptorpb.MethodOptions_IDEMPOTENT:
		return knowledge{Idempotent, "idempotency_level " + lvl.String()}
	}
	verb, path, ok := httpBinding(opts)
	if !ok {
		return knowledge{SafetyUnknown, "neither idempotency_level nor google.api.http"}
	}
	binding := "google.api.http " + strings.ToUpper(verb) + " " + path
	switch verb {
	case "get", "put", "patch", "delete":
		return knowledge{Idempotent, binding}
	case "post":
	default:
		return knowledge{SafetyUnknown, binding}
	}
	in := md.Input().Fields()
	if f := in.ByName("request_id"); f != nil && f.Kind() == protoreflect.StringKind {
		return knowledge{Idempotent, binding + " with a request_id (AIP-155)"}
	}
	if v := customVerb(path); v != "" {
		return knowledge{NotIdempotent, binding + ": custom method :" + v + " (AIP-136)"}
	}
	if resource, ok := strings.CutPrefix(name, "Create"); ok && resource != "" {
		id := snake(resource) + "_id"
		if f := in.ByName(protoreflect.Name(id)); f != nil && f.Kind() == protoreflect.StringKind {
			return knowledge{Idempotent, binding + ": Create with a user-specified " + id + " (AIP-133)"}
		}
	}
	return knowledge{NotIdempotent, binding + " without a request_id or user-specified ID"}
}

// httpBinding returns the verb ("get", "post", ..., or a custom kind) and the
// path of the google.api.http option in opts, read through protoreflect so
// that this module needs no import of the annotations package: the option is
// known when some linked package registered the extension.
func httpBinding(opts *descriptorpb.MethodOptions) (verb, path string, ok bool) {
	if opts == nil {
		return "", "", false
	}
	xt, err := protoregistry.GlobalTypes.FindExtensionByName("google.api.http")
	if err != nil || !proto.HasExtension(opts, xt) {
		return "", "", false
	}
	rule := opts.ProtoReflect().Get(xt.TypeDescriptor()).Message()
	fields := rule.Descriptor().Fields()
	for _, v := range []protoreflect.Name{"get", "put", "post", "delete", "patch"} {
		if f := fields.ByName(v); f != nil && rule.Has(f) {
			return string(v), rule.Get(f).String(), true
		}
	}
	if f := fields.ByName("custom"); f != nil && rule.Has(f) {
		c := rule.Get(f).Message()
		cf := c.Descriptor().Fields()
		if k, p := cf.ByName("kind"), cf.ByName("path"); k != nil && p != nil {
			return strings.ToLower(c.Get(k).String()), c.Get(p).String(), true
		}
	}
	return "", "", false
}

// customVerb returns the verb of an HTTP path that ends in ":verb" after its
// last segment or variable ("/v1/{name=projects/*/instances/*}:failover"),
// or "".
func customVerb(path string) string {
	i := strings.LastIndexByte(path, ':')
	if i < 0 || strings.ContainsAny(path[i:], "/}") {
		return ""
	}
	return path[i+1:]
}

// snake turns "InstanceConfig" into "instance_config".
func snake(s string) string {
	var b strings.Builder
	for i, c := range s {
		if unicode.IsUpper(c) {
			if i > 0 {
				b.WriteByte('_')
			}
			c = unicode.ToLower(c)
		}
		b.WriteRune(c)
	}
	return b.String()
}
