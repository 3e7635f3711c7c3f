package safety

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Resendable reports whether a call known as k, with the request req (nil
// for a stream, whose messages are many), may be sent again after a
// failure that may have been applied: when its method is not known to be a
// write, or when it is a write (ByRequest) whose request carries a
// non-empty string field request_id (AIP-155: the server applies a request
// ID once, and answers a repeat with the first one's result). It reads the
// request through protoreflect, after a failure only, and allocates
// nothing.
func Resendable(k Knowledge, req any) bool {
	return k.Level != NotIdempotent || k.ByRequest && HasRequestID(req)
}

// HasRequestID reports whether req is a proto.Message with a singular
// string field named request_id that is not empty.
func HasRequestID(req any) bool {
	m, ok := req.(proto.Message)
	if !ok {
		return false
	}
	r := m.ProtoReflect()
	if !r.IsValid() {
		return false
	}
	f := r.Descriptor().Fields().ByName("request_id")
	if f == nil || f.Kind() != protoreflect.StringKind || f.Cardinality() == protoreflect.Repeated {
		return false
	}
	return r.Get(f).String() != ""
}
