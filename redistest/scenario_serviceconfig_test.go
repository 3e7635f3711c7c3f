package redistest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/redis/apiv1/redispb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/redistest"
	"github.com/platformkit/grpcbackoff/serviceconfig"
)

// scFailing is an invoker that always fails with UNAVAILABLE and counts its
// attempts.
type scFailing struct{ attempts int }

func (f *scFailing) invoke(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
	f.attempts++
	return status.Error(codes.Unavailable, "down")
}

// scParse parses doc or fails the test.
func scParse(t *testing.T, doc string) serviceconfig.Config {
	t.Helper()
	sc, err := serviceconfig.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("ParseServiceConfig(%s): %v", doc, err)
	}
	return sc
}

// scRetry is a retryPolicy of n attempts on UNAVAILABLE.
func scRetry(n string) string {
	return `{"maxAttempts": ` + n + `, "initialBackoff": "0.2s", "maxBackoff": "2s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}`
}

func TestWithServiceConfig(t *testing.T) {
	entries := `{"name": [{"service": "s.S", "method": "Get"}], "retryPolicy": ` + scRetry("2") + `},
		{"name": [{"service": "s.S"}, {"service": "u.U"}], "retryPolicy": ` + scRetry("4") + `},
		{"name": [{"service": "s.S", "method": "Delete"}], "timeout": "1s"}`
	withDefault := scParse(t, `{"methodConfig": [`+entries+`, {"name": [{}], "retryPolicy": `+scRetry("3")+`}]}`)
	noDefault := scParse(t, `{"methodConfig": [`+entries+`]}`)
	defaultOff := scParse(t, `{"methodConfig": [`+entries+`, {"name": [{}]}]}`)

	five := exactPolicy()
	five.MaxAttempts = 5
	six := exactPolicy()
	six.MaxAttempts = 6
	cases := []struct {
		name   string
		opts   []interceptor.Option
		method string
		call   []grpc.CallOption
		want   int // attempts against a server that always fails
	}{
		{"the method's entry", opt1(interceptor.WithServiceConfig(withDefault)), "/s.S/Get", nil, 2},
		{"the service's entry", opt1(interceptor.WithServiceConfig(withDefault)), "/s.S/Put", nil, 4},
		{"a second name of the entry", opt1(interceptor.WithServiceConfig(withDefault)), "/u.U/Put", nil, 4},
		{"an entry without retryPolicy", opt1(interceptor.WithServiceConfig(withDefault)), "/s.S/Delete", nil, 1},
		{"the default entry", opt1(interceptor.WithServiceConfig(withDefault)), "/t.T/Get", nil, 3},
		{"no default entry: New's Policy", opt1(interceptor.WithServiceConfig(noDefault)), "/t.T/Get", nil, 5},
		{"a default entry without retryPolicy", opt1(interceptor.WithServiceConfig(defaultOff)), "/t.T/Get", nil, 1},
		{"a default entry without retryPolicy leaves the others", opt1(interceptor.WithServiceConfig(defaultOff)), "/s.S/Put", nil, 4},
		{"CallMaxAttempts does not turn the default back on", opt1(interceptor.WithServiceConfig(defaultOff)), "/t.T/Get", opt(interceptor.CallMaxAttempts(4)), 1},
		{"CallPolicy does", opt1(interceptor.WithServiceConfig(defaultOff)), "/t.T/Get", opt(interceptor.CallPolicy(six)), 6},
		{"CallMaxAttempts changes an entry's", opt1(interceptor.WithServiceConfig(withDefault)), "/s.S/Get", opt(interceptor.CallMaxAttempts(3)), 3},
		{"a later WithMethod wins", opt1(interceptor.WithServiceConfig(withDefault), interceptor.WithMethod("/s.S/Get", six)), "/s.S/Get", nil, 6},
		{"a later WithoutRetryFor wins", opt1(interceptor.WithServiceConfig(withDefault), interceptor.WithoutRetryFor("/s.S/")), "/s.S/Put", nil, 1},
		{"the service config wins over an earlier WithMethod", opt1(interceptor.WithMethod("/s.S/Get", six), interceptor.WithServiceConfig(withDefault)), "/s.S/Get", nil, 2},
		{"an earlier WithMethod for another name stays", opt1(interceptor.WithMethod("/v.V/Get", six), interceptor.WithServiceConfig(withDefault)), "/v.V/Get", nil, 6},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, err := interceptor.New(five, append([]interceptor.Option{interceptor.WithoutThrottle()}, tc.opts...)...)
				if err != nil {
					t.Fatal(err)
				}
				f := &scFailing{}
				err = r.Unary()(t.Context(), tc.method, "req", new(string), nil, f.invoke, tc.call...)
				if f.attempts != tc.want {
					t.Errorf("%s: attempts = %d, want %d", tc.method, f.attempts, tc.want)
				}
				if status.Code(err) != codes.Unavailable {
					t.Errorf("%s: code = %v, want Unavailable", tc.method, status.Code(err))
				}
				// A call that is not retried gets the server's error as it is.
				var e *grpcbackoff.Error
				if got := errors.As(err, &e); got != (tc.want > 1) {
					t.Errorf("%s: err = %v is a *grpcbackoff.Error: %v, want %v", tc.method, err, got, tc.want > 1)
				}
			})
		})
	}
}

func opt(o ...grpc.CallOption) []grpc.CallOption { return o }

func opt1(o ...interceptor.Option) []interceptor.Option { return o }

func TestWithServiceConfigDelays(t *testing.T) {
	// initialBackoff 0.2s, maxBackoff 2s, multiplier 2: b = 200 ms, 400 ms,
	// 800 ms, 1.6 s, then 2 s, times U[0.8, 1.2], as grpc-go waits (see
	// serviceconfig.Parse).
	sc := scParse(t, `{"methodConfig": [{"name": [{}], "retryPolicy": `+scRetry("6")+`}]}`)
	synctest.Test(t, func(t *testing.T) {
		r, err := interceptor.New(exactPolicy(), interceptor.WithoutThrottle(), interceptor.WithServiceConfig(sc))
		if err != nil {
			t.Fatal(err)
		}
		var times []time.Time
		invoke := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
			times = append(times, time.Now())
			return status.Error(codes.Unavailable, "down")
		}
		_ = r.Unary()(t.Context(), "/s.S/Get", "req", new(string), nil, invoke)
		ms := time.Millisecond
		wantMin := []time.Duration{160 * ms, 320 * ms, 640 * ms, 1280 * ms, 1600 * ms}
		wantMax := []time.Duration{240 * ms, 480 * ms, 960 * ms, 1920 * ms, 2400 * ms}
		if len(times) != 6 {
			t.Fatalf("attempts = %d, want 6", len(times))
		}
		for i := 1; i < len(times); i++ {
			if gap := times[i].Sub(times[i-1]); gap < wantMin[i-1] || gap > wantMax[i-1] {
				t.Errorf("wait before retry %d = %v, want within [%v, %v]", i, gap, wantMin[i-1], wantMax[i-1])
			}
		}
	})
}

// TestWithServiceConfigPushback: a pushback between maxBackoff/2 and
// maxBackoff is honoured, as grpc-go honours it, through the real Cloud
// Redis client.
func TestWithServiceConfigPushback(t *testing.T) {
	sc := scParse(t, `{"methodConfig": [{"name": [{}], "retryPolicy": `+scRetry("3")+`}]}`)
	synctest.Test(t, func(t *testing.T) {
		r, err := interceptor.New(exactPolicy(), interceptor.WithoutThrottle(), interceptor.WithServiceConfig(sc))
		if err != nil {
			t.Fatal(err)
		}
		srv := redistest.NewServer()
		defer srv.Close()
		c := srv.Client(t.Context(), option.WithGRPCDialOption(grpc.WithUnaryInterceptor(r.Unary())))
		if err := srv.Inject(redistest.Fault{Method: redistest.MethodGetInstance, Code: codes.Unavailable, Count: 1, Pushback: "1800"}); err != nil {
			t.Fatal(err)
		}
		_, err = c.GetInstance(t.Context(), &redispb.GetInstanceRequest{Name: "projects/p/locations/l/instances/none"})
		if status.Code(err) != codes.NotFound {
			t.Fatalf("GetInstance = %v, want NOT_FOUND from the retry", err)
		}
		as := srv.AttemptsFor(redistest.MethodGetInstance)
		if len(as) != 2 {
			t.Fatalf("server saw %d attempts, want 2", len(as))
		}
		if gap := as[1].Time.Sub(as[0].Time); gap != 1800*time.Millisecond {
			t.Errorf("wait before the retry = %v, want the pushback's 1.8 s (maxBackoff 2 s)", gap)
		}
	})
}

func TestWithServiceConfigThrottle(t *testing.T) {
	// maxTokens 4: a budget of 2 saved retries.
	sc := scParse(t, `{"methodConfig": [{"name": [{}], "retryPolicy": `+scRetry("3")+`}],
		"retryThrottling": {"maxTokens": 4, "tokenRatio": 0.1}}`)
	synctest.Test(t, func(t *testing.T) {
		r, err := interceptor.New(exactPolicy(), interceptor.WithServiceConfig(sc))
		if err != nil {
			t.Fatal(err)
		}
		f := &scFailing{}
		err = r.Unary()(t.Context(), "/s.S/Get", "req", new(string), nil, f.invoke)
		var e *grpcbackoff.Error
		if f.attempts != 3 || !errors.As(err, &e) || e.Reason != grpcbackoff.ReasonExhausted {
			t.Fatalf("first call: %d attempts, err %v; want 3 attempts, exhausted", f.attempts, err)
		}
		f.attempts = 0
		err = r.Unary()(t.Context(), "/s.S/Get", "req", new(string), nil, f.invoke)
		if f.attempts != 1 || !errors.As(err, &e) || e.Reason != grpcbackoff.ReasonThrottled {
			t.Errorf("second call: %d attempts, err %v; want 1 attempt, throttled", f.attempts, err)
		}
	})
}

func TestWithServiceConfigErrors(t *testing.T) {
	good := exactPolicy()
	bad := exactPolicy()
	bad.Multiplier = 0.5
	type mc = serviceconfig.Method
	cases := []struct {
		name string
		sc   serviceconfig.Config
		want []string
	}{
		{"malformed name", serviceconfig.Config{Methods: []mc{{Names: []string{"/a.A/", "pkg.Svc/Get"}, Policy: &good}}},
			[]string{`interceptor: opts[0]: WithServiceConfig: Methods[0].Names[1]: interceptor: method name "pkg.Svc/Get"`}},
		{"name twice", serviceconfig.Config{Methods: []mc{{Names: []string{"/a.A/"}}, {Names: []string{""}}, {Names: []string{"/b.B/", "/a.A/"}, Policy: &good}}},
			[]string{`interceptor: opts[0]: WithServiceConfig: Methods[2].Names[1] "/a.A/" is also in Methods[0]`}},
		{"default twice", serviceconfig.Config{Methods: []mc{{Names: []string{""}}, {Names: []string{""}, Policy: &good}}},
			[]string{`interceptor: opts[0]: WithServiceConfig: Methods[1].Names[0] "" is also in Methods[0]`}},
		{"bad policy", serviceconfig.Config{Methods: []mc{{Names: []string{"/a.A/Get", "/a.A/List"}, Policy: &bad}}},
			[]string{`interceptor: opts[0]: WithServiceConfig: Methods[0] ["/a.A/Get" "/a.A/List"]: grpcbackoff: Multiplier (0.5) must be at least 1`}},
		{"bad throttle", serviceconfig.Config{Throttle: &grpcbackoff.Throttle{Ratio: 0.1, Burst: 0}},
			[]string{"interceptor: opts[0]: WithServiceConfig: Throttle: grpcbackoff: Throttle.Burst (0) must be at least 1"}},
		{"all at once", serviceconfig.Config{Methods: []mc{{Names: []string{"x"}, Policy: &bad}, {Names: []string{"y"}}}, Throttle: &grpcbackoff.Throttle{Ratio: 2, Burst: 1}},
			[]string{"Methods[0] [\"x\"]: grpcbackoff: Multiplier (0.5)", `Methods[1].Names[0]: interceptor: method name "y"`, "Throttle: grpcbackoff: Throttle.Ratio (2)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := interceptor.New(exactPolicy(), interceptor.WithServiceConfig(tc.sc))
			if err == nil {
				t.Fatalf("New(WithServiceConfig(%+v)) = %v, nil; want an error", tc.sc, r)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New(WithServiceConfig(%+v)) error = %v, want it to contain %q", tc.sc, err, w)
				}
			}
			if n := strings.Count(err.Error(), "\n") + 1; n != len(tc.want) {
				t.Errorf("New(WithServiceConfig(%+v)) error = %v: %d errors, want %d", tc.sc, err, n, len(tc.want))
			}
		})
	}
}

// scOneLayerConfig turns on grpc-go's built-in retry for every method of the
// fake: 3 attempts on UNAVAILABLE.
const scOneLayerConfig = `{"methodConfig": [{"name": [{"service": "google.cloud.redis.v1.CloudRedis"}],
	"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2,
	"retryableStatusCodes": ["UNAVAILABLE"]}}]}`

// TestOnlyOneRetryLayer shows why our interceptors must not run on top of
// grpc-go's built-in retry: each of our attempts is a call to grpc-go, which
// retries it as its service config says, so 3 attempts of ours become 3×3.
// grpc.WithDisableRetry turns grpc-go's retry off, leaving ours; grpc-go's
// transparent retry (of attempts that never reached the server) does not
// depend on it and stays on.
//
// Until interceptor.DialOptions includes grpc.WithDisableRetry, the test
// appends it; once it does, the appended one changes nothing.
func TestOnlyOneRetryLayer(t *testing.T) {
	p := exactPolicy()
	p.Initial = 10 * time.Millisecond
	p.MaxAttempts = 3
	cases := []struct {
		name string
		opts func() []grpc.DialOption
		want int
	}{
		{"DialOptions with grpc.WithDisableRetry", func() []grpc.DialOption {
			return append(interceptor.DialOptions(p), grpc.WithDisableRetry())
		}, 3},
		{"our interceptor over grpc-go's retry", func() []grpc.DialOption {
			r, err := interceptor.New(p)
			if err != nil {
				t.Fatal(err)
			}
			return []grpc.DialOption{grpc.WithChainUnaryInterceptor(r.Unary())}
		}, 9},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := redistest.NewServer()
				defer srv.Close()
				srv.Down() // every call fails with UNAVAILABLE
				opts := append([]grpc.DialOption{grpc.WithDefaultServiceConfig(scOneLayerConfig)}, tc.opts()...)
				c := redispb.NewCloudRedisClient(srv.Conn(opts...))
				_, err := c.GetInstance(t.Context(), &redispb.GetInstanceRequest{Name: "projects/p/locations/l/instances/a"})
				if status.Code(err) != codes.Unavailable {
					t.Errorf("GetInstance: err = %v, want UNAVAILABLE", err)
				}
				synctest.Wait()
				if got := len(srv.AttemptsFor(redistest.MethodGetInstance)); got != tc.want {
					t.Errorf("server saw %d attempts, want %d", got, tc.want)
				}
				var e *grpcbackoff.Error
				if !errors.As(err, &e) || e.Attempts != 3 {
					t.Errorf("GetInstance: err = %v, want a *grpcbackoff.Error counting 3 attempts (ours)", err)
				}
			})
		})
	}
}
