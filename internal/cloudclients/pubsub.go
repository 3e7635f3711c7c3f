package cloudclients

import (
	"context"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The Pub/Sub subscriber retries its acks and modacks (Acknowledge,
// ModifyAckDeadline) by itself only on a subscription with exactly-once
// delivery; on any other, it sends each once, and a lost ack is a message
// delivered again. It learns which from its StreamingPull's responses (their
// subscription_properties), and so does the library: WatchPull reads them
// on their way to the subscriber, and ExactlyOnce answers for an ack's
// request.

// StreamingPull is the method of Pub/Sub's streaming pull.
const StreamingPull = "/google.pubsub.v1.Subscriber/StreamingPull"

// maxExactlyOnce bounds the subscriptions remembered with exactly-once
// delivery: past it, one more is taken for one without, its acks retried by
// the library alone.
const maxExactlyOnce = 10000

// exactlyOnce holds the names of the subscriptions whose last StreamingPull
// response said exactly-once delivery is on.
var exactlyOnce struct {
	subs sync.Map // subscription name -> struct{}
	n    atomic.Int32
}

// Watch returns the streamer of a stream of method: streamer itself, or,
// for Pub/Sub's StreamingPull, WatchPull(streamer), which learns which
// subscriptions have exactly-once delivery.
func Watch(method string, streamer grpc.Streamer) grpc.Streamer {
	if method == StreamingPull {
		return WatchPull(streamer)
	}
	return streamer
}

// ExactlyOnce reports whether req, an Acknowledge or ModifyAckDeadline
// request, is for a subscription a StreamingPull seen by WatchPull said has
// exactly-once delivery.
func ExactlyOnce(req any) bool {
	if exactlyOnce.n.Load() == 0 {
		return false
	}
	sub, ok := stringField(req, "subscription")
	if !ok {
		return false
	}
	_, on := exactlyOnce.subs.Load(sub)
	return on
}

// setExactlyOnce records what a StreamingPull response of sub said.
func setExactlyOnce(sub string, on bool) {
	if !on {
		if _, had := exactlyOnce.subs.LoadAndDelete(sub); had {
			exactlyOnce.n.Add(-1)
		}
		return
	}
	if _, had := exactlyOnce.subs.Load(sub); had || exactlyOnce.n.Load() >= maxExactlyOnce {
		return
	}
	if _, had := exactlyOnce.subs.LoadOrStore(sub, struct{}{}); !had {
		exactlyOnce.n.Add(1)
	}
}

// WatchPull returns streamer, whose streams (of StreamingPull) tell
// ExactlyOnce what their responses say of their subscription.
func WatchPull(streamer grpc.Streamer) grpc.Streamer {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, err
		}
		return &pullStream{ClientStream: cs}, nil
	}
}

// pullStream is a StreamingPull stream that WatchPull watches.
type pullStream struct {
	grpc.ClientStream
	sub atomic.Pointer[string] // the subscription its first request named
}

func (s *pullStream) SendMsg(m any) error {
	if s.sub.Load() == nil {
		if sub, ok := stringField(m, "subscription"); ok && sub != "" {
			s.sub.Store(&sub)
		}
	}
	return s.ClientStream.SendMsg(m)
}

func (s *pullStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		return err
	}
	if sub := s.sub.Load(); sub != nil {
		if on, ok := exactlyOnceOf(m); ok {
			setExactlyOnce(*sub, on)
		}
	}
	return nil
}

// stringField returns the string field name of m, a proto message.
func stringField(m any, name protoreflect.Name) (string, bool) {
	pm, ok := m.(proto.Message)
	if !ok {
		return "", false
	}
	r := pm.ProtoReflect()
	f := r.Descriptor().Fields().ByName(name)
	if f == nil || f.Kind() != protoreflect.StringKind || f.IsList() {
		return "", false
	}
	return r.Get(f).String(), true
}

// exactlyOnceOf returns what m, a StreamingPullResponse, says of exactly-once
// delivery; ok is false when it says nothing.
func exactlyOnceOf(m any) (on, ok bool) {
	pm, isMsg := m.(proto.Message)
	if !isMsg {
		return false, false
	}
	r := pm.ProtoReflect()
	f := r.Descriptor().Fields().ByName("subscription_properties")
	if f == nil || f.Kind() != protoreflect.MessageKind || f.IsList() || !r.Has(f) {
		return false, false
	}
	props := r.Get(f).Message()
	e := props.Descriptor().Fields().ByName("exactly_once_delivery_enabled")
	if e == nil || e.Kind() != protoreflect.BoolKind || e.IsList() {
		return false, false
	}
	return props.Get(e).Bool(), true
}
