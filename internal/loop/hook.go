package loop

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff/internal/targets"
)

// A Hook is the rule the loop follows for calls made by a layer above the
// Retrier that retries them by itself (the Google Cloud clients: the
// Engine's Hook is internal/googlehook's, which interceptor installs). The
// loop calls it as a call opens, at each retry decision, and as a unary
// call ends; what it keeps of a call (its state) the loop holds for it
// without reading it, and what it keeps of a ClientConn it keeps in
// targets.Conn.Hook. Its methods are called concurrently, by every call;
// Open is on every call's path: once a ClientConn's first call told it what
// it needs, it must not allocate.
type Hook interface {
	// Open is told of a call of method on conn as it opens, before its
	// first attempt, with its request (nil for a stream); retried says the
	// call may be retried, unhedged. It returns the retries the Retrier
	// made in the layer's earlier attempts of the same call, which count
	// toward the call's MaxAttempts (Call.Prior), and the hook's state of
	// the call, nil for none.
	Open(ctx context.Context, conn *targets.Conn, method string, req any, retried bool) (prior int, state any)
	// Leaves reports, at a retry decision after a failure with st (a
	// stream's first opening's, with opening), whether the failure is the
	// layer's to retry: the call then ends with it, ReasonClientRetries. It
	// returns the call's state, which the loop keeps in c.State's place.
	Leaves(ctx context.Context, c HookCall, st *status.Status, opening bool) (left bool, state any)
	// End is told, for a unary call whose state is not nil, that it ended
	// with err (nil: success) after attempts attempts (0: its first one
	// succeeded, and no Call was made); ctx is the caller's, before the
	// plan's timeout.
	End(ctx context.Context, c HookCall, err error, attempts int)
	// Streamer returns the streamer the attempts of a stream of method are
	// opened with: s, or s watched by the layer's rule.
	Streamer(method string, s grpc.Streamer) grpc.Streamer
}

// HookCall is what a Hook is told of one call.
type HookCall struct {
	Method string
	Conn   *targets.Conn
	Opts   []grpc.CallOption // the caller's
	Req    any               // a unary call's request; nil for a stream
	Prior  int               // as Open returned it
	State  any               // the hook's state of the call, as Open or Leaves returned it
}

// Opened is a call as Engine.Open opened it: its ClientConn's state, and
// what the Hook said of it.
type Opened struct {
	Conn  *targets.Conn
	prior int
	state any
}

// hookCall returns what c's Hook is told of it.
func (c *Call) hookCall() HookCall {
	return HookCall{Method: c.Plan.Method, Conn: c.Conn, Opts: c.opts, Req: c.Req, Prior: c.Prior, State: c.hook}
}

// LeftToClient reports whether a failure with st is the calling layer's to
// retry, as the Hook says; opening says it was a stream's first opening.
func (c *Call) LeftToClient(ctx context.Context, st *status.Status, opening bool) bool {
	if c.e.Hook == nil {
		return false
	}
	left, state := c.e.Hook.Leaves(ctx, c.hookCall(), st, opening)
	c.hook = state
	return left
}

// EndUnary tells the Hook that c, a unary call, ended with err; origin is
// the caller's context, before the plan's timeout.
func (c *Call) EndUnary(origin context.Context, err error) {
	if c.e.Hook != nil && c.hook != nil {
		c.e.Hook.End(origin, c.hookCall(), err, c.Attempts)
	}
}

// Streamer returns the streamer the attempts of a stream of method open
// with (Hook.Streamer).
func (e *Engine) Streamer(method string, s grpc.Streamer) grpc.Streamer {
	if e.Hook == nil {
		return s
	}
	return e.Hook.Streamer(method, s)
}
