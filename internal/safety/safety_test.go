package safety

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/platformkit/grpcbackoff/internal/settings"
)

// safetytest.proto, registered at run time: a Request with a string
// request_id, one with a request_id that is a number, and a service whose
// methods say nothing but by their names.
var testFile = func() protoreflect.FileDescriptor {
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	field := func(name string, t descriptorpb.FieldDescriptorProto_Type) *descriptorpb.FieldDescriptorProto {
		return &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(1), Type: t.Enum(), Label: opt}
	}
	method := func(name string) *descriptorpb.MethodDescriptorProto {
		return &descriptorpb.MethodDescriptorProto{Name: proto.String(name), InputType: proto.String(".safetytest.Request"), OutputType: proto.String(".safetytest.Request")}
	}
	fdp := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("grpcbackoff/internal/safety/safetytest.proto"),
		Package: proto.String("safetytest"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("Request"), Field: []*descriptorpb.FieldDescriptorProto{field("request_id", descriptorpb.FieldDescriptorProto_TYPE_STRING)}},
			{Name: proto.String("Numbered"), Field: []*descriptorpb.FieldDescriptorProto{field("request_id", descriptorpb.FieldDescriptorProto_TYPE_INT64)}},
			{Name: proto.String("CreateOrderRequest"), Field: []*descriptorpb.FieldDescriptorProto{field("order_id", descriptorpb.FieldDescriptorProto_TYPE_STRING)}},
		},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name:   proto.String("Shop"),
			Method: []*descriptorpb.MethodDescriptorProto{method("CreateOrder"), method("GetOrder"), method("Checkout")},
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

// proto2File holds a proto2 request whose request_id and order_id have
// defaults: `optional string request_id = 1 [default = "none"];`.
var proto2File = func() protoreflect.FileDescriptor {
	field := func(name string, n int32) *descriptorpb.FieldDescriptorProto {
		return &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Type: descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(),
			Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), DefaultValue: proto.String("none")}
	}
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name: proto.String("grpcbackoff/internal/safety/safetytest2.proto"), Package: proto.String("safetytest2"), Syntax: proto.String("proto2"),
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Request"), Field: []*descriptorpb.FieldDescriptorProto{field("request_id", 1), field("order_id", 2)}}},
	}, protoregistry.GlobalFiles)
	if err != nil {
		panic(err)
	}
	return fd
}()

// TestResendableOnTheWire: a request_id or an ID counts when the request
// sends it, never by its default.
func TestResendableOnTheWire(t *testing.T) {
	md := proto2File.Messages().ByName("Request")
	withID := Knowledge{Level: NotIdempotent, ByRequest: true, ID: "order_id"}
	for _, tc := range []struct {
		name string
		set  map[protoreflect.Name]string
		want bool
	}{
		{"both left at their defaults", nil, false},
		{"request_id set empty", map[protoreflect.Name]string{"request_id": ""}, false},
		{"request_id set", map[protoreflect.Name]string{"request_id": "r-1"}, true},
		{"order_id set empty", map[protoreflect.Name]string{"order_id": ""}, false},
		{"order_id set", map[protoreflect.Name]string{"order_id": "o-1"}, true},
	} {
		m := dynamicpb.NewMessage(md)
		for f, v := range tc.set {
			m.Set(md.Fields().ByName(f), protoreflect.ValueOfString(v))
		}
		if got := Resendable(withID, m); got != tc.want {
			t.Errorf("%s: Resendable = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestNamed(t *testing.T) {
	for _, tc := range []struct {
		method string
		read   bool
	}{
		{"/a.B/Get", true},
		{"/a.B/GetOrder", true},
		{"/a.B/ListOrders", true},
		{"/a.B/BatchGetOrders", true},
		{"/a.B/SearchOrders", true},
		{"/a.B/GetIamPolicy", true},
		{"/a.B/GetInstance", true},
		{"/a.B/GetOperation", true},
		{"/a.B/ListInstances", true},
		{"/a.B/BatchGetDocuments", true},
		{"/a.B/SearchCatalog", true},
		{"/a.B/GetOrganization", true}, // "Organization" is one word, not "Or"
		{"/a.B/GetAndroidApp", true},   // nor "Android" "And"
		{"/a.B/GetRun", true},          // a run is a resource (Workflows' executions, CI runs)
		{"/a.B/GetURL", true},
		{"/a.B/GetTrigger", true}, // a resource (Eventarc's, Cloud Build's), not a verb of change
		// A conjunction joins a second action, whatever its verb.
		{"/a.B/GetAndDecrementStock", false},
		{"/a.B/GetOrRegisterDevice", false},
		{"/a.B/GetOrInitSession", false},
		{"/a.B/GetOrStartWorkflow", false},
		{"/a.B/GetOrProvisionCluster", false},
		{"/a.B/GetOrMintToken", false},
		{"/a.B/GetAndSwapValue", false},
		{"/a.B/GetAndRenewLease", false},
		{"/a.B/GetThenDeleteOrder", false},
		{"/a.B/GetOrderIfAbsentInsert", false},
		{"/a.B/ListOrdersAndArchive", false},
		{"/a.B/BatchGetOrCreateUsers", false},
		// No verb of change after the verb, with no conjunction either.
		{"/a.B/GetRenewLease", false},
		{"/a.B/ListClaimTasks", false},
		{"/a.B/GetNextId", false},
		{"/a.B/GetNewToken", false},
		{"/a.B/get_order", false},   // not the guide's form: treated as a write
		{"/a.B/Getaway", false},     // Get is not a word of its own
		{"/a.B/Listen", false},      // nor List
		{"/a.B/Batch", false},       // Batch alone
		{"/a.B/BatchCreate", false}, // AIP-233: a write
		{"/a.B/GetOrCreateCart", false},
		{"/a.B/GetAndResetCounter", false},
		{"/a.B/ListAndClaimTasks", false},
		{"/a.B/CreateOrder", false}, // AIP-133
		{"/a.B/UpdateOrder", false}, // AIP-134: not established by a name alone
		{"/a.B/DeleteOrder", false}, // AIP-135: the same
		{"/a.B/CancelOrder", false},
		{"/a.B/Check", false}, // grpc.health.v1's Check reads, but its name is no standard one
		{"/a.B/", false},
		{"", false},
	} {
		rule, ok := Named(tc.method)
		if ok != tc.read || ok && !strings.HasPrefix(rule, "a standard read by its name (") {
			t.Errorf("Named(%q) = %q, %v; want read %v", tc.method, rule, ok, tc.read)
		}
	}
}

func TestDescribe(t *testing.T) {
	for _, tc := range []struct {
		method  string
		level   Level
		assumed bool
		source  string
	}{
		{"/safetytest.Shop/CreateOrder", NotIdempotent, true, "treated as a write, resent only when its request carries a request_id (AIP-155): neither idempotency_level nor google.api.http, and its name is no standard read"},
		{"/safetytest.Shop/GetOrder", Idempotent, false, "a standard read by its name (Get, AIP-131); neither idempotency_level nor google.api.http"},
		{"/safetytest.Shop/Checkout", NotIdempotent, true, "treated as a write"},
		{"/safetytest.Shop/Missing", NotIdempotent, true, "treated as a write, resent only when its request carries a request_id (AIP-155): no method Missing in service safetytest.Shop"},
		{"/nowhere.Svc/ListThings", Idempotent, false, "a standard read by its name (List, AIP-132); no descriptor registered for nowhere.Svc"},
		{"/nowhere.Svc/Place", NotIdempotent, true, "treated as a write"},
		// A Google API's method without a binding: the words of its name.
		{"/google.example.v1.Things/StreamingPull", Idempotent, false, "StreamingPull reads (Pull), by the words of a Google API's method (AIP-136)"},
		{"/google.example.v1.Things/WriteThing", NotIdempotent, true, "treated as a write"},
	} {
		k := Describe(tc.method)
		if k.Level != tc.level || k.Assumed != tc.assumed || !strings.HasPrefix(k.Source, tc.source) || k.ByRequest != (k.Level == NotIdempotent) {
			t.Errorf("Describe(%q) = %+v; want level %v, assumed %v, source %q…", tc.method, k, tc.level, tc.assumed, tc.source)
		}
	}
	// A pinned client's create with a user-specified ID (AIP-133), its
	// package not linked in: the data names the ID's field.
	const create = "/google.cloud.redis.v1.CloudRedis/CreateInstance"
	if k := Describe(create); k.Level != NotIdempotent || !k.ByRequest || k.ID != "instance_id" {
		t.Errorf("Describe(%q) = %+v; want a write resent when its request sets instance_id", create, k)
	}
}

func TestCatalogOrder(t *testing.T) {
	var tbl settings.Table
	tbl.Entry("/safetytest.Shop/Checkout").SetHedge(&settings.Hedging{})
	svcConfig := tbl.Entry("/nowhere.Svc/")
	svcConfig.SetPolicy(&settings.Policy{})
	svcConfig.Config = true
	b := &Catalog{Settings: &tbl, Resumed: func(m string) bool { return m == "/safetytest.Shop/Follow" || m == "/safetytest.Shop/GetOrder" }}
	b.State("/safetytest.Shop/GetOrder", NotIdempotent)
	b.State("/safetytest.Shop/Missing", Unknown)
	for _, tc := range []struct {
		method    string
		level     Level
		assumed   bool
		byRequest bool
		source    string
	}{
		{"/safetytest.Shop/GetOrder", NotIdempotent, false, false, "WithSafety(/safetytest.Shop/GetOrder)"},
		{"/safetytest.Shop/Missing", NotIdempotent, true, true, "treated as a write, resent only when its request carries a request_id (AIP-155): WithSafety(/safetytest.Shop/Missing) states SafetyUnknown"},
		{"/safetytest.Shop/Checkout", Idempotent, false, false, "hedged by an entry of its own"},
		{"/safetytest.Shop/Follow", Idempotent, false, false, "resumed by a rule (WithResume)"}, // a rule does not override WithSafety (GetOrder above)
		{"/safetytest.Shop/CreateOrder", NotIdempotent, true, true, "treated as a write"},
		{"/nowhere.Svc/Place", Idempotent, false, false, "a service config's retryPolicy for its service"},
		{"/nowhere.Svc/GetPlace", Idempotent, false, false, "a standard read by its name"},
	} {
		k := b.Of(tc.method)
		if k.Level != tc.level || k.Assumed != tc.assumed || k.ByRequest != tc.byRequest || !strings.HasPrefix(k.Source, tc.source) {
			t.Errorf("Of(%q) = %+v; want level %v, assumed %v, byRequest %v, source %q…", tc.method, k, tc.level, tc.assumed, tc.byRequest, tc.source)
		}
	}
	// A service is not to be hedged whole when a method of it is known not
	// to be idempotent; one only treated as a write does not count.
	if b.NotIdempotent("/safetytest.Shop/") != true {
		t.Errorf("NotIdempotent(/safetytest.Shop/) = false; want true: GetOrder is stated NotIdempotent")
	}
	if (&Catalog{}).NotIdempotent("/safetytest.Shop/") {
		t.Errorf("NotIdempotent(/safetytest.Shop/) with nothing stated = true; want false: CreateOrder and Checkout are only treated as writes")
	}
	if !(&Catalog{}).NotIdempotent("/safetytest.Shop/Checkout") {
		t.Errorf("NotIdempotent(/safetytest.Shop/Checkout) = false; want true: a method treated as a write is not hedged")
	}
}

func TestResendable(t *testing.T) {
	request := func(id string) proto.Message {
		m := dynamicpb.NewMessage(testFile.Messages().ByName("Request"))
		if id != "" {
			m.Set(m.Descriptor().Fields().ByName("request_id"), protoreflect.ValueOfString(id))
		}
		return m
	}
	numbered := dynamicpb.NewMessage(testFile.Messages().ByName("Numbered"))
	numbered.Set(numbered.Descriptor().Fields().ByName("request_id"), protoreflect.ValueOfInt64(7))
	create := func(id string) proto.Message {
		m := dynamicpb.NewMessage(testFile.Messages().ByName("CreateOrderRequest"))
		if id != "" {
			m.Set(m.Descriptor().Fields().ByName("order_id"), protoreflect.ValueOfString(id))
		}
		return m
	}
	write := Knowledge{Level: NotIdempotent, ByRequest: true}
	withID := Knowledge{Level: NotIdempotent, ByRequest: true, ID: "order_id"} // AIP-133
	stated := Knowledge{Level: NotIdempotent}
	for _, tc := range []struct {
		name string
		k    Knowledge
		req  any
		want bool
	}{
		{"a read", Knowledge{Level: Idempotent}, nil, true},
		{"a write with a request_id", write, request("r-1"), true},
		{"a write with an empty request_id", write, request(""), false},
		{"a write whose request has no request_id", write, &emptypb.Empty{}, false},
		{"a write whose request_id is a number", write, numbered, false},
		{"a write of a stream (no request)", write, nil, false},
		{"a write whose request is no proto.Message", write, "r-1", false},
		{"a typed nil request", write, (*emptypb.Empty)(nil), false},
		{"a stated write with a request_id", stated, request("r-1"), false},
		{"a create that sets its ID", withID, create("o-1"), true},
		{"a create that leaves its ID empty", withID, create(""), false},
		{"a create whose request has no such ID", withID, &emptypb.Empty{}, false},
		{"a create with a request_id", withID, request("r-1"), true},
		{"a write that sets an ID it is not known by", write, create("o-1"), false},
	} {
		if got := Resendable(tc.k, tc.req); got != tc.want {
			t.Errorf("%s: Resendable = %v, want %v", tc.name, got, tc.want)
		}
	}
	req, created := request("r-1"), create("o-1")
	if n := testing.AllocsPerRun(100, func() { Resendable(write, req); Resendable(withID, created) }); n != 0 {
		t.Errorf("Resendable allocates %v times; want 0", n)
	}
}

// TestCatalogBounded: a Catalog keeps what it learnt of the methods the
// program knows, and at most recentMax of the names callers choose, which
// it learns again once forgotten; a known method's lookup allocates nothing.
func TestCatalogBounded(t *testing.T) {
	b := &Catalog{}
	b.State("/stated.Svc/Do", Idempotent)
	known := []string{"/safetytest.Shop/GetOrder", "/safetytest.Shop/CreateOrder", "/stated.Svc/Do", "/google.longrunning.Operations/GetOperation"}
	for _, m := range known {
		b.Of(m)
	}
	for i := range 10 * recentMax {
		if k := b.Of(fmt.Sprintf("/tenant%d.Svc/Do", i)); k.Level != NotIdempotent || !k.Assumed {
			t.Fatalf("Of(/tenant%d.Svc/Do) = %+v; want treated as a write", i, k)
		}
	}
	if k := b.Of("/tenant1.Svc/GetThing"); k.Level != Idempotent {
		t.Errorf("Of(/tenant1.Svc/GetThing) = %+v after the flood; want a standard read", k)
	}
	count := func(m *sync.Map) (n int) {
		m.Range(func(any, any) bool { n++; return true })
		return n
	}
	if n := count(&b.known); n != len(known) {
		t.Errorf("%d methods kept for good; want the %d the program knows", n, len(known))
	}
	if n := count(&b.recent); n > recentMax {
		t.Errorf("%d names of callers kept; want %d at most", n, recentMax)
	}
	long := "/long.Svc/" + strings.Repeat("x", 1<<17)
	b.Of(long)
	if _, ok := b.recent.Load(long); ok {
		t.Errorf("a name of %d bytes kept; want none over %d", len(long), recentName)
	}
	for _, m := range known {
		if n := testing.AllocsPerRun(100, func() { b.Of(m) }); n != 0 {
			t.Errorf("Of(%s), known, allocates %v times; want 0", m, n)
		}
	}
}
