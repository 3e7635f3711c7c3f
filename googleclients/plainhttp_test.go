package googleclients_test

// A plain service's methods with google.api.http bindings: a grpc-gateway
// service of a platform team's own, nothing of Google's, registered at run
// time as its generated package would register it, and served over bufconn
// by a server that applies each request it receives and fails the first
// two attempts UNAVAILABLE (applied, the answer lost). Issue 42 item 2: what
// cannot be established is treated as a write. Two red-team rounds found
// bindings taken for reads: POST names holding a Google read word, a Create
// with an empty ID, and PATCH (RFC 5789: "PATCH is neither safe nor
// idempotent"; only Google's AIP-134 makes it an Update that sets fields).

import (
	"io"
	"sync"
	"testing"
	"testing/synctest"

	"google.golang.org/genproto/googleapis/api/annotations"
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

// plainHTTPService registers package pkg's service, whose methods are each
// bound by rule(method) and take a message Req of one string field; it
// returns Req.
func plainHTTPService(pkg, service, field string, methods []string, rule func(method string) *annotations.HttpRule) protoreflect.MessageDescriptor {
	var mds []*descriptorpb.MethodDescriptorProto
	for _, m := range methods {
		o := &descriptorpb.MethodOptions{}
		proto.SetExtension(o, annotations.E_Http, rule(m))
		mds = append(mds, &descriptorpb.MethodDescriptorProto{Name: proto.String(m), InputType: proto.String("." + pkg + ".Req"), OutputType: proto.String("." + pkg + ".Req"), Options: o})
	}
	fdp := &descriptorpb.FileDescriptorProto{
		Name: proto.String(pkg + "/plain.proto"), Package: proto.String(pkg), Syntax: proto.String("proto3"),
		Dependency: []string{"google/api/annotations.proto"},
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Req"), Field: []*descriptorpb.FieldDescriptorProto{
			{Name: proto.String(field), Number: proto.Int32(1), Type: descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(),
				Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), JsonName: proto.String(field)},
		}}},
		Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String(service), Method: mds}},
	}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		panic(err)
	}
	if err := protoregistry.GlobalFiles.RegisterFile(fd); err != nil {
		panic(err)
	}
	return fd.Messages().ByName("Req")
}

// applications calls method (of a service whose requests and responses are
// md) once with req, with the standard options
// (interceptor.DialOptions(DefaultPolicy())), against a server that applies
// each request and fails the first two UNAVAILABLE: it returns the times the
// server applied it, the call's error and what Explain says of method.
func applications(t *testing.T, md protoreflect.MessageDescriptor, method string, req *dynamicpb.Message) (applied int, err error, d interceptor.Decision) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
			if err := ss.RecvMsg(dynamicpb.NewMessage(md)); err != nil && err != io.EOF {
				return err
			}
			mu.Lock()
			applied++
			n := applied
			mu.Unlock()
			if n <= 2 {
				return status.Error(codes.Unavailable, "restarting: applied, the answer lost")
			}
			return ss.SendMsg(dynamicpb.NewMessage(md))
		}))
		lis := bufconntest.Listen()
		bufconntest.Serve(t, srv, lis)
		cc := bufconntest.Dial(t, lis.DialContext, interceptor.DialOptions(grpcbackoff.DefaultPolicy())...)
		err = cc.Invoke(t.Context(), method, req, dynamicpb.NewMessage(md))
		r, rerr := interceptor.New(grpcbackoff.DefaultPolicy())
		if rerr != nil {
			t.Fatal(rerr)
		}
		d = r.Explain(method)
	})
	return applied, err, d
}

// shopPosts are shop.v1.Shop's methods, each bound to POST.
var shopPosts = []string{
	// internal/safety.Named's doc: "hold no word of change
	// ("GetOrCreateUser", "GetAndReset" change)"; TestNamed pins
	// GetAndResetCounter and ListAndClaimTasks as writes without a binding.
	"GetAndResetCounter",
	"ListAndClaimTasks",
	// Writes whose names hold a word of the Google-API list of reads
	// (Generate, Test, Check, Validate, Pull, Fetch, Query).
	"GenerateInvoice",
	"SendTestEmail",
	"CheckInGuest",
	"ValidateAndSubmitOrder",
	"PullAndAckJobs",
	"FetchAndLockJob",
	// AIP-133: a Create whose user-specified order_id is left empty (the
	// server assigns one): two calls make two orders.
	"CreateOrder",
}

var shopReq = plainHTTPService("shop.v1", "Shop", "order_id", shopPosts, func(m string) *annotations.HttpRule {
	return &annotations.HttpRule{Pattern: &annotations.HttpRule_Post{Post: "/v1/shop:" + m}, Body: "*"}
})

// TestRedteamPOSTWriteNotResent: each POST method, failing UNAVAILABLE
// after it applied, is applied once, as a bare grpc-go client applies it.
func TestRedteamPOSTWriteNotResent(t *testing.T) {
	for _, m := range shopPosts {
		t.Run(m, func(t *testing.T) {
			applied, err, d := applications(t, shopReq, "/shop.v1.Shop/"+m, dynamicpb.NewMessage(shopReq)) // order_id empty
			if applied != 1 {
				t.Errorf("POST %s applied %d times (err %v); want once, as a bare grpc-go client. Explain: %v from %q", m, applied, err, d.Safety, d.Source)
			}
		})
	}
}

// ledgerPatches are ledger.v1.Ledger's methods, each bound to PATCH, each a
// change that a second application repeats.
var ledgerPatches = []string{
	"AddToBalance",     // PATCH /v1/{account=accounts/*}:add, a delta
	"AppendEntry",      // PATCH /v1/{journal=journals/*}, JSON Patch "add" to an array
	"IncrementCounter", // PATCH /v1/{counter=counters/*}:increment
}

var ledgerReq = plainHTTPService("ledger.v1", "Ledger", "name", ledgerPatches, func(m string) *annotations.HttpRule {
	return &annotations.HttpRule{Pattern: &annotations.HttpRule_Patch{Patch: "/v1/{name=items/*}:" + m}, Body: "*"}
})

// TestRedteam2PATCHWriteNotResent: each PATCH method of a plain service,
// failing UNAVAILABLE after it applied, is applied once, as a bare grpc-go
// client applies it.
func TestRedteam2PATCHWriteNotResent(t *testing.T) {
	for _, m := range ledgerPatches {
		t.Run(m, func(t *testing.T) {
			req := dynamicpb.NewMessage(ledgerReq)
			req.Set(ledgerReq.Fields().ByName("name"), protoreflect.ValueOfString("items/1"))
			applied, err, d := applications(t, ledgerReq, "/ledger.v1.Ledger/"+m, req)
			if applied != 1 {
				t.Errorf("PATCH %s of a plain service applied %d times (err %v); want once, as a bare grpc-go client. Explain: %v from %q", m, applied, err, d.Safety, d.Source)
			}
		})
	}
}
