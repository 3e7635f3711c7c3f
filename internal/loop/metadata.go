package loop

import (
	"context"
	"strconv"

	"google.golang.org/grpc/metadata"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/gate"
)

// The request metadata the loop writes on a call's attempts: the call's
// criticality on every attempt (Outgoing), and on a retried attempt how
// many came before it (NextAttempt). A call without either writes nothing,
// and its first attempt goes on the caller's context as it is.

// PreviousAttemptsKey is the metadata key that tells the server, on a
// retried attempt, how many attempts came before it (as grpc-go's built-in
// retry does): interceptor.PreviousAttemptsKey.
const PreviousAttemptsKey = "grpc-previous-rpc-attempts"

// Outgoing returns the context the attempts of the call p plans derive
// from, ctx being the caller's: ctx with the call's criticality in its
// outgoing metadata (grpcbackoff.CriticalityKey: CRITICAL_PLUS for
// Critical, SHEDDABLE for Sheddable), so that every attempt says it; ctx
// itself for a call that stated none, and for one whose caller's metadata
// has the key already, whose value is kept (a server reads the first).
func (p *Plan) Outgoing(ctx context.Context) context.Context {
	if p.Critical == gate.Default {
		return ctx // inlined: a call without the options pays a comparison
	}
	return p.outgoing(ctx)
}

func (p *Plan) outgoing(ctx context.Context) context.Context {
	var v string
	switch p.Critical {
	case gate.Critical:
		v = grpcbackoff.CriticalityCriticalPlus
	case gate.Sheddable:
		v = grpcbackoff.CriticalitySheddable
	}
	if len(metadata.ValueFromOutgoingContext(ctx, grpcbackoff.CriticalityKey)) > 0 {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, grpcbackoff.CriticalityKey, v)
}

// withPreviousAttempts returns ctx whose outgoing metadata says that n
// attempts came before (PreviousAttemptsKey): the value replaces any the
// caller's metadata carries (one a mid-tier forwarded from its own
// caller's request, say), so that the server reads this call's count.
func withPreviousAttempts(ctx context.Context, n int) context.Context {
	v := strconv.Itoa(n)
	if len(metadata.ValueFromOutgoingContext(ctx, PreviousAttemptsKey)) == 0 {
		return metadata.AppendToOutgoingContext(ctx, PreviousAttemptsKey, v)
	}
	md, _ := metadata.FromOutgoingContext(ctx) // a copy
	md.Set(PreviousAttemptsKey, v)
	return metadata.NewOutgoingContext(ctx, md)
}
