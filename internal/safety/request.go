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
// ID once, and answers a repeat with the first one's result) or, for a
// create with a user-specified ID (AIP-133), sets the ID field k.ID (the
// server makes one resource of one ID, and answers a repeat
// ALREADY_EXISTS). A field counts only when it is on the wire: present
// (protoreflect.Message.Has) and not empty; a default (proto2's
// [default = ...], an editions field's) is never sent, so the server has
// nothing to deduplicate by. It reads the request through protoreflect,
// after a failure only, and allocates nothing.
func Resendable(k Knowledge, req any) bool {
	if k.Level != NotIdempotent {
		return true
	}
	if !k.ByRequest {
		return false
	}
	m, ok := req.(proto.Message)
	if !ok {
		return false
	}
	r := m.ProtoReflect()
	if !r.IsValid() {
		return false
	}
	return carries(r, "request_id") || k.ID != "" && carries(r, k.ID)
}

// carries reports whether r sets its singular string field name, on the
// wire, to a value that is not empty.
func carries(r protoreflect.Message, name protoreflect.Name) bool {
	f := r.Descriptor().Fields().ByName(name)
	if f == nil || f.Kind() != protoreflect.StringKind || f.Cardinality() == protoreflect.Repeated {
		return false
	}
	return r.Has(f) && r.Get(f).String() != ""
}
