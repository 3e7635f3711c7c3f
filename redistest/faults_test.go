package redistest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"cloud.google.com/go/redis/apiv1/redispb"
	"google.golang.org/genproto/googleapis/cloud/location"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
)

var getA = &redispb.GetInstanceRequest{Name: parent + "/instances/a"}

func codesOf(as []Attempt) []codes.Code {
	var cs []codes.Code
	for _, a := range as {
		cs = append(cs, a.Code)
	}
	return cs
}

func TestInjectValidation(t *testing.T) {
	s := newTestServer(t)
	tests := []struct {
		name string
		f    Fault
		want string // substring of the error; "" means valid
	}{
		{"valid", Fault{Method: MethodGetInstance, Code: codes.Unavailable, Count: 1}, ""},
		{"valid any method", Fault{Code: codes.Internal, Count: 3, Pushback: "-1", RetryDelaySet: true}, ""},
		{"valid operations method", Fault{Method: MethodGetOperation, Code: codes.Aborted, Count: 1}, ""},
		{"ok code", Fault{Code: codes.OK, Count: 1}, "Fault.Code OK"},
		{"unknown code", Fault{Code: codes.Code(99), Count: 1}, "Fault.Code Code(99)"},
		{"zero count", Fault{Code: codes.Unavailable}, "Fault.Count 0"},
		{"negative count", Fault{Code: codes.Unavailable, Count: -2}, "Fault.Count -2"},
		{"valid unserved method", Fault{Method: "/google.cloud.location.Locations/GetLocation", Code: codes.Aborted, Count: 1}, ""},
		{"bare method", Fault{Method: "GetInstance", Code: codes.Unavailable, Count: 1}, `Fault.Method "GetInstance"`},
		{"no leading slash", Fault{Method: "google.cloud.redis.v1.CloudRedis/GetInstance", Code: codes.Unavailable, Count: 1}, `Fault.Method "google.cloud.redis.v1.CloudRedis/GetInstance"`},
		{"empty method part", Fault{Method: "/google.cloud.redis.v1.CloudRedis/", Code: codes.Unavailable, Count: 1}, `Fault.Method "/google.cloud.redis.v1.CloudRedis/"`},
		{"extra slash", Fault{Method: "/a/b/c", Code: codes.Unavailable, Count: 1}, `Fault.Method "/a/b/c"`},
		{"non-printable pushback", Fault{Code: codes.Unavailable, Count: 1, Pushback: "1\n"}, `Fault.Pushback "1\n"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Inject(tt.f)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Inject(%+v) = %v, want nil", tt.f, err)
			case tt.want != "" && (err == nil || !strings.HasPrefix(err.Error(), "redistest: ") || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Inject(%+v) = %v, want error containing %q", tt.f, err, tt.want)
			}
		})
	}
	defer func() {
		if recover() == nil {
			t.Error("FailNext with n = 0 did not panic")
		}
	}()
	s.FailNext(MethodGetInstance, 0, codes.Unavailable)
}

func TestFailNextThenSuccess(t *testing.T) {
	s := newTestServer(t)
	ctx := t.Context()
	c := s.Client(ctx)
	create(t, c, parent, "a")
	s.ResetAttempts()

	s.FailNext(MethodGetInstance, 2, codes.Unavailable)
	for i, want := range []codes.Code{codes.Unavailable, codes.Unavailable, codes.OK, codes.OK} {
		_, err := c.GetInstance(ctx, getA)
		if got := status.Code(err); got != want {
			t.Errorf("call %d: %v, want %v", i, err, want)
		}
		if i == 0 && !strings.Contains(fmt.Sprint(err), "redistest: injected Unavailable for "+MethodGetInstance) {
			t.Errorf("default message: %v", err)
		}
	}
	want := []codes.Code{codes.Unavailable, codes.Unavailable, codes.OK, codes.OK}
	if got := codesOf(s.AttemptsFor(MethodGetInstance)); !slices.Equal(got, want) {
		t.Errorf("recorded codes %v, want %v", got, want)
	}
}

func TestFaultQueueOrder(t *testing.T) {
	s := newTestServer(t)
	ctx := t.Context()
	c := s.Client(ctx)
	create(t, c, parent, "a")

	must := func(f Fault) {
		if err := s.Inject(f); err != nil {
			t.Fatal(err)
		}
	}
	must(Fault{Method: MethodGetInstance, Code: codes.Unavailable, Count: 1})
	must(Fault{Code: codes.ResourceExhausted, Count: 2, Message: "slow down"})

	steps := []struct {
		call func() error
		want codes.Code
	}{
		{func() error {
			_, err := c.ListInstances(ctx, &redispb.ListInstancesRequest{Parent: parent}).Next()
			return err
		}, codes.ResourceExhausted},
		{func() error { _, err := c.GetInstance(ctx, getA); return err }, codes.Unavailable},
		{func() error { _, err := c.GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: "x"}); return err }, codes.ResourceExhausted},
		{func() error { _, err := c.GetInstance(ctx, getA); return err }, codes.OK},
	}
	for i, st := range steps {
		err := st.call()
		if got := status.Code(err); got != st.want {
			t.Errorf("step %d: %v, want %v", i, err, st.want)
		}
		if st.want == codes.ResourceExhausted && status.Convert(err).Message() != "slow down" {
			t.Errorf("step %d: message %q, want %q", i, status.Convert(err).Message(), "slow down")
		}
	}
}

func TestRetryInfoDetail(t *testing.T) {
	tests := []struct {
		name      string
		f         Fault
		wantInfo  bool
		wantDelay time.Duration
	}{
		{"positive", Fault{RetryDelay: 1500 * time.Millisecond}, true, 1500 * time.Millisecond},
		{"zero, forced", Fault{RetryDelaySet: true}, true, 0},
		{"negative, forced", Fault{RetryDelay: -2 * time.Second, RetryDelaySet: true}, true, -2 * time.Second},
		{"negative, not forced", Fault{RetryDelay: -2 * time.Second}, false, 0},
		{"none", Fault{}, false, 0},
	}
	s := newTestServer(t)
	ctx := t.Context()
	c := s.Client(ctx)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.f
			f.Method, f.Code, f.Count = MethodGetInstance, codes.ResourceExhausted, 1
			if err := s.Inject(f); err != nil {
				t.Fatal(err)
			}
			_, err := c.GetInstance(ctx, getA) // real client: error is an *apierror.APIError
			st, ok := status.FromError(err)
			if !ok || st.Code() != codes.ResourceExhausted {
				t.Fatalf("err = %v, want ResourceExhausted status", err)
			}
			var infos []*errdetails.RetryInfo
			for _, d := range st.Details() {
				if ri, ok := d.(*errdetails.RetryInfo); ok {
					infos = append(infos, ri)
				} else {
					t.Errorf("unexpected detail %T: %v", d, d)
				}
			}
			switch {
			case !tt.wantInfo && len(infos) != 0:
				t.Errorf("got RetryInfo %v, want none", infos)
			case tt.wantInfo && len(infos) != 1:
				t.Errorf("got %d RetryInfo details, want 1", len(infos))
			case tt.wantInfo && infos[0].GetRetryDelay().AsDuration() != tt.wantDelay:
				t.Errorf("retry_delay = %v, want %v", infos[0].GetRetryDelay().AsDuration(), tt.wantDelay)
			}
		})
	}
}

func TestPushbackTrailer(t *testing.T) {
	s := newTestServer(t)
	ctx := t.Context()
	pc := redispb.NewCloudRedisClient(s.Conn())
	for _, pb := range []string{"250", "-1", "soon", " 7 "} {
		if err := s.Inject(Fault{Method: MethodGetInstance, Code: codes.Unavailable, Count: 1, Pushback: pb}); err != nil {
			t.Fatal(err)
		}
		var tr metadata.MD
		_, err := pc.GetInstance(ctx, getA, grpc.Trailer(&tr))
		if status.Code(err) != codes.Unavailable {
			t.Errorf("pushback %q: err %v, want Unavailable", pb, err)
		}
		if got := tr.Get(grpcbackoff.PushbackKey); !slices.Equal(got, []string{pb}) {
			t.Errorf("trailer %s = %q, want [%q]", grpcbackoff.PushbackKey, got, pb)
		}
	}
	var tr metadata.MD
	if _, err := pc.GetInstance(ctx, getA, grpc.Trailer(&tr)); status.Code(err) != codes.NotFound || len(tr.Get(grpcbackoff.PushbackKey)) != 0 {
		t.Errorf("after faults: err %v, trailer %v; want NotFound and no pushback", err, tr)
	}
}

func TestDownUp(t *testing.T) {
	s := newTestServer(t)
	ctx := t.Context()
	c := s.Client(ctx)
	create(t, c, parent, "a")
	s.FailNext(MethodGetInstance, 1, codes.Internal)

	s.Down()
	for range 3 {
		if _, err := c.GetInstance(ctx, getA); status.Code(err) != codes.Unavailable {
			t.Errorf("GetInstance while down: %v, want Unavailable", err)
		}
	}
	if _, err := c.GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: "x"}); status.Code(err) != codes.Unavailable {
		t.Errorf("GetOperation while down: %v, want Unavailable", err)
	}
	s.Up()
	// The fault queued before Down is still there.
	if _, err := c.GetInstance(ctx, getA); status.Code(err) != codes.Internal {
		t.Errorf("first call after Up: %v, want the queued Internal fault", err)
	}
	if _, err := c.GetInstance(ctx, getA); err != nil {
		t.Errorf("second call after Up: %v", err)
	}
}

func TestLatencyFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewServer()
		defer s.Close()
		ctx := t.Context()
		c := s.Client(ctx)
		create(t, c, parent, "a")
		s.ResetAttempts()

		s.SetLatency(3 * time.Second)
		start := time.Now()
		if _, err := c.GetInstance(ctx, getA); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Errorf("call took %v of fake time, want 3s", d)
		}

		// Cancellation ends the wait early.
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		start2 := time.Now()
		_, err := c.GetInstance(cctx, getA)
		if status.Code(err) != codes.DeadlineExceeded || time.Since(start2) != time.Second {
			t.Errorf("cancelled call: %v after %v, want DeadlineExceeded after 1s", err, time.Since(start2))
		}
		synctest.Wait() // let the server record its answer

		as := s.AttemptsFor(MethodGetInstance)
		if len(as) != 2 {
			t.Fatalf("attempts = %d, want 2", len(as))
		}
		if !as[0].Time.Equal(start) || as[0].Answered.Sub(as[0].Time) != 3*time.Second || as[0].Code != codes.OK {
			t.Errorf("attempt 0 = %+v, want arrival at %v, answered 3s later, OK", as[0], start)
		}
		if !as[1].Time.Equal(start2) || as[1].Answered.Sub(as[1].Time) != time.Second ||
			(as[1].Code != codes.DeadlineExceeded && as[1].Code != codes.Canceled) {
			t.Errorf("attempt 1 = %+v, want arrival at %v, answered 1s later, DeadlineExceeded or Canceled", as[1], start2)
		}
	})
}

func TestRetryAttemptsFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewServer()
		defer s.Close()
		ctx := t.Context()
		// gRPC's own retry policy; server pushback replaces its jittered
		// backoff, so the delays are exact.
		const cfg = `{"methodConfig":[{"name":[{"service":"google.cloud.redis.v1.CloudRedis"}],
			"retryPolicy":{"maxAttempts":4,"initialBackoff":"10s","maxBackoff":"10s","backoffMultiplier":1,
			"retryableStatusCodes":["UNAVAILABLE"]}}]}`
		pc := redispb.NewCloudRedisClient(s.Conn(grpc.WithDefaultServiceConfig(cfg)))
		if err := s.Inject(Fault{Method: MethodGetInstance, Code: codes.Unavailable, Count: 2, Pushback: "250"}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err := pc.GetInstance(ctx, getA)
		if status.Code(err) != codes.NotFound { // the third attempt reaches the (empty) fake
			t.Fatalf("GetInstance = %v, want NotFound after two retries", err)
		}
		as := s.AttemptsFor(MethodGetInstance)
		if got, want := codesOf(as), []codes.Code{codes.Unavailable, codes.Unavailable, codes.NotFound}; !slices.Equal(got, want) {
			t.Fatalf("codes %v, want %v", got, want)
		}
		for i, a := range as {
			if want := start.Add(time.Duration(i) * 250 * time.Millisecond); !a.Time.Equal(want) {
				t.Errorf("attempt %d arrived at +%v, want +%v", i, a.Time.Sub(start), want.Sub(start))
			}
			prev := a.Metadata.Get("grpc-previous-rpc-attempts")
			if (i == 0 && len(prev) != 0) || (i > 0 && !slices.Equal(prev, []string{fmt.Sprint(i)})) {
				t.Errorf("attempt %d: grpc-previous-rpc-attempts = %q", i, prev)
			}
		}
	})
}

func TestAttemptsRecording(t *testing.T) {
	s := newTestServer(t)
	ctx := t.Context()
	c := s.Client(ctx)
	create(t, c, parent, "a")
	if _, err := c.GetInstance(ctx, getA); err != nil {
		t.Fatal(err)
	}
	all := s.Attempts()
	var methods []string
	for _, a := range all {
		methods = append(methods, a.Method)
		if a.Time.IsZero() || a.Answered.Before(a.Time) {
			t.Errorf("%s: times %v / %v", a.Method, a.Time, a.Answered)
		}
	}
	if want := []string{MethodCreateInstance, MethodGetInstance}; !slices.Equal(methods, want) {
		t.Errorf("methods %v, want %v", methods, want)
	}
	// The real client's routing header is visible.
	if got := all[1].Metadata.Get("x-goog-request-params"); len(got) != 1 || !strings.Contains(got[0], "name=") {
		t.Errorf("x-goog-request-params = %q", got)
	}
	// Returned records are copies.
	all[1].Metadata.Set("x-goog-request-params", "changed")
	if s.Attempts()[1].Metadata.Get("x-goog-request-params")[0] == "changed" {
		t.Error("Attempts shares metadata with the server")
	}
	if n := len(s.AttemptsFor(MethodDeleteInstance)); n != 0 {
		t.Errorf("AttemptsFor(Delete) = %d, want 0", n)
	}
	s.ResetAttempts()
	if n := len(s.Attempts()); n != 0 {
		t.Errorf("after ResetAttempts: %d attempts", n)
	}
}

func TestUnservedMethodsGoThroughInterceptors(t *testing.T) {
	s := newTestServer(t)
	ctx := t.Context()
	c := s.Client(ctx)
	const getLocation = "/google.cloud.location.Locations/GetLocation"
	req := &location.GetLocationRequest{Name: "projects/p1/locations/us-central1"}

	if err := s.Inject(Fault{Method: getLocation, Code: codes.Aborted, Count: 1}); err != nil {
		t.Fatal(err)
	}
	_, err1 := c.GetLocation(ctx, req)
	s.Down()
	_, err2 := c.GetLocation(ctx, req)
	s.Up()
	_, err3 := c.GetLocation(ctx, req)
	want := []codes.Code{codes.Aborted, codes.Unavailable, codes.Unimplemented}
	if got := []codes.Code{status.Code(err1), status.Code(err2), status.Code(err3)}; !slices.Equal(got, want) {
		t.Errorf("GetLocation codes %v (%v, %v, %v), want %v", got, err1, err2, err3, want)
	}
	if got := codesOf(s.AttemptsFor(getLocation)); !slices.Equal(got, want) {
		t.Errorf("recorded %v, want %v", got, want)
	}
}

func TestClearFaults(t *testing.T) {
	srv := NewServer()
	defer srv.Close()
	srv.FailNext(MethodGetInstance, 3, codes.Unavailable)
	srv.FailNext("", 2, codes.ResourceExhausted)
	if n := srv.ClearFaults(); n != 5 {
		t.Errorf("ClearFaults() = %d, want the 5 failures still queued", n)
	}
	client := redispb.NewCloudRedisClient(srv.Conn())
	_, err := client.ListInstances(t.Context(), &redispb.ListInstancesRequest{Parent: "projects/p/locations/l"})
	if err != nil {
		t.Errorf("ListInstances after ClearFaults = %v, want success", err)
	}
	if n := srv.ClearFaults(); n != 0 {
		t.Errorf("ClearFaults() again = %d, want 0", n)
	}
}
