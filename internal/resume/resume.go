// Package resume is what the resume rules of interceptor.WithResume keep
// and do, their types erased: a Retrier's rules, checked against the
// methods' descriptors (Table), and one stream's State: the request it
// opened with, the token its rule records from each message the caller
// receives, and the request of each resume. It knows nothing of the stream
// machine, which decides when a stream resumes and calls it
// (internal/stream); in the engine's layers it sits beside internal/safety,
// below internal/loop, whose Plan carries a call's Rule.
package resume

import (
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Rule is one WithResume rule, its types erased. It is safe for concurrent
// use: every stream it applies to has a State of its own.
type Rule interface {
	// Name is the name the rule was given for, a method or a service.
	Name() string
	// Types returns the descriptors of the rule's request and response
	// types, or an error if they have none of their own (an interface
	// type, a dynamicpb.Message).
	Types() (req, resp protoreflect.MessageDescriptor, err error)
	// Start returns the State of a new stream of a method the rule applies
	// to.
	Start() State
}

// State is one stream's part of its rule: the request and the token. It
// is not safe for concurrent use: the stream calls it from one operation
// at a time (Sent before any receive, then Received and Reopen on the
// receiving goroutine).
type State interface {
	// Sent keeps m, the stream's request, by reference (grpc-go's SendMsg
	// forbids changing it afterwards). It returns an INTERNAL error naming
	// the rule if m is not of the rule's request type; nothing is kept then.
	Sent(m any) error
	// Received records m, a message the caller has just received, through
	// the rule's record function. A message not of the rule's response type
	// ends the State's use: Reopen says Cannot from then on.
	Received(m any)
	// Delivered reports whether a message was recorded.
	Delivered() bool
	// Reopen returns what a resume does now: reopen with req (the request
	// kept, if no message was recorded; else the rule's rewritten one, made
	// from a copy of it), end the stream as a success (Done), leave the
	// failure to the caller (Cannot, err being the rule's reason), or end
	// the stream with err, an INTERNAL error naming the rule, which broke
	// its contract (Invalid: a nil request with a nil error). A panic in
	// the rule's function goes on up.
	Reopen() (req any, o Outcome, err error)
}

// Outcome is what a resume does.
type Outcome int8

const (
	Reopen  Outcome = iota // reopen the stream with the request
	Done                   // the rule said io.EOF: the stream is complete
	Cannot                 // the rule said it cannot: the failure goes to the caller as it is
	Invalid                // the rule broke its contract: the stream ends with its error
)

func (o Outcome) String() string {
	return [...]string{"reopen", "done", "cannot", "invalid"}[o]
}

// New returns the Rule given for name with record and reopen (see
// interceptor.WithResume), which must not be nil.
func New[Req, Resp proto.Message, Token any](name string, record func(Token, Resp) Token, reopen func(Req, Token) (Req, error)) Rule {
	return &rule[Req, Resp, Token]{name: name, record: record, reopen: reopen}
}

type rule[Req, Resp proto.Message, Token any] struct {
	name   string
	record func(Token, Resp) Token
	reopen func(Req, Token) (Req, error)
}

func (r *rule[Req, Resp, Token]) Name() string { return r.name }

func (r *rule[Req, Resp, Token]) Types() (req, resp protoreflect.MessageDescriptor, err error) {
	req, err1 := descriptorOf[Req]()
	resp, err2 := descriptorOf[Resp]()
	return req, resp, errors.Join(err1, err2)
}

func (r *rule[Req, Resp, Token]) Start() State { return &state[Req, Resp, Token]{r: r} }

// descriptorOf returns the descriptor of the messages of type M, from its
// zero value: a generated message's nil pointer has it.
func descriptorOf[M proto.Message]() (d protoreflect.MessageDescriptor, err error) {
	var m M
	if any(m) == nil {
		return nil, fmt.Errorf("the type %T is an interface: give the generated message type", (*M)(nil))
	}
	defer func() {
		if recover() != nil || d == nil && err == nil {
			d, err = nil, fmt.Errorf("the type %T has no descriptor of its own: give a generated message type", m)
		}
	}()
	return m.ProtoReflect().Descriptor(), nil
}

type state[Req, Resp proto.Message, Token any] struct {
	r         *rule[Req, Resp, Token]
	req       Req
	sent      bool  // req was kept
	delivered bool  // a message was recorded: tok holds what the rule made of it
	lost      bool  // a message was not a Resp: the token is unknown
	tok       Token // the rule's token after the last message recorded
}

func (s *state[Req, Resp, Token]) Sent(m any) error {
	req, ok := m.(Req)
	if !ok {
		return status.Errorf(codes.Internal, "interceptor: WithResume(%q): the request is a %T, the rule's a %T", s.r.name, m, s.req)
	}
	s.req, s.sent = req, true
	return nil
}

func (s *state[Req, Resp, Token]) Received(m any) {
	if s.lost {
		return
	}
	resp, ok := m.(Resp)
	if !ok {
		s.lost = true
		return
	}
	s.tok = s.r.record(s.tok, resp)
	s.delivered = true
}

func (s *state[Req, Resp, Token]) Delivered() bool { return s.delivered }

func (s *state[Req, Resp, Token]) Reopen() (any, Outcome, error) {
	switch {
	case !s.sent || s.lost:
		return nil, Cannot, nil
	case !s.delivered:
		return s.req, Reopen, nil // nothing delivered: the request itself asks for what is left
	}
	req, err := s.r.reopen(proto.CloneOf(s.req), s.tok)
	switch {
	case errors.Is(err, io.EOF):
		return nil, Done, nil
	case err != nil:
		return nil, Cannot, err
	case !req.ProtoReflect().IsValid():
		return nil, Invalid, status.Errorf(codes.Internal, "interceptor: WithResume(%q): reopen returned a nil %T and no error", s.r.name, req)
	}
	return req, Reopen, nil
}
