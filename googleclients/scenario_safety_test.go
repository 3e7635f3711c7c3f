package googleclients_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/redis/apiv1/redispb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/gaxretry"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/redistest"
)

// Every method of Cloud Redis v1 (registered by redispb), as the interceptor
// sees it from the API's own annotations: what its google.api.http binding
// marks safe keeps the whole recipe; its custom methods (AIP-136), which all
// change the instance, are not retried after UNAVAILABLE, nor is
// CreateInstance but by a call whose request sets instance_id.
func TestRedisSafetyFromAnnotations(t *testing.T) {
	r, err := interceptor.New(grpcbackoff.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]interceptor.Safety{
		"ListInstances": interceptor.Idempotent, "GetInstance": interceptor.Idempotent,
		"GetInstanceAuthString": interceptor.Idempotent, "UpdateInstance": interceptor.Idempotent,
		"DeleteInstance": interceptor.Idempotent,
		// AIP-133: a Create with a user-specified instance_id, resent
		// per call when its request sets it (TestCreateWithIDResentPerCall).
		"CreateInstance": interceptor.NotIdempotent,
		// AIP-136 custom methods that change the instance.
		"UpgradeInstance": interceptor.NotIdempotent, "ImportInstance": interceptor.NotIdempotent,
		"ExportInstance": interceptor.NotIdempotent, "FailoverInstance": interceptor.NotIdempotent,
		"RescheduleMaintenance": interceptor.NotIdempotent,
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName("google.cloud.redis.v1.CloudRedis")
	if err != nil {
		t.Fatal(err)
	}
	methods := d.(protoreflect.ServiceDescriptor).Methods()
	if methods.Len() != len(want) {
		t.Errorf("CloudRedis has %d methods, the test knows %d", methods.Len(), len(want))
	}
	all := grpcbackoff.DefaultPolicy().Codes
	for i := range methods.Len() {
		name := string(methods.Get(i).Name())
		d := r.Explain("/google.cloud.redis.v1.CloudRedis/" + name)
		t.Log(d)
		if d.Safety != want[name] {
			t.Errorf("%s: %v (%s), want %v", name, d.Safety, d.Source, want[name])
		}
		wantCodes := all
		if want[name] == interceptor.NotIdempotent {
			wantCodes = []codes.Code{codes.ResourceExhausted}
		}
		if len(d.Codes) != len(wantCodes) || d.Codes[0] != wantCodes[0] {
			t.Errorf("%s: retried on %v, want %v", name, d.Codes, wantCodes)
		}
	}
	if d := r.Explain(redistest.MethodFailoverInstance); !strings.HasSuffix(d.Source, ":failover: FailoverInstance neither reads nor sets a state") {
		t.Errorf("FailoverInstance: source %q, want the binding and the name's verdict", d.Source)
	}
	if d := r.Explain(redistest.MethodCreateInstance); !strings.Contains(d.Source, "instance_id (AIP-133)") {
		t.Errorf("CreateInstance: source %q, want the user-specified ID named", d.Source)
	}
}

// With the standard options, the real Cloud Redis client against the fake:
// FailoverInstance is retried after RESOURCE_EXHAUSTED (refused, so not
// applied) but not after UNAVAILABLE (may have been applied), even with its
// delays tuned by a Policy of its own (issue 27: it was then taken as safe,
// and applied twice); GetInstance, which the API marks safe, keeps the
// whole recipe.
func TestRedisFailoverNotRetriedAfterUnavailable(t *testing.T) {
	tuned := grpcbackoff.DefaultPolicy()
	tuned.Initial, tuned.Max = 100*time.Millisecond, time.Second
	cases := []struct {
		method   string
		code     codes.Code
		attempts int
		opts     []interceptor.Option
	}{
		{redistest.MethodFailoverInstance, codes.ResourceExhausted, 2, nil},
		{redistest.MethodFailoverInstance, codes.Unavailable, 1, nil},
		{redistest.MethodFailoverInstance, codes.Unavailable, 1, []interceptor.Option{interceptor.WithMethod(redistest.MethodFailoverInstance, tuned)}},
		{redistest.MethodGetInstance, codes.Unavailable, 2, nil},
		{redistest.MethodGetInstance, codes.ResourceExhausted, 2, nil},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%s/tuned %v", tc.method[strings.LastIndexByte(tc.method, '/')+1:], tc.code, tc.opts != nil), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := redistest.NewServer()
				defer srv.Close()
				opts, err := gaxretry.ClientOptions(grpcbackoff.DefaultPolicy(), tc.opts...)
				if err != nil {
					t.Fatal(err)
				}
				c := srv.Client(t.Context(), opts...)
				name := createInstance(t, c, "cache")
				srv.FailNext(tc.method, 1, tc.code)
				start := time.Now()
				if tc.method == redistest.MethodFailoverInstance {
					_, err = c.FailoverInstance(t.Context(), &redispb.FailoverInstanceRequest{Name: name})
				} else {
					_, err = c.GetInstance(t.Context(), &redispb.GetInstanceRequest{Name: name})
				}
				n := len(srv.AttemptsFor(tc.method))
				if n != tc.attempts {
					t.Errorf("%d attempts (err %v), want %d", n, err, tc.attempts)
				}
				var ge *grpcbackoff.Error
				if tc.attempts == 1 && (status.Code(err) != tc.code || errors.As(err, &ge) || time.Since(start) != 0) {
					t.Errorf("err = %v, want the attempt's own %v at once", err, tc.code)
				}
			})
		})
	}
}
