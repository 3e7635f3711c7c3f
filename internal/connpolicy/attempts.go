package connpolicy

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Attempts counts grpc-go's attempts of one call, for a channel where
// grpc-go's own retry is on and applies a policy the library cannot read
// before the call: an xDS route's retry_policy (gRFC A44), which reaches
// grpc-go per call through its config selector. The library then retries
// only what grpc-go did not: a call grpc-go attempted more than once was
// under the route's policy, and is not the library's to retry (GRPCRetried).
//
// It counts through the call's per-RPC credentials, a call option
// (CallOption): grpc-go asks them for metadata as it makes each attempt's
// stream, and they add none — so it needs no dial option and costs only the
// calls that carry it. It counts grpc-go's transparent retries too (of
// attempts that never reached the server), which it cannot tell apart: a
// call transparently retried once and then failed with a code the route
// does not retry reads as retried, and is left alone — the side that never
// adds a layer. A stats handler tells them apart (stats.Begin's
// IsTransparentRetryAttempt), at the price of a dial option run on every
// call of the channel.
//
// An Attempts is used by one call at a time (Get, Release); its methods are
// safe for concurrent use (grpc-go asks from the call's goroutines).
type Attempts struct {
	n     atomic.Int32
	inner credentials.PerRPCCredentials // the caller's own per-call credentials, if any
	opt   grpc.CallOption               // grpc.PerRPCCredentials(a), made once
}

// attemptsPool keeps the Attempts of unary calls, each with its call
// option, so that counting a call allocates nothing of the library's.
var attemptsPool = sync.Pool{New: func() any { return new(Attempts) }}

// Get returns an Attempts that counts from 0, for one call; Release gives
// it back once the call has returned.
func Get() *Attempts {
	a := attemptsPool.Get().(*Attempts)
	a.n.Store(0)
	return a
}

// Release gives a back to Get's pool: the call it counted has returned, so
// grpc-go makes no more attempts of it.
func (a *Attempts) Release() {
	a.inner = nil
	attemptsPool.Put(a)
}

// CallOption returns the call option that makes grpc-go report each attempt
// of the call to a. opts are the caller's options: if they hold per-call
// credentials (grpc.PerRPCCredentials; of several, grpc-go uses the last),
// a asks them for the metadata each attempt sends, as grpc-go would, so
// that they still apply — the option must come after the caller's.
func (a *Attempts) CallOption(opts []grpc.CallOption) grpc.CallOption {
	a.inner = nil
	for _, o := range opts {
		if c, ok := o.(grpc.PerRPCCredsCallOption); ok {
			a.inner = c.Creds
		}
	}
	if a.opt == nil {
		a.opt = grpc.PerRPCCredentials(a)
	}
	return a.opt
}

// N returns the attempts grpc-go has made of the call so far.
func (a *Attempts) N() int { return int(a.n.Load()) }

// GRPCRetried reports whether grpc-go made more than one attempt of the
// call: then its own retry policy covered the call's failures, and the
// library must not retry the call again.
func (a *Attempts) GRPCRetried() bool { return a.N() > 1 }

// GetRequestMetadata counts an attempt and returns the caller's
// credentials' metadata, or none.
func (a *Attempts) GetRequestMetadata(ctx context.Context, uri ...string) (map[string]string, error) {
	a.n.Add(1)
	if a.inner != nil {
		return a.inner.GetRequestMetadata(ctx, uri...)
	}
	return nil, nil
}

// RequireTransportSecurity is the caller's credentials', or false: an
// Attempts sends nothing.
func (a *Attempts) RequireTransportSecurity() bool {
	return a.inner != nil && a.inner.RequireTransportSecurity()
}

// XDS reports whether a channel of the canonical target target
// (cc.CanonicalTarget()) resolves through xDS — "xds:", or "google-c2p:"
// (Google's Direct Path, xDS underneath) — where a route's retry policy is
// grpc-go's to apply and Attempts tells the library what it did.
func XDS(target string) bool {
	return strings.HasPrefix(target, "xds:") || strings.HasPrefix(target, "google-c2p:")
}
