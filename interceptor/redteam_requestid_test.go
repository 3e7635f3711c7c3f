package interceptor_test

import (
	"io"
	"sync"
	"testing"
	"testing/synctest"

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

// redteamProto2File is a proto2 service whose request's request_id has a
// default value: `optional string request_id = 1 [default = "none"];`.
var redteamProto2File = func() protoreflect.FileDescriptor {
	fdp := &descriptorpb.FileDescriptorProto{
		Name: proto.String("grpcbackoff/interceptor/redteam_proto2.proto"), Package: proto.String("redteam.p2"), Syntax: proto.String("proto2"),
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Req"), Field: []*descriptorpb.FieldDescriptorProto{
			{Name: proto.String("request_id"), Number: proto.Int32(1), Type: descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(),
				Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), DefaultValue: proto.String("none"), JsonName: proto.String("requestId")},
		}}},
		Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String("Payments"), Method: []*descriptorpb.MethodDescriptorProto{
			{Name: proto.String("ChargeCard"), InputType: proto.String(".redteam.p2.Req"), OutputType: proto.String(".redteam.p2.Req")},
		}}},
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

// TestRedteamRequestIDDefaultNotOnTheWire (red team, issue 42): a write
// nobody marked is resent when "its request carries a non-empty
// request_id" (AIP-155: the server deduplicates). A proto2 request_id with
// a default value, left unset, carries nothing on the wire: the server
// sees no request ID and cannot deduplicate, yet safety.HasRequestID reads
// the default through protoreflect (Get of an unset field) and calls it
// present. The server below applies each request once per request ID
// *it receives*, and fails the first two attempts UNAVAILABLE after
// applying them.
func TestRedteamRequestIDDefaultNotOnTheWire(t *testing.T) {
	md := redteamProto2File.Messages().ByName("Req")
	field := md.Fields().ByName("request_id")
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		attempts, applied := 0, 0
		seen := map[string]bool{}
		srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
			req := dynamicpb.NewMessage(md)
			if err := ss.RecvMsg(req); err != nil && err != io.EOF {
				return err
			}
			mu.Lock()
			attempts++
			n := attempts
			if !req.Has(field) { // no request ID on the wire: nothing to deduplicate by
				applied++
			} else if id := req.Get(field).String(); !seen[id] {
				seen[id] = true
				applied++
			}
			mu.Unlock()
			if n <= 2 {
				return status.Error(codes.Unavailable, "restarting: applied, the answer lost")
			}
			return ss.SendMsg(dynamicpb.NewMessage(md))
		}))
		lis := bufconntest.Listen()
		bufconntest.Serve(t, srv, lis)
		cc := bufconntest.Dial(t, lis.DialContext, interceptor.DialOptions(grpcbackoff.DefaultPolicy())...)
		req := dynamicpb.NewMessage(md) // request_id left unset
		err := cc.Invoke(t.Context(), "/redteam.p2.Payments/ChargeCard", req, dynamicpb.NewMessage(md))
		mu.Lock()
		defer mu.Unlock()
		if applied != 1 {
			t.Errorf("ChargeCard with no request_id on the wire applied %d times in %d attempts (err %v); want once, as a bare grpc-go client", applied, attempts, err)
		}
	})
}
