// Package googleclients writes the library's data on the Google Cloud
// clients (by cmd/gaxdata): what every generated client retries, from
// googleapis' gRPC service configs (internal/googledata/retries.txt and
// retries_gen.go), and what the descriptors of the methods of the clients
// this module pins tell of their safety (safety_gen.go). Its tests check
// that the committed data is current, that the table equals what the pinned
// clients' default CallOptions retry, sweep real clients' methods against a
// loopback fake, measure the x-goog-api-client values each client family
// sends, and hold the tests of gaxretry that build real clients.
//
// This module is not published: the library ships the data and imports no
// client module.
package googleclients

import (
	"bytes"
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"go/format"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	gax "github.com/googleapis/gax-go/v2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/platformkit/grpcbackoff/interceptor"
	gc "github.com/platformkit/grpcbackoff/internal/cloudclients"
	"github.com/platformkit/grpcbackoff/internal/safety"
)

// Data is what the pinned generated clients retry, and what the
// descriptors of their methods tell of their safety.
type Data struct {
	Clients []ClientInfo
	Methods []Method // sorted by Name, then Client
	// Safety is one per method of Methods and of the hand-written
	// clients' statements, sorted by Method.
	Safety []Safety
}

// Safety is what the interceptor package learns of a method's safety from
// its descriptor (interceptor.Retrier.Explain: Safety and Source), so that
// a binary that does not link the method's generated package knows it too.
type Safety struct {
	Method string
	Safety interceptor.Safety
	Stream bool
	Source string
	ID     string // a Google API's create's user-specified ID field (AIP-133): safety.Knowledge.ID
}

// ClientInfo names a generated client of the data.
type ClientInfo struct {
	Module        string // module path: "cloud.google.com/go/redis"
	ModuleVersion string // the pinned version: "v1.29.0"
	Package       string // Go package: "cloud.google.com/go/redis/apiv1"
	Name          string // client type: "CloudRedisClient"
	Gapic         string // the client's gapic/ token in x-goog-api-client: "1.29.0"
	Header        string // the whole x-goog-api-client value seen (machine-dependent: gl-go/)
}

// Method is what one client retries for one method.
type Method struct {
	Name    string      // full gRPC method: "/google.cloud.redis.v1.CloudRedis/GetInstance"
	Client  int         // index in Data.Clients
	Codes   uint32      // codes the client's default CallOptions retry: bit 1<<code
	Backoff gax.Backoff // their gax.Backoff (Initial, Max, Multiplier); zero without a retry
	Stream  bool        // a client, server or bidi stream
}

// Mixins are the services whose methods a generated client also exposes,
// where its own service does not define them.
var mixins = []protoreflect.FullName{
	"google.cloud.location.Locations",
	"google.longrunning.Operations",
	"google.iam.v1.IAMPolicy",
}

// Generate builds each of Clients, offline (the caller points
// GCE_METADATA_HOST at loopback), and reads its default CallOptions.
func Generate(ctx context.Context) (*Data, error) {
	var d Data
	for i, c := range Clients() {
		info, methods, err := read(ctx, c)
		if err != nil {
			return nil, fmt.Errorf("googleclients: %s: %w", c.Service, err)
		}
		for j := range methods {
			methods[j].Client = i
		}
		d.Clients = append(d.Clients, info)
		d.Methods = append(d.Methods, methods...)
	}
	slices.SortFunc(d.Methods, func(a, b Method) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), cmp.Compare(a.Client, b.Client))
	})
	for i, m := range d.Methods {
		if i > 0 && d.Methods[i-1].Name == m.Name {
			continue
		}
		k, _ := safety.Registered(m.Name)
		d.Safety = append(d.Safety, Safety{Method: m.Name, Safety: interceptor.Safety(k.Level), Stream: m.Stream, Source: withoutPath(k.Source), ID: string(k.ID)})
	}
	for _, m := range gc.HandMethods() {
		if _, found := slices.BinarySearchFunc(d.Methods, m, func(g Method, m string) int { return strings.Compare(g.Name, m) }); found {
			continue
		}
		k, _ := safety.Registered(m)
		if strings.HasPrefix(k.Source, "no descriptor") {
			return nil, fmt.Errorf("googleclients: %s: no descriptor linked: import the client that calls it", m)
		}
		d.Safety = append(d.Safety, Safety{Method: m, Safety: interceptor.Safety(k.Level), Stream: isStream(m), Source: withoutPath(k.Source), ID: string(k.ID)})
	}
	slices.SortFunc(d.Safety, func(a, b Safety) int { return strings.Compare(a.Method, b.Method) })
	return &d, nil
}

// httpPath is the path of a google.api.http binding in a Source.
var httpPath = regexp.MustCompile(`^(google\.api\.http [A-Z]+) \S*[^\s:]`)

// withoutPath returns source without the path of its google.api.http
// binding ("google.api.http POST: ..."): the paths would weigh 19 KB in
// every binary that links the data.
func withoutPath(source string) string { return httpPath.ReplaceAllString(source, "$1") }

var callOptionsType = reflect.TypeFor[[]gax.CallOption]()

// read builds c and reads its CallOptions and the gapic/ version it sends.
func read(ctx context.Context, c Client) (ClientInfo, []Method, error) {
	var info ClientInfo
	svc, err := findService(protoreflect.FullName(c.Service))
	if err != nil {
		return info, nil, err
	}
	var seen capture
	client, err := c.New(ctx,
		option.WithEndpoint("127.0.0.1:1"), // never dialled: the interceptor below answers
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
		option.WithGRPCDialOption(grpc.WithUnaryInterceptor(seen.intercept)))
	if err != nil {
		return info, nil, err
	}
	if cl, ok := client.(interface{ Close() error }); ok {
		defer cl.Close()
	}
	cv := reflect.ValueOf(client)
	t := cv.Type().Elem()
	info.Package, info.Name = t.PkgPath(), t.Name()
	info.Module, info.ModuleVersion = module(info.Package)
	if info.Module == "" {
		return info, nil, fmt.Errorf("%s: not in go.mod's requirements", info.Package)
	}
	co := cv.Elem().FieldByName("CallOptions")
	if !co.IsValid() || co.Kind() != reflect.Pointer || co.Elem().Kind() != reflect.Struct {
		return info, nil, fmt.Errorf("%s.%s: no CallOptions pointer to a struct", info.Package, info.Name)
	}
	s := co.Elem()
	var methods []Method
	for i := range s.NumField() {
		f := s.Type().Field(i)
		if f.Type != callOptionsType {
			return info, nil, fmt.Errorf("%s.%s: CallOptions.%s is %s", info.Package, info.Name, f.Name, f.Type)
		}
		md, err := method(svc, f.Name)
		if err != nil {
			return info, nil, fmt.Errorf("%s.%s: CallOptions.%s: %w", info.Package, info.Name, f.Name, err)
		}
		codes, backoff := retried(s.Field(i).Interface().([]gax.CallOption))
		methods = append(methods, Method{
			Name:    "/" + string(md.Parent().FullName()) + "/" + string(md.Name()),
			Codes:   codes,
			Backoff: backoff,
			Stream:  md.IsStreamingClient() || md.IsStreamingServer(),
		})
	}
	if err := seen.call(ctx, cv, methods); err != nil {
		return info, nil, fmt.Errorf("%s.%s: %w", info.Package, info.Name, err)
	}
	info.Header = seen.header
	info.Gapic = Token(seen.header, "gapic")
	if info.Gapic == "" {
		return info, nil, fmt.Errorf("%s.%s: no gapic/ token in x-goog-api-client %q", info.Package, info.Name, seen.header)
	}
	if "v"+info.Gapic != info.ModuleVersion {
		// The build took another version than go.mod pins (a workspace
		// module requires a newer one), or the client's version is not its
		// module's: either way the data would name the wrong pin.
		return info, nil, fmt.Errorf("%s.%s sends gapic/%s, but go.mod pins %s %s", info.Package, info.Name, info.Gapic, info.Module, info.ModuleVersion)
	}
	return info, methods, nil
}

// retried returns the codes 1 to 16 that a fresh Retryer of opts retries,
// bit 1<<code, 0 when opts set no Retryer, and the gax.Backoff of that
// Retryer when it is gax.OnCodes's (read by reflection: its fields are
// unexported).
func retried(opts []gax.CallOption) (uint32, gax.Backoff) {
	var s gax.CallSettings
	for _, o := range opts {
		o.Resolve(&s)
	}
	var mask uint32
	var bo gax.Backoff
	for c := codes.Canceled; c <= codes.Unauthenticated; c++ {
		if s.Retry == nil {
			break
		}
		r := s.Retry()
		if r == nil {
			break
		}
		if _, ok := r.Retry(status.Error(c, "x")); ok {
			mask |= 1 << c
		}
		if v := reflect.ValueOf(r); c == codes.Canceled && v.Kind() == reflect.Pointer && v.Elem().Kind() == reflect.Struct {
			if f := v.Elem().FieldByName("backoff"); f.IsValid() && f.Type() == reflect.TypeFor[gax.Backoff]() {
				bo.Initial = time.Duration(f.FieldByName("Initial").Int())
				bo.Max = time.Duration(f.FieldByName("Max").Int())
				bo.Multiplier = f.FieldByName("Multiplier").Float()
			}
		}
	}
	return mask, bo
}

// isStream reports whether method is a stream, by its registered
// descriptor.
func isStream(method string) bool {
	service, name := method[1:strings.LastIndexByte(method, '/')], method[strings.LastIndexByte(method, '/')+1:]
	svc, err := findService(protoreflect.FullName(service))
	if err != nil {
		return false
	}
	md := svc.Methods().ByName(protoreflect.Name(name))
	return md != nil && (md.IsStreamingClient() || md.IsStreamingServer())
}

// findService returns the descriptor of the service named name.
func findService(name protoreflect.FullName) (protoreflect.ServiceDescriptor, error) {
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
	if err != nil {
		return nil, err
	}
	svc, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, fmt.Errorf("%s is not a service", name)
	}
	return svc, nil
}

// method returns the descriptor of the method a CallOptions field names:
// svc's own, or else a mixin's.
func method(svc protoreflect.ServiceDescriptor, field string) (protoreflect.MethodDescriptor, error) {
	if md := svc.Methods().ByName(protoreflect.Name(field)); md != nil {
		return md, nil
	}
	var found []protoreflect.MethodDescriptor
	for _, name := range mixins {
		mx, err := findService(name)
		if err != nil {
			continue // not linked: no client of it here
		}
		if md := mx.Methods().ByName(protoreflect.Name(field)); md != nil {
			found = append(found, md)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("no method %s in %s nor in a mixin", field, svc.FullName())
	case 1:
		return found[0], nil
	}
	return nil, fmt.Errorf("method %s is in %d mixins", field, len(found))
}

// goMod is this module's go.mod: its requirements are the pins.
//
//go:embed go.mod
var goMod string

// module returns the module of the Go package pkg among the requirements
// of go.mod, and its version there.
func module(pkg string) (path, version string) {
	for line := range strings.Lines(goMod) {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) < 2 || !strings.HasPrefix(f[1], "v") {
			continue
		}
		if (pkg == f[0] || strings.HasPrefix(pkg, f[0]+"/")) && len(f[0]) > len(path) {
			path, version = f[0], f[1]
		}
	}
	return path, version
}

// Token returns the value of the first name/value token of an
// x-goog-api-client header, or "".
func Token(header, name string) string {
	for f := range strings.FieldsSeq(header) {
		if v, ok := strings.CutPrefix(f, name+"/"); ok {
			return v
		}
	}
	return ""
}

// capture records the x-goog-api-client value of the calls a client makes,
// and answers them without a connection.
type capture struct {
	header string
	code   codes.Code
}

func (c *capture) intercept(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ grpc.UnaryInvoker, _ ...grpc.CallOption) error {
	md, _ := metadata.FromOutgoingContext(ctx)
	c.header = strings.Join(md.Get("x-goog-api-client"), " ")
	return status.Error(c.code, "googleclients: answered by the capturing interceptor")
}

var (
	contextType = reflect.TypeFor[context.Context]()
	errorType   = reflect.TypeFor[error]()
	messageType = reflect.TypeFor[proto.Message]()
)

// call makes one unary call through client, one whose method returns a
// message and does not retry the code the interceptor answers, so that the
// interceptor sees the header the client sends.
func (c *capture) call(ctx context.Context, client reflect.Value, methods []Method) error {
	for _, m := range methods {
		c.code = codes.FailedPrecondition
		if m.Stream || m.Codes&(1<<c.code) != 0 {
			continue
		}
		fn := client.MethodByName(m.Name[strings.LastIndexByte(m.Name, '/')+1:])
		if !fn.IsValid() {
			continue
		}
		t := fn.Type()
		if t.NumIn() != 3 || t.In(0) != contextType || t.In(1).Kind() != reflect.Pointer ||
			t.NumOut() != 2 || !t.Out(0).Implements(messageType) || t.Out(1) != errorType {
			continue
		}
		out := fn.Call([]reflect.Value{reflect.ValueOf(ctx), reflect.New(t.In(1).Elem())})
		err, _ := out[1].Interface().(error)
		if status.Code(err) != c.code {
			return fmt.Errorf("%s: got %v, want the interceptor's answer", m.Name, err)
		}
		return nil
	}
	return errors.New("no unary method to call for the header")
}

// RenderSafety writes the safety of d's methods as the Go source of package
// pkg: the data's types, then the data, gofmt'd, one method a line.
func RenderSafety(d *Data, pkg string) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, `// Code generated by "go run ./googleclients/cmd/gaxdata -w"; DO NOT EDIT.

package %s

// MethodFacts is what the descriptor of a pinned client's method tells of
// it (see PinnedMethods).
type MethodFacts struct {
	Method string
	Safety Safety
	Stream bool
	Why    string
	// ID is, for a create with a user-specified ID (AIP-133), the request's
	// field of that ID: a call that sets it may be resent.
	ID string
}

// Safety is what a descriptor tells of a method's safety, as the
// interceptor package reads it (interceptor.Safety).
type Safety int8

const (
	SafetyUnknown Safety = iota
	Idempotent
	NotIdempotent
)

// PinnedMethods is what the descriptors of the methods of the pinned
// generated clients (googleclients/go.mod) and of the hand-written clients'
// statements (internal/cloudclients/handwritten.go) tell of their safety,
// as the interceptor package reads them (interceptor.Safety, and why),
// sorted by method: for a binary that does not link their generated
// packages.
var PinnedMethods = [...]MethodFacts{
`, pkg)
	name := map[interceptor.Safety]string{interceptor.SafetyUnknown: "SafetyUnknown", interceptor.Idempotent: "Idempotent", interceptor.NotIdempotent: "NotIdempotent"}
	for _, s := range d.Safety {
		stream := ""
		if s.Stream {
			stream = ", Stream: true"
		}
		id := ""
		if s.ID != "" {
			id = fmt.Sprintf(", ID: %q", s.ID)
		}
		fmt.Fprintf(&b, "\t{Method: %q, Safety: %s%s, Why: %q%s},\n", s.Method, name[s.Safety], stream, s.Source, id)
	}
	b.WriteString("}\n")
	return format.Source(b.Bytes())
}

// SafetyFile is the generated file of the methods' safety, from the
// repository's root.
const SafetyFile = "internal/googledata/safety_gen.go"
