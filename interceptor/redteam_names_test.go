package interceptor_test

// Red team, issue 42: a standard read by its name (AIP-131 Get) whose name
// goes on with a word of change the list in internal/safety's names.go does
// not hold. The same harness as unmarked_test.go's: a plain service
// registered at run time, a server that applies each request it receives
// and then fails the first two attempts UNAVAILABLE (applied, answer lost).

import (
	"io"
	"strings"
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

// redteamNamesMethods are methods of redteam.names.Counters, each a write
// whose name starts with Get followed by a word of change: the name's
// second verb decrements, registers, initialises, starts, provisions,
// mints, swaps or renews. GetAndIncrement is the control: its word is in
// the list, and it is treated as a write today.
var redteamNamesMethods = []string{
	"GetAndIncrementCounter", // control
	"GetAndDecrementStock",
	"GetOrRegisterDevice",
	"GetOrInitSession",
	"GetOrStartWorkflow",
	"GetOrProvisionCluster",
	"GetOrMintToken",
	"GetAndSwapValue",
	"GetAndRenewLease",
}

var redteamNamesFile = func() protoreflect.FileDescriptor {
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	var methods []*descriptorpb.MethodDescriptorProto
	for _, m := range redteamNamesMethods {
		methods = append(methods, &descriptorpb.MethodDescriptorProto{Name: proto.String(m), InputType: proto.String(".redteam.names.Req"), OutputType: proto.String(".redteam.names.Req")})
	}
	fdp := &descriptorpb.FileDescriptorProto{
		Name: proto.String("grpcbackoff/interceptor/redteam_names.proto"), Package: proto.String("redteam.names"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Req"), Field: []*descriptorpb.FieldDescriptorProto{
			{Name: proto.String("key"), Number: proto.Int32(1), Type: str, Label: opt, JsonName: proto.String("key")},
		}}},
		Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String("Counters"), Method: methods}},
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

// redteamApplier applies every request it receives (counted by method),
// then fails its first fails attempts of each method UNAVAILABLE.
type redteamApplier struct {
	fails   int
	md      protoreflect.MessageDescriptor
	mu      sync.Mutex
	applied map[string]int
}

func (s *redteamApplier) handle(_ any, ss grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(ss)
	if err := ss.RecvMsg(dynamicpb.NewMessage(s.md)); err != nil && err != io.EOF {
		return err
	}
	s.mu.Lock()
	s.applied[method]++
	n := s.applied[method]
	s.mu.Unlock()
	if n <= s.fails {
		return status.Error(codes.Unavailable, "restarting: applied, the answer lost")
	}
	return ss.SendMsg(dynamicpb.NewMessage(s.md))
}

func (s *redteamApplier) count(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied[method]
}

// TestRedteamGetOrWriteNotResent: a method whose name reads "Get… and
// (or) change…" is a write (internal/safety.Named: "hold no word of change
// (GetOrCreateUser, GetAndReset change)"); issue 42: "what cannot be
// established is treated as a write". With the standard options each is
// applied once after an UNAVAILABLE, as a bare grpc-go client applies it.
func TestRedteamGetOrWriteNotResent(t *testing.T) {
	md := redteamNamesFile.Messages().ByName("Req")
	for _, m := range redteamNamesMethods {
		t.Run(m, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &redteamApplier{fails: 2, md: md, applied: map[string]int{}}
				lis := bufconntest.Listen()
				bufconntest.Serve(t, grpc.NewServer(grpc.UnknownServiceHandler(srv.handle)), lis)
				cc := bufconntest.Dial(t, lis.DialContext, interceptor.DialOptions(grpcbackoff.DefaultPolicy())...)
				method := "/redteam.names.Counters/" + m
				err := cc.Invoke(t.Context(), method, dynamicpb.NewMessage(md), dynamicpb.NewMessage(md))
				r, rerr := interceptor.New(grpcbackoff.DefaultPolicy())
				if rerr != nil {
					t.Fatal(rerr)
				}
				d := r.Explain(method)
				if got := srv.count(method); got != 1 {
					t.Errorf("%s applied %d times (err %v); want once, as a bare grpc-go client; Explain: %v from %q",
						m, got, err, d.Safety, d.Source)
				}
				if d.Safety != interceptor.NotIdempotent || !strings.HasPrefix(d.Source, "treated as a write") {
					t.Errorf("Explain(%s): %v from %q; want treated as a write", m, d.Safety, d.Source)
				}
			})
		})
	}
}
