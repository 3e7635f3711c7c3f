package interceptor

import "github.com/platformkit/grpcbackoff/internal/loop"

// PreviousAttemptsKey is the metadata key that tells the server, on a retried
// attempt, how many attempts came before it (as grpc-go's built-in retry does).
const PreviousAttemptsKey = "grpc-previous-rpc-attempts"

// DefaultBufferLimit is the number of bytes of sent messages a stream keeps
// for replay before it commits (see Stream).
const DefaultBufferLimit = 256 << 10

// Retrier is one set of retrying interceptors: the unary and stream
// interceptors it returns share its Policy, throttle and hooks. A Retrier is
// safe for concurrent use, and may serve many ClientConns: each backend
// target (cc.CanonicalTarget()) gets a retry budget of its own, shared by
// every ClientConn to it, so that one slice of dial options can be given to
// many clients without one backend's outage using up another's retries.
// It watches each ClientConn it serves with one goroutine, from its first
// call until it is closed; a call waiting to retry returns as soon as its
// ClientConn is closed.
type Retrier struct {
	e      loop.Engine // what every call through r shares; its options set it (internal/loop)
	hedged bool        // some entry hedges: DialOptions watches response headers
	timed  bool        // some Policy has an AttemptTimeout: so does it
}

// An Option changes how New builds a Retrier.
type Option func(*Retrier) error
