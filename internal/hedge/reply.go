package hedge

import (
	"reflect"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/platformkit/grpcbackoff/internal/attempt"
	"github.com/platformkit/grpcbackoff/internal/loop"
)

// A hedged call's attempts run at once, so each has its own reply, header,
// trailer and peer; the caller gets those of the attempt that ends the call.

// outputs are one attempt's own targets for what gRPC writes back: its
// reply, and the facts grpc-go tells of it.
type outputs struct {
	reply any
	attempt.Facts
}

// callerOutputs are the caller's Header, Trailer and Peer targets, taken
// from its call options.
type callerOutputs struct {
	headers  []*metadata.MD
	trailers []*metadata.MD
	peers    []*peer.Peer
}

// attemptOptions returns the caller's options opts without their Header,
// Trailer and Peer targets, plus the Retrier's layer mark and a Header, a
// Trailer, a Peer and an OnFinish option of out's own: the attempt reads
// them all (headers commit the call, the trailer carries pushback, the peer
// and OnFinish say whether the request was sent), and the caller gets those
// of the attempt that ends the call.
func (out *outputs) attemptOptions(opts []grpc.CallOption) []grpc.CallOption {
	out.Reset()
	ao := make([]grpc.CallOption, 0, len(opts)+5)
	for _, o := range opts {
		switch o.(type) {
		case grpc.HeaderCallOption, grpc.TrailerCallOption, grpc.PeerCallOption:
		default:
			ao = append(ao, o)
		}
	}
	return append(ao, loop.Mark, grpc.Header(&out.Header), grpc.Trailer(&out.Trailer), grpc.Peer(&out.Peer), grpc.OnFinish(out.Finished))
}

// callerOutputsOf returns the caller's targets in opts.
func callerOutputsOf(opts []grpc.CallOption) callerOutputs {
	var c callerOutputs
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			c.headers = append(c.headers, o.HeaderAddr)
		case grpc.TrailerCallOption:
			c.trailers = append(c.trailers, o.TrailerAddr)
		case grpc.PeerCallOption:
			c.peers = append(c.peers, o.PeerAddr)
		}
	}
	return c
}

// deliver gives the caller the outputs of the attempt that ended the call;
// reply is the caller's own.
func (c callerOutputs) deliver(reply any, out *outputs, ok bool) {
	if ok && out.reply != reply {
		copyReply(reply, out.reply)
	}
	for _, p := range c.headers {
		*p = out.Header
	}
	for _, p := range c.trailers {
		*p = out.Trailer
	}
	if out.PeerWritten() { // grpc-go writes the peer of a transport stream only
		for _, p := range c.peers {
			*p = out.Peer
		}
	}
}

// replyType is the type of a caller's reply, taken before any attempt writes
// to it, from which the other attempts get their own replies.
type replyType struct {
	msg  protoreflect.MessageType // for a proto.Message
	elem reflect.Type             // else, the pointed-to type of a pointer
}

// replyTypeOf returns the type of reply, and false if reply is neither a
// proto.Message nor a non-nil pointer (copyReply cannot copy it).
func replyTypeOf(reply any) (replyType, bool) {
	if m, ok := reply.(proto.Message); ok {
		if v := reflect.ValueOf(m); v.Kind() == reflect.Pointer && v.IsNil() {
			return replyType{}, false
		}
		return replyType{msg: m.ProtoReflect().Type()}, true
	}
	if v := reflect.ValueOf(reply); v.Kind() == reflect.Pointer && !v.IsNil() {
		return replyType{elem: v.Type().Elem()}, true
	}
	return replyType{}, false
}

// new returns a new, empty reply of type t.
func (t replyType) new() any {
	if t.msg != nil {
		return t.msg.New().Interface()
	}
	return reflect.New(t.elem).Interface()
}

// copyReply makes dst, the caller's reply, a copy of src, a reply from
// replyTypeOf(dst).new().
func copyReply(dst, src any) {
	if m, ok := dst.(proto.Message); ok {
		proto.Reset(m)
		proto.Merge(m, src.(proto.Message))
		return
	}
	reflect.ValueOf(dst).Elem().Set(reflect.ValueOf(src).Elem())
}
