package googleclients_test

// Red team 2, issue 42: a plain service's methods bound to google.api.http
// PATCH (a grpc-gateway service of a platform team's own, package
// ledger.v1, nothing of Google's). RFC 9110 (9.2.2) names the idempotent
// methods: PUT, DELETE and the safe ones; RFC 5789 (section 2) says "PATCH
// is neither safe nor idempotent". Only Google's AIP-134 makes a PATCH an
// Update that sets fields, and the fix of the red team's POST finding
// (c701b4f) already reads Google's design only in Google's APIs. The
// server applies each request it receives and fails the first two attempts
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

// redteam2LedgerPatches are ledger.v1.Ledger's methods, each bound to
// PATCH, each a change that a second application repeats.
var redteam2LedgerPatches = []string{
	"AddToBalance",     // PATCH /v1/{account=accounts/*}:add, a delta
	"AppendEntry",      // PATCH /v1/{journal=journals/*}, JSON Patch "add" to an array
	"IncrementCounter", // PATCH /v1/{counter=counters/*}:increment
}

var redteam2LedgerFile = func() protoreflect.FileDescriptor {
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	var methods []*descriptorpb.MethodDescriptorProto
	for _, m := range redteam2LedgerPatches {
		o := &descriptorpb.MethodOptions{}
		proto.SetExtension(o, annotations.E_Http, &annotations.HttpRule{Pattern: &annotations.HttpRule_Patch{Patch: "/v1/{name=items/*}:" + m}, Body: "*"})
		methods = append(methods, &descriptorpb.MethodDescriptorProto{Name: proto.String(m), InputType: proto.String(".ledger.v1.Req"), OutputType: proto.String(".ledger.v1.Req"), Options: o})
	}
	fdp := &descriptorpb.FileDescriptorProto{
		Name: proto.String("ledger/v1/ledger.proto"), Package: proto.String("ledger.v1"), Syntax: proto.String("proto3"),
		Dependency: []string{"google/api/annotations.proto"},
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Req"), Field: []*descriptorpb.FieldDescriptorProto{
			{Name: proto.String("name"), Number: proto.Int32(1), Type: str, Label: opt, JsonName: proto.String("name")},
		}}},
		Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String("Ledger"), Method: methods}},
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

// TestRedteam2PATCHWriteNotResent: each PATCH method of a plain service,
// called with the standard options (interceptor.DialOptions(DefaultPolicy())),
// fails UNAVAILABLE after it applied; it must be applied once, as a bare
// grpc-go client applies it.
func TestRedteam2PATCHWriteNotResent(t *testing.T) {
	md := redteam2LedgerFile.Messages().ByName("Req")
	for _, m := range redteam2LedgerPatches {
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
				method := "/ledger.v1.Ledger/" + m
				req := dynamicpb.NewMessage(md)
				req.Set(md.Fields().ByName("name"), protoreflect.ValueOfString("items/1"))
				err := cc.Invoke(t.Context(), method, req, dynamicpb.NewMessage(md))
				r, rerr := interceptor.New(grpcbackoff.DefaultPolicy())
				if rerr != nil {
					t.Fatal(rerr)
				}
				d := r.Explain(method)
				mu.Lock()
				defer mu.Unlock()
				if applied != 1 {
					t.Errorf("PATCH %s of a plain service applied %d times (err %v); want once, as a bare grpc-go client. Explain: %v from %q", m, applied, err, d.Safety, d.Source)
				}
			})
		})
	}
}
