package googleclients_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"testing/synctest"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	redis "cloud.google.com/go/redis/apiv1"
	"cloud.google.com/go/redis/apiv1/redispb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/gaxretry"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// createServer is Cloud Redis's CreateInstance as AIP-133 has it, for an
// API whose ID is optional: an instance_id already taken answers
// ALREADY_EXISTS, an empty one gets an ID of the server's choosing. Its
// first fails attempts fail UNAVAILABLE, after the create applied if
// apply, before it otherwise.
type createServer struct {
	redispb.UnimplementedCloudRedisServer
	fails int
	apply bool

	mu        sync.Mutex
	attempts  int
	instances map[string]bool
}

func (s *createServer) CreateInstance(_ context.Context, req *redispb.CreateInstanceRequest) (*longrunningpb.Operation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts++
	lost := s.attempts <= s.fails
	if lost && !s.apply {
		return nil, status.Error(codes.Unavailable, "restarting: not applied")
	}
	id := req.GetInstanceId()
	if id == "" {
		id = "auto-" + string(rune('a'+len(s.instances)))
	}
	if s.instances[id] {
		return nil, status.Errorf(codes.AlreadyExists, "instance %s exists", id)
	}
	s.instances[id] = true
	if lost {
		return nil, status.Error(codes.Unavailable, "restarting: applied, the answer lost")
	}
	return &longrunningpb.Operation{Name: "operations/create-" + id}, nil
}

// TestCreateWithIDResentPerCall: a Google API's create with an ID of the
// caller's choosing (AIP-133), through the real Cloud Redis client with the
// standard options, is resent after an UNAVAILABLE that may have applied
// only when its request sets the ID: the server makes one instance of one
// ID, so a resend never makes a second one. After a create that applied,
// the resend answers ALREADY_EXISTS; alone, the client (which does not
// retry CreateInstance) answers UNAVAILABLE; either way one instance, and
// no operation handle. Where the lost attempt did not apply, the resend
// creates it. With the ID empty, the server picks one: not resent, one
// instance, as alone.
func TestCreateWithIDResentPerCall(t *testing.T) {
	for _, tc := range []struct {
		name      string
		id        string
		apply     bool
		options   bool
		attempts  int
		code      codes.Code
		instances int
	}{
		{"ID set, not applied, options", "cache", false, true, 2, codes.OK, 1},
		{"ID set, not applied, alone", "cache", false, false, 1, codes.Unavailable, 0},
		{"ID set, applied, options", "cache", true, true, 2, codes.AlreadyExists, 1},
		{"ID set, applied, alone", "cache", true, false, 1, codes.Unavailable, 1},
		{"ID empty, applied, options", "", true, true, 1, codes.Unavailable, 1},
		{"ID empty, not applied, options", "", false, true, 1, codes.Unavailable, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &createServer{fails: 1, apply: tc.apply, instances: map[string]bool{}}
				gs := grpc.NewServer()
				redispb.RegisterCloudRedisServer(gs, srv)
				lis := bufconntest.Listen()
				bufconntest.Serve(t, gs, lis)
				opts := []option.ClientOption{
					option.WithEndpoint("passthrough:///redis"),
					option.WithoutAuthentication(),
					option.WithTelemetryDisabled(),
					option.WithGRPCDialOption(grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) })),
					option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
				}
				if tc.options {
					platform, err := gaxretry.ClientOptions(grpcbackoff.DefaultPolicy())
					if err != nil {
						t.Fatal(err)
					}
					opts = append(opts, platform...)
				}
				c, err := redis.NewCloudRedisClient(t.Context(), opts...)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				_, err = c.CreateInstance(t.Context(), &redispb.CreateInstanceRequest{Parent: parent, InstanceId: tc.id,
					Instance: &redispb.Instance{Tier: redispb.Instance_BASIC, MemorySizeGb: 1}})
				srv.mu.Lock()
				defer srv.mu.Unlock()
				if srv.attempts != tc.attempts || status.Code(err) != tc.code || len(srv.instances) != tc.instances {
					t.Errorf("%d attempts, %v, %d instances; want %d attempts, %v, %d instances", srv.attempts, err, len(srv.instances), tc.attempts, tc.code, tc.instances)
				}
				// An ALREADY_EXISTS after a resend says so: the caller can
				// tell its own create from another's (GUARANTEES.md).
				var e *grpcbackoff.Error
				if tc.code == codes.AlreadyExists && (!errors.As(err, &e) || e.Attempts != 2) {
					t.Errorf("CreateInstance = %#v; want a *grpcbackoff.Error of 2 attempts", err)
				}
			})
		})
	}
}
