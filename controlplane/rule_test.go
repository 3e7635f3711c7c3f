package controlplane

//lint:file-ignore SA1019 the stand-in reads GetMethodConfig, as connpolicy does

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/connpolicy"
)

// layered is a stand-in for the engine under the options of channels whose
// policies grpc-go applies, to check the rule phase 2 carries out before it
// is wired: grpc-go's retry on, and a loop around it that retries, as p
// says, only what grpc-go did not — on an xDS channel a failure of a call
// grpc-go attempted once (connpolicy.Attempts), elsewhere a code the
// resolver's RetryPolicy does not name (GetMethodConfig). It has none of
// the engine's other rules (budget, safety, hints): it is not the library.
func layered(p grpcbackoff.Policy) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		xds := connpolicy.XDS(cc.CanonicalTarget())
		for n := 1; ; n++ {
			var a connpolicy.Attempts
			err := invoker(ctx, method, req, reply, cc, append(slices.Clip(opts), a.CallOption(opts))...)
			code := status.Code(err)
			grpcs := a.GRPCRetried()
			if rp := cc.GetMethodConfig(method).RetryPolicy; !xds && rp != nil && rp.RetryableStatusCodes[code] {
				grpcs = true // grpc-go's code, throttled or not
			}
			if err == nil || grpcs || n >= p.MaxAttempts || !slices.Contains(p.Codes, code) {
				return err
			}
			t := time.NewTimer(p.Backoff(n - 1))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return err
			}
		}
	}
}

// TestXDSRuleByStandIn: the acceptance tests of the xDS channels' options
// pass with the rule alone (layered), on the real management server and
// xDS client, and on a manual resolver with retryThrottling: the numbers
// they ask for are reachable with what grpc-go exposes today.
func TestXDSRuleByStandIn(t *testing.T) {
	opts := func() []grpc.DialOption { return []grpc.DialOption{grpc.WithChainUnaryInterceptor(layered(short()))} }
	t.Run("route kept", func(t *testing.T) { xdsRouteKept(t, opts) })
	t.Run("pushes apply", func(t *testing.T) { xdsPushesApply(t, opts) })
	t.Run("throttling where seen", func(t *testing.T) { throttlingWhereSeen(t, opts) })
}
