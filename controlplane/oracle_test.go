package controlplane

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// TestBareGRPCFollowsOwners is the oracle: bare grpc-go, its retry on,
// follows the owners' policy on every plane — 4 attempts on INTERNAL and on
// UNAVAILABLE, a twice-failing call served in 3, a method the plane does not
// name not retried.
func TestBareGRPCFollowsOwners(t *testing.T) {
	for _, p := range planes {
		t.Run(p.name, func(t *testing.T) {
			pl := p.new(t)
			srv, cc := pl.Backend(), pl.Conn(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for _, c := range []codes.Code{codes.Unavailable, codes.Internal} {
				want(t, c.String()+" always", call(ctx, srv, cc, unary, c, always), c, 4)
				want(t, c.String()+" twice", call(ctx, srv, cc, unary, c, 2), codes.OK, 3)
				want(t, c.String()+" always, unnamed", call(ctx, srv, cc, unnamed, c, always), c, 1)
			}
		})
	}
}
