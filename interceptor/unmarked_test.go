package interceptor_test

// Issue 42: a write nobody marked. A plain service, unmarked.Orders and
// unmarked.Ledger, registered at run time in protoregistry.GlobalFiles as a
// generated package would register it, served over bufconn by a server
// that applies each request it receives (once per request_id, as AIP-155
// asks of a server, when one is set) and then, for its first attempts,
// fails as a restarting server does: the request applied, the answer lost.

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// unmarkedFile is unmarked.proto: Orders says nothing of its methods'
// safety; Ledger marks two of its three with idempotency_level.
var unmarkedFile = func() protoreflect.FileDescriptor {
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	method := func(name string, lvl descriptorpb.MethodOptions_IdempotencyLevel, client, server bool) *descriptorpb.MethodDescriptorProto {
		m := &descriptorpb.MethodDescriptorProto{Name: proto.String(name), InputType: proto.String(".unmarked.Request"), OutputType: proto.String(".unmarked.Reply")}
		if lvl != descriptorpb.MethodOptions_IDEMPOTENCY_UNKNOWN {
			m.Options = &descriptorpb.MethodOptions{IdempotencyLevel: lvl.Enum()}
		}
		if client {
			m.ClientStreaming = proto.Bool(true)
		}
		if server {
			m.ServerStreaming = proto.Bool(true)
		}
		return m
	}
	none := descriptorpb.MethodOptions_IDEMPOTENCY_UNKNOWN
	fdp := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("grpcbackoff/interceptor/unmarked.proto"),
		Package: proto.String("unmarked"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("Request"), Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("request_id"), Number: proto.Int32(1), Type: str, Label: opt, JsonName: proto.String("requestId")},
				{Name: proto.String("id"), Number: proto.Int32(2), Type: str, Label: opt, JsonName: proto.String("id")},
			}},
			{Name: proto.String("Reply"), Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("id"), Number: proto.Int32(1), Type: str, Label: opt, JsonName: proto.String("id")},
			}},
		},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("Orders"),
			Method: []*descriptorpb.MethodDescriptorProto{
				method("CreateOrder", none, false, false),
				method("GetOrder", none, false, false),
				method("ListOrders", none, false, false),
				method("BatchGetOrders", none, false, false),
				method("SearchOrders", none, false, false),
				method("CancelOrder", none, false, false),
				method("UpdateOrder", none, false, false),
				method("GetOrCreateCart", none, false, false),
				method("ImportOrders", none, true, false),
				method("ListOrderEvents", none, false, true),
			},
		}, {
			Name: proto.String("Ledger"),
			Method: []*descriptorpb.MethodDescriptorProto{
				method("Apply", descriptorpb.MethodOptions_IDEMPOTENT, false, false),
				method("Balance", descriptorpb.MethodOptions_NO_SIDE_EFFECTS, false, false),
				method("Transfer", none, false, false),
			},
		}},
	}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		panic(err)
	}
	if err := protoregistry.GlobalFiles.RegisterFile(fd); err != nil {
		panic(err)
	}
	return fd
}()

// unmarkedRequest returns a Request of unmarked.proto with requestID set,
// if not empty.
func unmarkedRequest(requestID string) *dynamicpb.Message {
	md := unmarkedFile.Messages().ByName("Request")
	m := dynamicpb.NewMessage(md)
	if requestID != "" {
		m.Set(md.Fields().ByName("request_id"), protoreflect.ValueOfString(requestID))
	}
	return m
}

func unmarkedReply() *dynamicpb.Message {
	return dynamicpb.NewMessage(unmarkedFile.Messages().ByName("Reply"))
}

// applyingServer serves every method of unmarked.proto. Its first refuse
// attempts of each method are refused with RESOURCE_EXHAUSTED before
// anything is applied, as a quota refuses; any other attempt applies each
// request it receives (once per request_id when the request carries one,
// as AIP-155 asks of a server), then answers fail(attempt) (nil: success),
// attempt counting the method's attempts from 1.
type applyingServer struct {
	refuse int
	fail   func(attempt int) error
	delay  time.Duration // before each answer: a slow server
	mu     sync.Mutex
	seen   map[string]bool // request IDs applied, by method
	n      map[string]int  // attempts, by method ("Orders/CreateOrder")
	done   map[string]int  // applications, by method
}

// newApplyingServer starts an applyingServer over bufconn, stopped when
// the test ends, and returns it with a dialer of connections to it.
func newApplyingServer(t *testing.T, refuse int, fail func(attempt int) error) (*applyingServer, func(...grpc.DialOption) *grpc.ClientConn) {
	s := &applyingServer{refuse: refuse, fail: fail, seen: map[string]bool{}, n: map[string]int{}, done: map[string]int{}}
	lis := bufconntest.Listen()
	bufconntest.Serve(t, grpc.NewServer(grpc.UnknownServiceHandler(s.handle)), lis)
	return s, func(opts ...grpc.DialOption) *grpc.ClientConn { return bufconntest.Dial(t, lis.DialContext, opts...) }
}

func (s *applyingServer) handle(_ any, ss grpc.ServerStream) error {
	full, _ := grpc.MethodFromServerStream(ss)
	method := strings.TrimPrefix(full, "/unmarked.")
	var ids []string
	for {
		req := unmarkedRequest("")
		if err := ss.RecvMsg(req); err == io.EOF {
			break
		} else if err != nil {
			return err
		}
		ids = append(ids, req.Get(req.Descriptor().Fields().ByName("request_id")).String())
		if !strings.HasSuffix(method, "/ImportOrders") { // a client stream is read to its end
			break
		}
	}
	s.mu.Lock()
	s.n[method]++
	n := s.n[method]
	if n <= s.refuse {
		s.mu.Unlock()
		return status.Error(codes.ResourceExhausted, "quota")
	}
	for _, id := range ids {
		if id == "" || !s.seen[method+"/"+id] {
			s.done[method]++
		}
		if id != "" {
			s.seen[method+"/"+id] = true
		}
	}
	s.mu.Unlock()
	if s.delay > 0 { // a slow server's answer, in the bubble's time
		select {
		case <-time.After(s.delay):
		case <-ss.Context().Done():
			return status.FromContextError(ss.Context().Err()).Err()
		}
	}
	if err := s.fail(n); err != nil {
		return err
	}
	return ss.SendMsg(unmarkedReply())
}

func (s *applyingServer) counts(method string) (attempts, applied int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[method], s.done[method]
}

// unmarkedCall makes one call of method ("Orders/CreateOrder") on cc, a
// unary call or, for ImportOrders (a client stream) and ListOrderEvents (a
// server stream), a stream, with a request carrying requestID.
func unmarkedCall(ctx context.Context, cc *grpc.ClientConn, method, requestID string, opts ...grpc.CallOption) error {
	importing := strings.HasSuffix(method, "/ImportOrders")
	if !importing && !strings.HasSuffix(method, "/ListOrderEvents") {
		return cc.Invoke(ctx, "/unmarked."+method, unmarkedRequest(requestID), unmarkedReply(), opts...)
	}
	st, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: importing, ServerStreams: !importing}, "/unmarked."+method, opts...)
	if err != nil {
		return err
	}
	if err := st.SendMsg(unmarkedRequest(requestID)); err != nil && err != io.EOF {
		return err
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	for {
		if err := st.RecvMsg(unmarkedReply()); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// TestUnmarkedWriteNotResent is the trial, method by method: each
// attempt is applied, the first two then fail UNAVAILABLE (the answer
// lost), or RESOURCE_EXHAUSTED (refused, nothing applied). What nothing
// establishes is a write: sent once after UNAVAILABLE, as a bare grpc-go
// client sends it, and resent after the server's RESOURCE_EXHAUSTED; the
// methods a descriptor or a standard name establishes are resent, and a
// write whose request carries a request_id too, the server applying it once.
func TestUnmarkedWriteNotResent(t *testing.T) {
	p := bufconntest.Exact()
	p.Initial, p.Max, p.MaxAttempts = 10*time.Millisecond, 10*time.Millisecond, 5
	cases := []struct {
		method    string
		requestID string
		opts      []interceptor.Option
		callOpts  []grpc.CallOption
		code      codes.Code // of the first two attempts
		attempts  int        // on the wire
		applied   int        // by the server
		safety    interceptor.Safety
		source    string // Explain's Source starts so
	}{
		// What nothing establishes: a write.
		{method: "Orders/CreateOrder", code: codes.Unavailable, attempts: 1, applied: 1, safety: interceptor.NotIdempotent, source: "treated as a write"},
		{method: "Orders/CancelOrder", code: codes.Unavailable, attempts: 1, applied: 1, safety: interceptor.NotIdempotent, source: "treated as a write"},
		{method: "Orders/UpdateOrder", code: codes.Unavailable, attempts: 1, applied: 1, safety: interceptor.NotIdempotent, source: "treated as a write"},
		{method: "Orders/GetOrCreateCart", code: codes.Unavailable, attempts: 1, applied: 1, safety: interceptor.NotIdempotent, source: "treated as a write"},
		{method: "Ledger/Transfer", code: codes.Unavailable, attempts: 1, applied: 1, safety: interceptor.NotIdempotent, source: "treated as a write"},
		{method: "Orders/ImportOrders", code: codes.Unavailable, attempts: 1, applied: 1, safety: interceptor.NotIdempotent, source: "treated as a write"},
		// ... resent after the server's own RESOURCE_EXHAUSTED (here the
		// server applied nothing before refusing: see refuses below).
		{method: "Orders/CreateOrder", code: codes.ResourceExhausted, attempts: 3, applied: 1, safety: interceptor.NotIdempotent, source: "treated as a write"},
		// ... and when its request carries a request_id (AIP-155).
		{method: "Orders/CreateOrder", requestID: "order-1", code: codes.Unavailable, attempts: 3, applied: 1, safety: interceptor.NotIdempotent, source: "treated as a write, resent only when its request carries a request_id"},
		// Standard reads by their names, and the descriptor's marks.
		{method: "Orders/GetOrder", code: codes.Unavailable, attempts: 3, applied: 3, safety: interceptor.Idempotent, source: "a standard read by its name (Get, AIP-131)"},
		{method: "Orders/ListOrders", code: codes.Unavailable, attempts: 3, applied: 3, safety: interceptor.Idempotent, source: "a standard read by its name (List, AIP-132)"},
		{method: "Orders/BatchGetOrders", code: codes.Unavailable, attempts: 3, applied: 3, safety: interceptor.Idempotent, source: "a standard read by its name (BatchGet, AIP-231)"},
		{method: "Orders/SearchOrders", code: codes.Unavailable, attempts: 3, applied: 3, safety: interceptor.Idempotent, source: "a standard read by its name (Search, AIP-136)"},
		{method: "Orders/ListOrderEvents", code: codes.Unavailable, attempts: 3, applied: 3, safety: interceptor.Idempotent, source: "a standard read by its name (List, AIP-132)"},
		{method: "Ledger/Apply", code: codes.Unavailable, attempts: 3, applied: 3, safety: interceptor.Idempotent, source: "idempotency_level IDEMPOTENT"},
		{method: "Ledger/Balance", code: codes.Unavailable, attempts: 3, applied: 3, safety: interceptor.Idempotent, source: "idempotency_level NO_SIDE_EFFECTS"},
		// The Retrier's options and the call's keep overriding the rules.
		{method: "Orders/CreateOrder", opts: []interceptor.Option{interceptor.WithSafety("/unmarked.Orders/CreateOrder", interceptor.Idempotent)},
			code: codes.Unavailable, attempts: 3, applied: 3, safety: interceptor.Idempotent, source: "WithSafety(/unmarked.Orders/CreateOrder)"},
		{method: "Orders/CreateOrder", opts: []interceptor.Option{interceptor.WithSafety("/unmarked.Orders/", interceptor.Idempotent)},
			code: codes.Unavailable, attempts: 3, applied: 3, safety: interceptor.Idempotent, source: "WithSafety(/unmarked.Orders/)"},
		{method: "Orders/CreateOrder", callOpts: []grpc.CallOption{interceptor.CallIdempotent()},
			code: codes.Unavailable, attempts: 3, applied: 3, safety: interceptor.NotIdempotent, source: "treated as a write"},
		{method: "Orders/CreateOrder", opts: []interceptor.Option{interceptor.WithNonIdempotentRetries()},
			code: codes.Unavailable, attempts: 3, applied: 3, safety: interceptor.NotIdempotent, source: "treated as a write"},
		{method: "Orders/GetOrder", callOpts: []grpc.CallOption{interceptor.CallNotIdempotent()},
			code: codes.Unavailable, attempts: 1, applied: 1, safety: interceptor.Idempotent, source: "a standard read by its name"},
		{method: "Orders/GetOrder", opts: []interceptor.Option{interceptor.WithSafety("/unmarked.Orders/GetOrder", interceptor.NotIdempotent)},
			code: codes.Unavailable, attempts: 1, applied: 1, safety: interceptor.NotIdempotent, source: "WithSafety(/unmarked.Orders/GetOrder)"},
		// A write someone stated is not resent for its request_id: the
		// statement wins.
		{method: "Orders/CreateOrder", requestID: "order-2", opts: []interceptor.Option{interceptor.WithSafety("/unmarked.Orders/CreateOrder", interceptor.NotIdempotent)},
			code: codes.Unavailable, attempts: 1, applied: 1, safety: interceptor.NotIdempotent, source: "WithSafety(/unmarked.Orders/CreateOrder)"},
		{method: "Orders/CreateOrder", requestID: "order-3", callOpts: []grpc.CallOption{interceptor.CallNotIdempotent()},
			code: codes.Unavailable, attempts: 1, applied: 1, safety: interceptor.NotIdempotent, source: "treated as a write"},
	}
	for _, tc := range cases {
		name := fmt.Sprintf("%s/%v/request_id=%q/%d options/%d call options", tc.method, tc.code, tc.requestID, len(tc.opts), len(tc.callOpts))
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				refuse, fail := 0, func(n int) error {
					if n <= 2 {
						return status.Error(codes.Unavailable, "restarting")
					}
					return nil
				}
				if tc.code == codes.ResourceExhausted {
					refuse, fail = 2, func(int) error { return nil }
				}
				srv, dial := newApplyingServer(t, refuse, fail)
				r, err := interceptor.New(p, append([]interceptor.Option{interceptor.WithoutThrottle()}, tc.opts...)...)
				if err != nil {
					t.Fatal(err)
				}
				err = unmarkedCall(t.Context(), dial(r.DialOptions()...), tc.method, tc.requestID, tc.callOpts...)
				attempts, applied := srv.counts(tc.method)
				if attempts != tc.attempts || applied != tc.applied {
					t.Errorf("%d attempts on the wire, applied %d times (err %v); want %d, applied %d", attempts, applied, err, tc.attempts, tc.applied)
				}
				if wantErr := tc.attempts < 3; (err != nil) != wantErr || wantErr && status.Code(err) != tc.code {
					t.Errorf("err %v; want %v", err, map[bool]string{true: tc.code.String(), false: "success"}[wantErr])
				}
				d := r.Explain("/unmarked." + tc.method)
				if d.Safety != tc.safety || !strings.HasPrefix(d.Source, tc.source) {
					t.Errorf("Explain: %v from %q; want %v from %q…", d.Safety, d.Source, tc.safety, tc.source)
				}
			})
		})
	}
}

// TestUnmarkedAsBareGRPC: an unmarked write that failed UNAVAILABLE after
// it was applied is sent once with the library's options, as by a bare
// grpc-go client (the trial: three times, applied three times).
func TestUnmarkedAsBareGRPC(t *testing.T) {
	for _, withLibrary := range []bool{false, true} {
		t.Run(fmt.Sprintf("library %v", withLibrary), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv, dial := newApplyingServer(t, 0, func(n int) error {
					if n <= 2 {
						return status.Error(codes.Unavailable, "restarting")
					}
					return nil
				})
				var opts []grpc.DialOption
				if withLibrary {
					opts = interceptor.DialOptions(grpcbackoff.DefaultPolicy())
				}
				err := unmarkedCall(t.Context(), dial(opts...), "Orders/CreateOrder", "")
				if attempts, applied := srv.counts("Orders/CreateOrder"); attempts != 1 || applied != 1 || status.Code(err) != codes.Unavailable {
					t.Errorf("%d attempts, applied %d times, err %v; want 1, once, UNAVAILABLE", attempts, applied, err)
				}
			})
		})
	}
}

// TestUnmarkedHedging: hedging sends a call twice by design. A service's
// hedging entry hedges the methods of the service established safe to send
// twice (GetOrder, by its name), not those treated as writes (CreateOrder:
// its calls follow the Policy, one attempt at a time); a method's own
// entry (WithHedging naming it) states that it may be sent twice, where
// nothing else knows; and New refuses it for a method known not to be.
func TestUnmarkedHedging(t *testing.T) {
	hedging := grpcbackoff.Hedging{MaxAttempts: 2, Delay: 10 * time.Millisecond}
	cases := []struct {
		name     string
		opts     []interceptor.Option
		method   string
		attempts int
	}{
		{"service-wide, a standard read", []interceptor.Option{interceptor.WithHedging("/unmarked.Orders/", hedging)}, "Orders/GetOrder", 2},
		{"service-wide, a write nobody marked", []interceptor.Option{interceptor.WithHedging("/unmarked.Orders/", hedging)}, "Orders/CreateOrder", 1},
		{"service-wide, idempotency_level IDEMPOTENT", []interceptor.Option{interceptor.WithHedging("/unmarked.Ledger/", hedging)}, "Ledger/Apply", 2},
		{"service-wide, a write nobody marked beside it", []interceptor.Option{interceptor.WithHedging("/unmarked.Ledger/", hedging)}, "Ledger/Transfer", 1},
		{"the method's own entry", []interceptor.Option{interceptor.WithHedging("/unmarked.Orders/CreateOrder", hedging)}, "Orders/CreateOrder", 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv, dial := newApplyingServer(t, 0, func(int) error { return nil })
				srv.delay = 100 * time.Millisecond
				r, err := interceptor.New(bufconntest.Exact(), tc.opts...)
				if err != nil {
					t.Fatal(err)
				}
				err = unmarkedCall(t.Context(), dial(r.DialOptions()...), tc.method, "")
				if attempts, applied := srv.counts(tc.method); err != nil || attempts != tc.attempts || applied != tc.attempts {
					t.Errorf("%d attempts, applied %d times, err %v; want %d", attempts, applied, err, tc.attempts)
				}
				if d := r.Explain("/unmarked." + tc.method); (d.Hedging != nil) != (tc.attempts == 2) {
					t.Errorf("Explain: %s; want hedged %v", d, tc.attempts == 2)
				}
			})
		})
	}
	_, err := interceptor.New(bufconntest.Exact(), interceptor.WithSafety("/unmarked.Orders/CreateOrder", interceptor.NotIdempotent),
		interceptor.WithHedging("/unmarked.Orders/CreateOrder", hedging))
	if err == nil || !strings.Contains(err.Error(), `hedging is configured for "/unmarked.Orders/CreateOrder", known not to be safe to send twice`) {
		t.Errorf("New, hedging a method stated NotIdempotent: %v; want the refusal naming it", err)
	}
	if _, err := interceptor.New(bufconntest.Exact(), interceptor.WithHedging("/unmarked.Orders/", hedging)); err != nil {
		t.Errorf("New, hedging a service with writes nobody marked: %v; want no error (they are not hedged)", err)
	}
}
