package loop

import (
	"testing"

	"google.golang.org/grpc"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/settings"
	"github.com/platformkit/grpcbackoff/internal/targets"
)

// connSource is a ConnPolicies that knows one method's Policy, and counts
// the times it was asked.
type connSource struct {
	method string
	policy *settings.Policy
	asked  int
}

func (s *connSource) Resolve(_ *targets.Conn, method string) (settings.Resolved, bool) {
	s.asked++
	if method != s.method {
		return settings.Resolved{}, false
	}
	return settings.Resolved{Policy: s.policy, From: settings.FromMethod}, true
}

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

// TestPlanConnPolicies: the seam of a connection's own policy (issue 45).
// What the connection's source says of a method replaces the Retrier's
// settings for it; the call's options win over it; a method it says
// nothing of keeps the Retrier's; without a ClientConn (Explain) it is not
// asked.
func TestPlanConnPolicies(t *testing.T) {
	retrier, conn := policyOf(t, 8), policyOf(t, 4)
	const named = "/pkg.Svc/Get"
	for _, tc := range []struct {
		name   string
		source bool
		method string
		opts   []grpc.CallOption
		want   *settings.Policy
		max    int
	}{
		{"no source", false, named, nil, retrier, 8},
		{"the connection's policy", true, named, nil, conn, 4},
		{"a method it does not name", true, "/pkg.Svc/Put", nil, retrier, 8},
		{"CallMaxAttempts over it", true, named, []grpc.CallOption{&Option{MaxAttempts: 2}}, conn, 2},
		{"NoRetry over it", true, named, []grpc.CallOption{&Option{NoRetry: true}}, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &Engine{Unsafe: func(string) bool { return false }}
			e.Settings.Base.SetPolicy(retrier)
			src := &connSource{method: named, policy: conn}
			if tc.source {
				e.Conns = src
			}
			var p Plan
			if c := e.Plan(&p, nil, tc.method, tc.opts); c == nil {
				t.Fatal("Plan returned no connection state")
			}
			if p.Policy != tc.want || p.Max != tc.max {
				t.Errorf("Plan: Policy %p, Max %d; want %p, %d", p.Policy, p.Max, tc.want, tc.max)
			}
			var q Plan
			e.PlanOf(&q, tc.method, tc.opts)
			if tc.source && src.asked != 1 {
				t.Errorf("the source was asked %d times, want once (by Plan, not by PlanOf)", src.asked)
			}
		})
	}
}
