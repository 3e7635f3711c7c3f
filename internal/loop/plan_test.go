package loop

import (
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/settings"
	"github.com/platformkit/grpcbackoff/internal/targets"
)

func policyOf(t *testing.T, attempts int) *settings.Policy {
	t.Helper()
	p := grpcbackoff.DefaultPolicy()
	p.MaxAttempts = attempts
	c, err := settings.Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

// ownersConfig is a connection's service config: 4 attempts for every
// method of the services pkg.A and pkg.B.
const ownersConfig = `{"methodConfig": [{"name": [{"service": "pkg.A"}, {"service": "pkg.B"}], "retryPolicy": {
	"maxAttempts": 4, "initialBackoff": "0.01s", "maxBackoff": "0.1s",
	"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE", "INTERNAL"]}}]}`

// connWith returns a ClientConn whose service config is sc, applied (it
// dials nothing: no call is made on it).
func connWith(t *testing.T, sc string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///backend", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(sc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	cc.Connect() // builds the resolver, which applies sc at once
	return cc
}

// TestPlanConnPolicies pins the order of a call's settings (issue 45): the
// call's options, then the Retrier's options for the method or its service
// (WithMethod, WithoutRetryFor, WithHedging, and WithServiceConfig's
// hedging or no retry), then the connection's service config, read at the
// first failure (ConnRead), then WithServiceConfig's retryPolicies, then
// the Policy; where grpc-go's own retry is on, it takes its control
// plane's failures whatever the rest says (ConnGRPC), and nothing is
// hedged. Without a ClientConn (Explain) none is read.
func TestPlanConnPolicies(t *testing.T) {
	retrier, code, doc := policyOf(t, 8), policyOf(t, 3), policyOf(t, 5)
	hedging, err := settings.CompileHedging(grpcbackoff.Hedging{MaxAttempts: 2, Delay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	hedging.Config = true
	e := &Engine{Unsafe: func(string) bool { return false }}
	e.Settings.Base.SetPolicy(retrier)
	e.Settings.Entry("/pkg.A/Code").SetPolicy(code)     // WithMethod
	e.Settings.Entry("/pkg.A/Off").SetPolicy(nil)       // WithoutRetryFor
	e.Settings.Entry("/pkg.B/").SetPolicy(doc)          // WithServiceConfig
	e.Settings.Entry("/pkg.B/").Config = true           //
	e.Settings.Entry("/pkg.B/None").SetPolicy(nil)      // WithServiceConfig, no retryPolicy
	e.Settings.Entry("/pkg.B/None").Config = true       //
	e.Settings.Entry("/pkg.B/Hedged").SetHedge(hedging) // WithServiceConfig, a hedgingPolicy
	e.Settings.Entry("/pkg.B/Hedged").Config = true     //
	cc, grpcOn := connWith(t, ownersConfig), connWith(t, ownersConfig)
	e.Targets.Conn(grpcOn).KeepsGRPCRetry() // as XDSDialOptions' interceptors do
	call := []grpc.CallOption{&Option{MaxAttempts: 2}}
	for _, tc := range []struct {
		name   string
		cc     *grpc.ClientConn
		method string
		opts   []grpc.CallOption
		rule   ConnRule
		policy *settings.Policy
		max    int
		hedged bool
	}{
		{"the Policy: the connection's at the first failure", cc, "/pkg.A/Get", nil, ConnRead, retrier, 8, false},
		{"WithMethod decides", cc, "/pkg.A/Code", nil, ConnNone, code, 3, false},
		{"WithoutRetryFor decides", cc, "/pkg.A/Off", nil, ConnNone, nil, 0, false},
		{"WithServiceConfig's: the connection's at the first failure", cc, "/pkg.B/Get", nil, ConnRead, doc, 5, false},
		{"WithServiceConfig's no retry decides", cc, "/pkg.B/None", nil, ConnNone, nil, 0, false},
		{"WithServiceConfig's hedging decides", cc, "/pkg.B/Hedged", nil, ConnNone, doc, 2, true},
		{"NoRetry decides", cc, "/pkg.A/Get", []grpc.CallOption{&Option{NoRetry: true}}, ConnNone, nil, 0, false},
		{"CallPolicy decides", cc, "/pkg.A/Get", []grpc.CallOption{&Option{Policy: code}}, ConnNone, code, 3, false},
		{"CallMaxAttempts bounds the connection's", cc, "/pkg.A/Get", call, ConnRead, retrier, 2, false},
		{"grpc-go's retry on: its own first", grpcOn, "/pkg.A/Get", nil, ConnGRPC, retrier, 8, false},
		{"grpc-go's retry on, WithMethod too", grpcOn, "/pkg.A/Code", nil, ConnGRPC, code, 3, false},
		{"grpc-go's retry on: not hedged", grpcOn, "/pkg.B/Hedged", nil, ConnGRPC, doc, 5, false},
		{"no ClientConn", nil, "/pkg.A/Get", nil, ConnNone, retrier, 8, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p Plan
			if tc.cc != nil {
				e.Plan(&p, tc.cc, tc.method, tc.opts)
			} else {
				e.PlanOf(&p, tc.method, tc.opts)
			}
			if p.Conn != tc.rule || p.Policy != tc.policy || p.FromConn || p.Max != tc.max || (p.Hedge != nil) != tc.hedged {
				t.Errorf("Plan: Conn %v, Policy %p, FromConn %v, Max %d, hedged %v; want %v, %p, false, %d, %v",
					p.Conn, p.Policy, p.FromConn, p.Max, p.Hedge != nil, tc.rule, tc.policy, tc.max, tc.hedged)
			}
			if p.Conn != ConnRead {
				return
			}
			// What the first failure reads (PlanOn reads it now).
			var q Plan
			if _, err := e.PlanOn(&q, e.Targets.Conn(tc.cc), tc.method, tc.opts); err != nil {
				t.Fatal(err)
			}
			wantMax := 4 // the connection's, unless CallMaxAttempts
			if len(tc.opts) > 0 {
				wantMax = tc.max
			}
			if !q.FromConn || q.Policy.MaxAttempts != 4 || q.From != settings.FromService || q.Max != wantMax {
				t.Errorf("at the first failure: FromConn %v, Policy %v, Max %d; want the connection's 4 attempts, Max %d", q.FromConn, q.Policy, q.Max, wantMax)
			}
		})
	}
}

// TestPlanKeepsAttemptTimeout: the connection's retryPolicy, which has no
// per-attempt timeout, replaces the Policy but for its AttemptTimeout: a
// hung attempt is still cut, the unary path's and the stream's alike.
func TestPlanKeepsAttemptTimeout(t *testing.T) {
	cut := policyOf(t, 8)
	cut.AttemptTimeout = time.Second
	e := &Engine{Unsafe: func(string) bool { return false }}
	e.Settings.Base.SetPolicy(cut)
	cc := connWith(t, ownersConfig)
	var p Plan
	if _, err := e.PlanOn(&p, e.Targets.Conn(cc), "/pkg.A/Get", nil); err != nil {
		t.Fatal(err)
	}
	if !p.FromConn || p.Policy.MaxAttempts != 4 || p.Policy.AttemptTimeout != time.Second {
		t.Errorf("at the first failure: FromConn %v, Policy %+v; want the connection's 4 attempts, each cut after 1s", p.FromConn, p.Policy)
	}
	if shared, _ := e.Targets.Conn(cc).Policies.Lookup("/pkg.A/Get"); shared.Retry.AttemptTimeout != 0 {
		t.Errorf("the connection's compiled policy was changed in place: AttemptTimeout %v", shared.Retry.AttemptTimeout)
	}
}

// TestPlanAllocatesNothing: planning a call on a registered ClientConn
// whose service config gives its method a policy allocates nothing.
func TestPlanAllocatesNothing(t *testing.T) {
	e := &Engine{Unsafe: func(string) bool { return false }}
	e.Settings.Base.SetPolicy(policyOf(t, 8))
	e.Settings.Entry("/pkg.B/None").SetPolicy(nil)
	e.Settings.Entry("/pkg.B/None").Config = true
	cc := connWith(t, ownersConfig)
	var conn *targets.Conn
	for _, m := range []string{"/pkg.A/Get", "/pkg.B/None"} {
		var p Plan
		conn = e.Plan(&p, cc, m, nil)
		if n := testing.AllocsPerRun(100, func() { var p Plan; e.Plan(&p, cc, m, nil) }); n != 0 {
			t.Errorf("Plan(%s): %v allocations, want 0", m, n)
		}
	}
	if conn == nil || conn.Policies == nil {
		t.Fatal("no connection state")
	}
}
