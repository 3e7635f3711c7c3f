// Package redistest provides an in-memory fake of the Cloud Redis API
// (google.cloud.redis.v1.CloudRedis) and of the google.longrunning.Operations
// service, in the spirit of net/http/httptest.
//
// A [Server] listens on a private [bufconn] listener, so no TCP port is ever
// opened. The real client from cloud.google.com/go/redis/apiv1 talks to it via
// [Server.ClientOptions] or [Server.Client]; plain gRPC tests use
// [Server.Conn]. The fake validates requests like the real API, completes every
// long-running operation immediately, supports fault injection ([Server.Inject],
// [Server.Down], [Server.SetLatency]) and records every attempt
// ([Server.Attempts]).
//
// The Server starts no goroutine other than the gRPC server itself and the
// goroutines gRPC starts per connection and call; all of them stop on
// [Server.Close]. It reads no real clock except through time.Now and
// time.NewTimer, so it can be created and used inside a testing/synctest bubble,
// where recorded times are the bubble's fake clock.
package redistest

import (
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	redis "cloud.google.com/go/redis/apiv1"
	"cloud.google.com/go/redis/apiv1/redispb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Full gRPC method names served by the fake, for [Fault.Method],
// [Server.FailNext] and [Server.AttemptsFor].
const (
	MethodListInstances         = redispb.CloudRedis_ListInstances_FullMethodName
	MethodGetInstance           = redispb.CloudRedis_GetInstance_FullMethodName
	MethodGetInstanceAuthString = redispb.CloudRedis_GetInstanceAuthString_FullMethodName
	MethodCreateInstance        = redispb.CloudRedis_CreateInstance_FullMethodName
	MethodUpdateInstance        = redispb.CloudRedis_UpdateInstance_FullMethodName
	MethodUpgradeInstance       = redispb.CloudRedis_UpgradeInstance_FullMethodName
	MethodImportInstance        = redispb.CloudRedis_ImportInstance_FullMethodName
	MethodExportInstance        = redispb.CloudRedis_ExportInstance_FullMethodName
	MethodFailoverInstance      = redispb.CloudRedis_FailoverInstance_FullMethodName
	MethodDeleteInstance        = redispb.CloudRedis_DeleteInstance_FullMethodName
	MethodRescheduleMaintenance = redispb.CloudRedis_RescheduleMaintenance_FullMethodName

	MethodListOperations  = longrunningpb.Operations_ListOperations_FullMethodName
	MethodGetOperation    = longrunningpb.Operations_GetOperation_FullMethodName
	MethodDeleteOperation = longrunningpb.Operations_DeleteOperation_FullMethodName
	MethodCancelOperation = longrunningpb.Operations_CancelOperation_FullMethodName
	MethodWaitOperation   = longrunningpb.Operations_WaitOperation_FullMethodName
)

const (
	// target is the dial target. The explicit passthrough scheme keeps both
	// grpc.NewClient (whose default resolver is dns) and the Google transport
	// (which dials the endpoint verbatim when it contains "://") from resolving
	// anything: the context dialer receives the address and ignores it.
	target     = "passthrough:///redistest.bufconn"
	bufferSize = 1 << 20

	// DefaultPageSize is the ListInstances and ListOperations page size used
	// when the request's page_size is 0. It is also the maximum: larger
	// page sizes are clamped to it, as the real API does.
	DefaultPageSize = 1000
)

// Server is an in-memory fake Cloud Redis API server. Create it with
// [NewServer] and stop it with [Server.Close]. All methods are safe for
// concurrent use.
type Server struct {
	lis       *bufconn.Listener
	grpc      *grpc.Server
	serveDone chan struct{}
	closeOnce sync.Once
	state     *state

	mu       sync.Mutex // guards the fields below
	closed   bool
	conns    []*grpc.ClientConn
	clients  []*redis.CloudRedisClient
	faults   []*Fault // pending faults; Count is the remaining failures
	down     bool
	frozen   bool
	latency  time.Duration
	attempts []*Attempt
}

// NewServer starts a fake on a private bufconn listener and returns it. It
// panics if the server cannot start, like httptest.NewServer. The caller must
// call [Server.Close]. NewServer may be called inside a synctest bubble; the
// server then belongs to that bubble.
func NewServer() *Server {
	s := &Server{
		lis:       bufconn.Listen(bufferSize),
		serveDone: make(chan struct{}),
		state:     newState(),
	}
	s.grpc = grpc.NewServer(
		grpc.ChainUnaryInterceptor(s.unaryInterceptor),
		grpc.ChainStreamInterceptor(s.streamInterceptor),
		grpc.WaitForHandlers(true), // Close returns only after every handler has.
		// Calls to services the fake does not serve (e.g. the client's
		// google.cloud.location.Locations mixin) still pass through the
		// interceptors, so they are recorded and subject to faults.
		grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
			m, _ := grpc.MethodFromServerStream(ss)
			return status.Errorf(codes.Unimplemented, "redistest: method %s is not served by the fake", m)
		}),
	)
	redispb.RegisterCloudRedisServer(s.grpc, &redisService{st: s.state})
	longrunningpb.RegisterOperationsServer(s.grpc, &operationsService{st: s.state})
	go func() {
		defer close(s.serveDone)
		// Serve returns nil after Stop; any other error means the listener
		// failed, after which every dial fails, which tests will notice.
		_ = s.grpc.Serve(s.lis)
	}()
	return s
}

// Close closes every ClientConn and client the Server created for callers
// ([Server.Conn], [Server.Client]), stops the gRPC server (cancelling calls in
// flight and waiting for their handlers), closes the listener and waits for the
// serving goroutine to exit. It is idempotent. Clients that callers built
// themselves from [Server.ClientOptions] are not closed; their calls fail with
// UNAVAILABLE once the Server is closed.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		conns, clients := s.conns, s.clients
		s.conns, s.clients = nil, nil
		s.mu.Unlock()

		for _, c := range clients {
			_ = c.Close() // error only reports an already-closed connection
		}
		for _, c := range conns {
			_ = c.Close()
		}
		s.grpc.Stop()
		_ = s.lis.Close()
		<-s.serveDone
	})
}

// Dialer returns a dialer for grpc.WithContextDialer that connects to the
// Server over its bufconn listener, ignoring the address. After Close the
// dialer returns an error.
func (s *Server) Dialer() func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, _ string) (net.Conn, error) {
		return s.lis.DialContext(ctx)
	}
}

// ClientOptions returns the options that make redis.NewCloudRedisClient (and
// other google.golang.org/api based clients) talk to this Server: a
// passthrough endpoint, the bufconn dialer, insecure transport credentials, no
// authentication, and telemetry disabled (so the client starts no OpenTelemetry
// machinery). Append your own options after these, e.g.
// option.WithGRPCDialOption(grpc.WithUnaryInterceptor(...)); they take effect
// because the options dial a fresh connection rather than using
// option.WithGRPCConn. The caller must Close clients it creates from them.
func (s *Server) ClientOptions() []option.ClientOption {
	return []option.ClientOption{
		option.WithEndpoint(target),
		option.WithoutAuthentication(),
		option.WithTelemetryDisabled(),
		option.WithGRPCDialOption(grpc.WithContextDialer(s.Dialer())),
		// The Google transport installs TLS credentials first; a later
		// WithTransportCredentials overrides them.
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
	}
}

// Conn returns a new ClientConn to the Server for plain gRPC tests. The
// bufconn dialer and insecure transport credentials come first, so opts may
// add interceptors, service configs, or override them. The Server closes the
// conn on Close (closing it earlier is fine too). Conn panics if the options
// are invalid or the Server is closed.
func (s *Server) Conn(opts ...grpc.DialOption) *grpc.ClientConn {
	base := []grpc.DialOption{
		grpc.WithContextDialer(s.Dialer()),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}
	cc, err := grpc.NewClient(target, append(base, opts...)...)
	if err != nil {
		panic(fmt.Sprintf("redistest: dialing %s: %v", target, err))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = cc.Close()
		panic("redistest: Conn called on a closed Server")
	}
	s.conns = append(s.conns, cc)
	return cc
}

// Client returns a real Cloud Redis client connected to the Server, built from
// [Server.ClientOptions] followed by opts. The Server closes it on Close.
// Client panics if the client cannot be created or the Server is closed.
func (s *Server) Client(ctx context.Context, opts ...option.ClientOption) *redis.CloudRedisClient {
	c, err := redis.NewCloudRedisClient(ctx, append(s.ClientOptions(), opts...)...)
	if err != nil {
		panic(fmt.Sprintf("redistest: creating CloudRedisClient: %v", err))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = c.Close()
		panic("redistest: Client called on a closed Server")
	}
	s.clients = append(s.clients, c)
	return c
}

// state is the fake's data: instances and operations, keyed by full name.
type state struct {
	mu        sync.Mutex
	instances map[string]*redispb.Instance
	ops       map[string]*longrunningpb.Operation
	seq       int // source of host addresses and operation ids
}

func newState() *state {
	return &state{
		instances: make(map[string]*redispb.Instance),
		ops:       make(map[string]*longrunningpb.Operation),
	}
}

// instanceIDRE is the real API's rule for instance ids: 1-40 characters of
// lowercase letters, digits and hyphens, starting with a letter and not ending
// with a hyphen.
var instanceIDRE = regexp.MustCompile(`^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$`)

// segment reports whether v is a usable resource-name segment.
func segment(v string) bool { return v != "" && !strings.ContainsAny(v, "/ ") }

// parseParent splits "projects/{project}/locations/{location}".
func parseParent(parent string) (project, location string, err error) {
	p := strings.Split(parent, "/")
	if len(p) != 4 || p[0] != "projects" || p[2] != "locations" || !segment(p[1]) || !segment(p[3]) {
		return "", "", status.Errorf(codes.InvalidArgument,
			"invalid parent %q: want projects/{project}/locations/{location}", parent)
	}
	return p[1], p[3], nil
}

// parseInstanceName splits "projects/{p}/locations/{l}/instances/{id}".
func parseInstanceName(name string) (project, location, id string, err error) {
	p := strings.Split(name, "/")
	if len(p) != 6 || p[0] != "projects" || p[2] != "locations" || p[4] != "instances" ||
		!segment(p[1]) || !segment(p[3]) || p[3] == "-" {
		return "", "", "", status.Errorf(codes.InvalidArgument,
			"invalid instance name %q: want projects/{project}/locations/{location}/instances/{instance_id}", name)
	}
	if err := checkInstanceID(p[5]); err != nil {
		return "", "", "", err
	}
	return p[1], p[3], p[5], nil
}

func checkInstanceID(id string) error {
	if !instanceIDRE.MatchString(id) {
		return status.Errorf(codes.InvalidArgument,
			"invalid instance_id %q: must be 1-40 lowercase letters, digits or hyphens, start with a letter and not end with a hyphen", id)
	}
	return nil
}

func notFound(name string) error {
	return status.Errorf(codes.NotFound, "resource %q not found", name)
}

// page returns the slice of sorted names for one page plus the next page
// token. The token is opaque to callers: base64 of the parent and the last
// name returned, so pages stay consistent while resources come and go.
func page(names []string, parent string, size int32, token string) ([]string, string, error) {
	if size < 0 {
		return nil, "", status.Errorf(codes.InvalidArgument, "invalid page_size %d: must be >= 0", size)
	}
	if size == 0 || size > DefaultPageSize {
		size = DefaultPageSize
	}
	slices.Sort(names)
	if token != "" {
		raw, err := base64.RawURLEncoding.DecodeString(token)
		tokParent, after, ok := strings.Cut(string(raw), "\n")
		if err != nil || !ok || tokParent != parent {
			return nil, "", status.Errorf(codes.InvalidArgument, "invalid page_token %q", token)
		}
		i, _ := slices.BinarySearch(names, after)
		for i < len(names) && names[i] <= after {
			i++
		}
		names = names[i:]
	}
	if len(names) <= int(size) {
		return names, "", nil
	}
	names = names[:size]
	next := base64.RawURLEncoding.EncodeToString([]byte(parent + "\n" + names[len(names)-1]))
	return names, next, nil
}

// newOperation stores and returns a completed operation. Callers hold st.mu.
func (st *state) newOperation(project, location, target, verb string, resp proto.Message) (*longrunningpb.Operation, error) {
	st.seq++
	now := timestamppb.Now()
	md, err := anypb.New(&redispb.OperationMetadata{
		CreateTime: now, EndTime: now, Target: target, Verb: verb, ApiVersion: "v1",
	})
	if err != nil {
		return nil, status.Errorf(codes.Internal, "packing operation metadata: %v", err)
	}
	r, err := anypb.New(resp)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "packing operation response: %v", err)
	}
	op := &longrunningpb.Operation{
		Name:     fmt.Sprintf("projects/%s/locations/%s/operations/operation-%d", project, location, st.seq),
		Metadata: md,
		Done:     true,
		Result:   &longrunningpb.Operation_Response{Response: r},
	}
	st.ops[op.Name] = op
	return proto.CloneOf(op), nil
}

// redisService implements the CloudRedis methods the fake supports; the rest
// answer UNIMPLEMENTED.
type redisService struct {
	redispb.UnimplementedCloudRedisServer
	st *state
}

func (r *redisService) ListInstances(_ context.Context, req *redispb.ListInstancesRequest) (*redispb.ListInstancesResponse, error) {
	project, location, err := parseParent(req.GetParent())
	if err != nil {
		return nil, err
	}
	prefix := "projects/" + project + "/locations/"
	if location != "-" { // "-" lists every location, as in the real API
		prefix += location + "/instances/"
	}
	r.st.mu.Lock()
	defer r.st.mu.Unlock()
	var names []string
	for name := range r.st.instances {
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	names, next, err := page(names, req.GetParent(), req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	resp := &redispb.ListInstancesResponse{NextPageToken: next}
	for _, name := range names {
		resp.Instances = append(resp.Instances, proto.CloneOf(r.st.instances[name]))
	}
	return resp, nil
}

func (r *redisService) GetInstance(_ context.Context, req *redispb.GetInstanceRequest) (*redispb.Instance, error) {
	if _, _, _, err := parseInstanceName(req.GetName()); err != nil {
		return nil, err
	}
	r.st.mu.Lock()
	defer r.st.mu.Unlock()
	in, ok := r.st.instances[req.GetName()]
	if !ok {
		return nil, notFound(req.GetName())
	}
	return proto.CloneOf(in), nil
}

func (r *redisService) CreateInstance(_ context.Context, req *redispb.CreateInstanceRequest) (*longrunningpb.Operation, error) {
	project, location, err := parseParent(req.GetParent())
	if err != nil {
		return nil, err
	}
	if location == "-" {
		return nil, status.Errorf(codes.InvalidArgument, "invalid parent %q: a concrete location is required", req.GetParent())
	}
	if err := checkInstanceID(req.GetInstanceId()); err != nil {
		return nil, err
	}
	if req.GetInstance() == nil {
		return nil, status.Error(codes.InvalidArgument, "instance is required")
	}
	in := proto.CloneOf(req.GetInstance())
	switch in.GetTier() {
	case redispb.Instance_BASIC, redispb.Instance_STANDARD_HA:
	default:
		return nil, status.Errorf(codes.InvalidArgument, "invalid instance.tier %v: must be BASIC or STANDARD_HA", in.GetTier())
	}
	if in.GetMemorySizeGb() <= 0 {
		return nil, status.Errorf(codes.InvalidArgument, "invalid instance.memory_size_gb %d: must be > 0", in.GetMemorySizeGb())
	}
	name := req.GetParent() + "/instances/" + req.GetInstanceId()

	r.st.mu.Lock()
	defer r.st.mu.Unlock()
	if _, ok := r.st.instances[name]; ok {
		return nil, status.Errorf(codes.AlreadyExists, "instance %q already exists", name)
	}
	n := r.st.seq + 1
	in.Name = name
	in.State = redispb.Instance_READY
	in.CreateTime = timestamppb.Now()
	in.Host = fmt.Sprintf("10.%d.%d.%d", n>>16&0xff, n>>8&0xff, n&0xff)
	in.Port = 6379
	if in.LocationId == "" {
		in.LocationId = location + "-a"
	}
	in.CurrentLocationId = in.LocationId
	if in.RedisVersion == "" {
		in.RedisVersion = "REDIS_7_2"
	}
	if in.AuthorizedNetwork == "" {
		in.AuthorizedNetwork = "projects/" + project + "/global/networks/default"
	}
	if in.ConnectMode == redispb.Instance_CONNECT_MODE_UNSPECIFIED {
		in.ConnectMode = redispb.Instance_DIRECT_PEERING
	}
	if in.TransitEncryptionMode == redispb.Instance_TRANSIT_ENCRYPTION_MODE_UNSPECIFIED {
		in.TransitEncryptionMode = redispb.Instance_DISABLED
	}
	if in.Tier == redispb.Instance_STANDARD_HA {
		if in.ReadReplicasMode == redispb.Instance_READ_REPLICAS_MODE_UNSPECIFIED {
			in.ReadReplicasMode = redispb.Instance_READ_REPLICAS_DISABLED
		}
		if in.ReplicaCount == 0 {
			in.ReplicaCount = 1
		}
	}
	op, err := r.st.newOperation(project, location, name, "create", in)
	if err != nil {
		return nil, err
	}
	r.st.instances[name] = in
	return op, nil
}

func (r *redisService) UpdateInstance(_ context.Context, req *redispb.UpdateInstanceRequest) (*longrunningpb.Operation, error) {
	paths := req.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		return nil, status.Error(codes.InvalidArgument, "update_mask is required")
	}
	src := req.GetInstance()
	if src == nil {
		return nil, status.Error(codes.InvalidArgument, "instance is required")
	}
	project, location, _, err := parseInstanceName(src.GetName())
	if err != nil {
		return nil, err
	}
	r.st.mu.Lock()
	defer r.st.mu.Unlock()
	cur, ok := r.st.instances[src.GetName()]
	if !ok {
		return nil, notFound(src.GetName())
	}
	in := proto.CloneOf(cur)
	for _, p := range paths {
		switch p {
		case "display_name":
			in.DisplayName = src.GetDisplayName()
		case "labels":
			in.Labels = maps.Clone(src.GetLabels())
		case "memory_size_gb":
			if src.GetMemorySizeGb() <= 0 {
				return nil, status.Errorf(codes.InvalidArgument, "invalid instance.memory_size_gb %d: must be > 0", src.GetMemorySizeGb())
			}
			in.MemorySizeGb = src.GetMemorySizeGb()
		case "redis_config", "redis_configs":
			in.RedisConfigs = maps.Clone(src.GetRedisConfigs())
		case "replica_count":
			in.ReplicaCount = src.GetReplicaCount()
		case "read_replicas_mode":
			in.ReadReplicasMode = src.GetReadReplicasMode()
		default:
			return nil, status.Errorf(codes.InvalidArgument,
				"invalid update_mask path %q: must be one of display_name, labels, memory_size_gb, redis_config, replica_count, read_replicas_mode", p)
		}
	}
	op, err := r.st.newOperation(project, location, in.Name, "update", in)
	if err != nil {
		return nil, err
	}
	r.st.instances[in.Name] = in
	return op, nil
}

func (r *redisService) DeleteInstance(_ context.Context, req *redispb.DeleteInstanceRequest) (*longrunningpb.Operation, error) {
	project, location, _, err := parseInstanceName(req.GetName())
	if err != nil {
		return nil, err
	}
	r.st.mu.Lock()
	defer r.st.mu.Unlock()
	if _, ok := r.st.instances[req.GetName()]; !ok {
		return nil, notFound(req.GetName())
	}
	op, err := r.st.newOperation(project, location, req.GetName(), "delete", &emptypb.Empty{})
	if err != nil {
		return nil, err
	}
	delete(r.st.instances, req.GetName())
	return op, nil
}

// operationsService serves the operations created by mutations. They are all
// done, so WaitOperation returns at once and CancelOperation has no effect.
type operationsService struct {
	longrunningpb.UnimplementedOperationsServer
	st *state
}

func (o *operationsService) lookup(name string) (*longrunningpb.Operation, error) {
	if name == "" {
		return nil, status.Error(codes.InvalidArgument, "operation name is required")
	}
	o.st.mu.Lock()
	defer o.st.mu.Unlock()
	op, ok := o.st.ops[name]
	if !ok {
		return nil, notFound(name)
	}
	return proto.CloneOf(op), nil
}

func (o *operationsService) GetOperation(_ context.Context, req *longrunningpb.GetOperationRequest) (*longrunningpb.Operation, error) {
	return o.lookup(req.GetName())
}

func (o *operationsService) WaitOperation(_ context.Context, req *longrunningpb.WaitOperationRequest) (*longrunningpb.Operation, error) {
	return o.lookup(req.GetName())
}

func (o *operationsService) CancelOperation(_ context.Context, req *longrunningpb.CancelOperationRequest) (*emptypb.Empty, error) {
	if _, err := o.lookup(req.GetName()); err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

func (o *operationsService) DeleteOperation(_ context.Context, req *longrunningpb.DeleteOperationRequest) (*emptypb.Empty, error) {
	if _, err := o.lookup(req.GetName()); err != nil {
		return nil, err
	}
	o.st.mu.Lock()
	defer o.st.mu.Unlock()
	delete(o.st.ops, req.GetName())
	return &emptypb.Empty{}, nil
}

// ListOperations lists the operations under name
// ("projects/{p}/locations/{l}"), ignoring the filter.
func (o *operationsService) ListOperations(_ context.Context, req *longrunningpb.ListOperationsRequest) (*longrunningpb.ListOperationsResponse, error) {
	if _, _, err := parseParent(req.GetName()); err != nil {
		return nil, err
	}
	prefix := req.GetName() + "/operations/"
	o.st.mu.Lock()
	defer o.st.mu.Unlock()
	var names []string
	for name := range o.st.ops {
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	names, next, err := page(names, req.GetName(), req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	resp := &longrunningpb.ListOperationsResponse{NextPageToken: next}
	for _, name := range names {
		resp.Operations = append(resp.Operations, proto.CloneOf(o.st.ops[name]))
	}
	return resp, nil
}
