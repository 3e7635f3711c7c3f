package googleclients_test

// Red team, issue 42: a plain service's methods with google.api.http POST
// bindings (a grpc-gateway service: a platform team's own, package
// shop.v1, nothing of Google's). A POST is HTTP's verb that is not
// idempotent; issue 42 item 2 asks that what cannot be established be
// treated as a write. The service is registered at run time as its
// generated package would register it, and served over bufconn by a server
// that applies each request it receives and fails the first two attempts
// UNAVAILABLE (applied, the answer lost).

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

// redteamShopPosts are shop.v1.Shop's methods, each bound to POST.
var redteamShopPosts = []string{
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

var redteamShopFile = func() protoreflect.FileDescriptor {
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	var methods []*descriptorpb.MethodDescriptorProto
	for _, m := range redteamShopPosts {
		o := &descriptorpb.MethodOptions{}
		proto.SetExtension(o, annotations.E_Http, &annotations.HttpRule{Pattern: &annotations.HttpRule_Post{Post: "/v1/shop:" + m}, Body: "*"})
		methods = append(methods, &descriptorpb.MethodDescriptorProto{Name: proto.String(m), InputType: proto.String(".shop.v1.Req"), OutputType: proto.String(".shop.v1.Req"), Options: o})
	}
	fdp := &descriptorpb.FileDescriptorProto{
		Name: proto.String("shop/v1/shop.proto"), Package: proto.String("shop.v1"), Syntax: proto.String("proto3"),
		Dependency: []string{"google/api/annotations.proto"},
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Req"), Field: []*descriptorpb.FieldDescriptorProto{
			{Name: proto.String("order_id"), Number: proto.Int32(1), Type: str, Label: opt, JsonName: proto.String("orderId")},
		}}},
		Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String("Shop"), Method: methods}},
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

// TestRedteamPOSTWriteNotResent: each POST method, called with the
// standard options (interceptor.DialOptions(DefaultPolicy())), fails
// UNAVAILABLE after it applied; it must be applied once, as a bare grpc-go
// client applies it.
func TestRedteamPOSTWriteNotResent(t *testing.T) {
	md := redteamShopFile.Messages().ByName("Req")
	for _, m := range redteamShopPosts {
		t.Run(m, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				applied := 0
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
				method := "/shop.v1.Shop/" + m
				err := cc.Invoke(t.Context(), method, dynamicpb.NewMessage(md), dynamicpb.NewMessage(md)) // order_id empty
				r, rerr := interceptor.New(grpcbackoff.DefaultPolicy())
				if rerr != nil {
					t.Fatal(rerr)
				}
				d := r.Explain(method)
				mu.Lock()
				defer mu.Unlock()
				if applied != 1 {
					t.Errorf("POST %s applied %d times (err %v); want once, as a bare grpc-go client. Explain: %v from %q", m, applied, err, d.Safety, d.Source)
				}
			})
		})
	}
}
