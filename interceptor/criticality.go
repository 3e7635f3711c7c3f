package interceptor

import (
	"google.golang.org/grpc"

	"github.com/platformkit/grpcbackoff/internal/gate"
	"github.com/platformkit/grpcbackoff/internal/loop"
)

// critical and sheddable are the call options of Critical and Sheddable;
// gRPC ignores them.
var (
	critical  grpc.CallOption = &loop.CriticalityOption{Level: gate.Critical}
	sheddable grpc.CallOption = &loop.CriticalityOption{Level: gate.Sheddable}
)

// Critical marks one call, its retries included, as critical: for calls
// that must reach the backend even while it is overloaded, such as health
// checks or the call that ends an outage. It exempts the call from
// adaptive client-side throttling (WithAdaptiveThrottle), and every attempt
// says it to the server, CRITICAL_PLUS in the request metadata
// grpcbackoff.CriticalityKey (a value the caller's metadata already has for
// the key is kept instead), which a server's retry guard (package guard)
// sheds last. The retry budget still applies.
func Critical() grpc.CallOption { return critical }

// Sheddable marks one call, its retries included, as sheddable: work that
// can be dropped when the backend sheds load (prefetches, batch jobs,
// best-effort updates). Every attempt says it to the server, SHEDDABLE in
// the request metadata grpcbackoff.CriticalityKey (a value the caller's
// metadata already has for the key is kept instead), which a server's
// retry guard (package guard) sheds first; and its retries are paid from
// the retry budget's long-run allowance alone, never from the reserve kept
// for a restart's retries (grpcbackoff.Throttle), so that they stop first
// when the budget runs low. Given with Critical, the last one wins.
func Sheddable() grpc.CallOption { return sheddable }
