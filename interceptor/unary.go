package interceptor

import (
	"context"
	"errors"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
)

// Unary returns a unary client interceptor that retries calls as p says. It
// panics, with Validate's message, if p or an option is invalid: a Policy
// written in code should fail at start-up, like regexp.MustCompile. Use New
// for configuration read at run time.
//
// Every attempt gets the caller's call options, so those with effects per
// attempt (grpc.OnFinish, grpc.Header, grpc.Trailer) act on each attempt,
// the last one's winning.
//
// A call commits, and is not retried, once the server sent response headers
// (gRFC A6): the server may have acted on it. The interceptor learns it
// from the attempt's trailer, which it reads for pushback anyway: a
// trailers-only response (the usual form of a failure) did not commit; one
// whose trailer came after headers did. A failure of the transport (a lost
// connection, a reset, GOAWAY) is taken as uncommitted and retried, as a
// restart's are: Safety keeps writes from being sent twice. With
// WithoutPushback no trailer is read, and no failure is taken as committed.
//
// With Policy.AttemptTimeout, an attempt whose response headers have not
// arrived AttemptTimeout after it started is cut (canceled: the timeout is
// not sent to the server as a deadline) and retried whatever Policy.Codes
// says, as DEADLINE_EXCEEDED; once its headers arrived, it is never cut and
// runs to the call's own bounds. DialOptions sees headers as they arrive;
// Unary alone sees them only once the attempt ended, so a cut attempt
// whose headers had arrived is not resent, and ends the call.
//
// Each call to Unary has its own throttle; use DialOptions, or the methods of
// one Retrier, to share one between the unary and stream interceptors.
func Unary(p grpcbackoff.Policy, opts ...Option) grpc.UnaryClientInterceptor {
	return mustNew(p, opts).Unary()
}

// Unary returns r's unary client interceptor.
func (r *Retrier) Unary() grpc.UnaryClientInterceptor { return r.unary }

// unaryCall is what every attempt of one unary call sends.
type unaryCall struct {
	method     string
	req, reply any
	cc         *grpc.ClientConn
	invoker    grpc.UnaryInvoker
	opts       []grpc.CallOption // the caller's
}

// unaryState holds what an attempt needs besides the caller's arguments: the
// trailer, for pushback and to know whether the call committed, and the call
// options with grpc.Trailer added. It is pooled so that a call that
// succeeds allocates nothing.
type unaryState struct {
	trailer metadata.MD
	opts    []grpc.CallOption
}

var unaryStates = sync.Pool{New: func() any { return new(unaryState) }}

// getUnaryState returns a state whose options are opts, then mark (see
// layerMark), then, if trailer, grpc.Trailer of its trailer.
func getUnaryState(opts []grpc.CallOption, mark grpc.CallOption, trailer bool) *unaryState {
	s := unaryStates.Get().(*unaryState)
	if n := len(opts) + 3; cap(s.opts) < n {
		s.opts = make([]grpc.CallOption, 0, n)
	}
	s.opts = append(append(s.opts[:0], opts...), mark)
	if trailer {
		s.opts = append(s.opts, grpc.Trailer(&s.trailer))
	}
	return s
}

// release puts s back in the pool. Its option slice keeps the last call's
// options until it is reused, as the pool drops it at the next collections.
func (s *unaryState) release() {
	s.opts, s.trailer = s.opts[:0], nil
	unaryStates.Put(s)
}

func (r *Retrier) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var p plan
	r.plan(&p, ctx, method, opts)
	if p.through {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	if p.onFinish && (p.policy != nil || p.hedge != nil) {
		return r.unaryFinishing(ctx, method, req, reply, cc, invoker, opts)
	}
	conn := r.conn(cc)
	if p.err != nil {
		return status.Error(codes.InvalidArgument, p.err.Error())
	}
	if conn.t.adaptive != nil {
		if err := r.admit(ctx, conn, &p, cc); err != nil {
			return err
		}
	}
	if r.logical.n.Load() > 0 {
		var final error
		if p.prior, final = r.logical.get(ctx); final != nil {
			return r.refuseAgain(ctx, &p, cc, final)
		}
	}
	conn.started()
	// Field by field: a composite literal would be built aside and copied.
	var u unaryCall
	u.method, u.req, u.reply, u.cc, u.invoker, u.opts = method, req, reply, cc, invoker, opts
	if p.policy == nil && p.hedge == nil {
		if ctx2, cancel := p.withTimeout(ctx); cancel != nil {
			defer cancel()
			ctx = ctx2
		}
		return r.invokeOnce(ctx, conn, &u)
	}
	if p.hedge != nil || p.timeout > 0 {
		return r.unaryCall(ctx, &p, conn, &u)
	}
	f := r.attemptUnary(ctx, ctx, &p, conn, &u)
	if f.err != nil {
		return r.failedUnary(ctx, &p, conn, &u, f)
	}
	r.succeededUnary(ctx, &p, conn, cc)
	return nil
}

// succeededUnary tells the budget, the memory of the caller's attempts and
// the observers of a call whose first attempt succeeded.
func (r *Retrier) succeededUnary(ctx context.Context, p *plan, conn *connState, cc *grpc.ClientConn) {
	conn.succeeded()
	if r.logical.n.Load() > 0 {
		r.logical.put(ctx, 0, nil)
	}
	if len(r.observers) > 0 {
		r.endFirst(ctx, p, cc)
	}
}

// invokeOnce makes the single attempt of a call that is not retried.
func (r *Retrier) invokeOnce(ctx context.Context, conn *connState, u *unaryCall) error {
	s := getUnaryState(u.opts, mark, false)
	err := u.invoker(ctx, u.method, u.req, u.reply, u.cc, s.opts...)
	s.release()
	conn.record(ctx, err)
	return err
}

// refuseAgain ends at once, with the error final the Retrier gave up with,
// an attempt of a call its caller retries by itself (see WithOuterRetry).
func (r *Retrier) refuseAgain(ctx context.Context, p *plan, cc *grpc.ClientConn, final error) error {
	c := call{r: r, plan: *p, cc: cc, conn: r.conn(cc)}
	var ge *grpcbackoff.Error
	if errors.As(final, &ge) {
		c.reason = ge.Reason
	}
	return c.end(ctx, final)
}

// unaryCall carries out the plan p of a unary call that is hedged or
// bounded by a timeout.
func (r *Retrier) unaryCall(ctx context.Context, p *plan, conn *connState, u *unaryCall) error {
	if ctx2, cancel := p.withTimeout(ctx); cancel != nil {
		defer cancel()
		ctx = ctx2
	}
	if p.hedge != nil {
		if h := r.newHedgeCall(ctx, p, conn, u); h != nil {
			return h.run()
		}
		if p.policy == nil { // a reply hedging cannot copy: one attempt
			return r.invokeOnce(ctx, conn, u)
		}
	}
	f := r.attemptUnary(ctx, ctx, p, conn, u)
	if f.err != nil {
		return r.failedUnary(ctx, p, conn, u, f)
	}
	r.succeededUnary(ctx, p, conn, u.cc)
	return nil
}

// failedUnary goes on with a unary call whose first attempt failed as f.
func (r *Retrier) failedUnary(ctx context.Context, p *plan, conn *connState, u *unaryCall, f failure) error {
	c := r.newCall(p, u.cc, conn, u.opts)
	c.attempts = 1
	err := c.end(ctx, r.retryUnary(ctx, &c, u, f))
	if c.plan.client.google {
		r.remember(ctx, &c, err)
	}
	return err
}

// remember keeps, for the next attempt its caller may make of the call c
// that ended with err, the retries c made and, if c gave up, err.
func (r *Retrier) remember(ctx context.Context, c *call, err error) {
	retries := c.plan.prior + c.attempts - 1
	switch c.reason {
	case 0, grpcbackoff.ReasonCanceled:
		r.logical.put(ctx, 0, nil) // success, or the caller gave up
	case grpcbackoff.ReasonNotRetryable, grpcbackoff.ReasonClientRetries:
		r.logical.put(ctx, retries, nil) // another layer may retry it
	default:
		r.logical.put(ctx, retries, err) // the Retrier gave up
	}
}

// endFirst tells the observers of a call whose first attempt succeeded.
func (r *Retrier) endFirst(ctx context.Context, p *plan, cc *grpc.ClientConn) {
	r.tellEnd(ctx, End{Method: p.method, StaticMethod: p.static, Target: target(cc), Conn: cc, Attempts: 1, Hedged: p.hedge != nil})
}

// attemptUnary makes one attempt of the unary call u with plan p, with
// context actx (ctx itself, or ctx with the retry metadata), under the
// Policy's AttemptTimeout if it has one, and tells how it failed. An
// attempt cut after its headers arrived (with Unary alone, which cannot see
// them come) is committed: it is not resent.
func (r *Retrier) attemptUnary(ctx, actx context.Context, p *plan, conn *connState, u *unaryCall) failure {
	t := p.policy.AttemptTimeout
	if t <= 0 {
		return r.invokeUnary(ctx, actx, conn, u, nil)
	}
	actx, at := startAttemptTimer(actx, t)
	defer at.stop()
	f := r.invokeUnary(ctx, context.WithValue(actx, headerKey{}, headerListener(at)), conn, u, at)
	if at.cut(ctx, f.err) {
		f.err, f.cut, f.committed = cutError(t), true, at.answered()
	}
	return f
}

// invokeUnary sends one attempt of u on actx and tells how it failed; with
// at, an attempt under AttemptTimeout, it also reads the attempt's headers
// into at.
func (r *Retrier) invokeUnary(ctx, actx context.Context, conn *connState, u *unaryCall, at *attemptTimer) failure {
	s := getUnaryState(u.opts, mark, !r.noPushback)
	if at != nil {
		s.opts = append(s.opts, grpc.Header(&at.header))
	}
	err := u.invoker(actx, u.method, u.req, u.reply, u.cc, s.opts...)
	conn.record(ctx, err)
	var f failure
	if err != nil {
		f = failure{err: err}
		if !r.noPushback {
			f.trailer, f.committed = s.trailer, headersArrived(err, s.trailer)
		}
	}
	s.release()
	return f
}

// retryUnary is the slow path: attempt c.attempts failed as f. The trailer
// of an attempt is not held through the wait that follows it.
func (r *Retrier) retryUnary(ctx context.Context, c *call, u *unaryCall, f failure) error {
	for {
		d, final := c.decide(ctx, f)
		if final != nil {
			return final
		}
		if final := c.wait(ctx, d, f.err); final != nil {
			return final
		}
		f = r.attemptUnary(ctx, c.retryContext(ctx), &c.plan, c.conn, u)
		c.attempts++
		if f.err == nil {
			c.conn.succeeded()
			return nil
		}
	}
}

// target returns cc's target, or "" for a call made without a ClientConn.
func target(cc *grpc.ClientConn) string {
	if cc == nil {
		return ""
	}
	return cc.Target()
}

// headersArrived reports whether a unary attempt that failed with err had
// received response headers, from its trailer (nil when no transport stream
// was made: nothing was sent). A trailers-only response carries the
// content-type, which gRPC sends with headers, in its trailer; a trailer
// after headers does not, and one with metadata shows it came from the
// server. An empty trailer is what both a server's bare status after headers
// and a failure of the transport leave: the status tells them apart.
func headersArrived(err error, trailer metadata.MD) bool {
	switch {
	case trailer == nil:
		return false
	case trailer["content-type"] != nil:
		return false
	case len(trailer) > 0:
		return true
	}
	return !clientMade(status.Convert(err))
}

// clientMadeMessages are the messages of the statuses grpc-go's client
// makes, instead of the server, when an attempt fails on the transport (a
// lost connection, a reset, GOAWAY) or on its context.
var clientMadeMessages = [...]string{
	"connection error: desc = ",
	"closing transport due to: ",
	"error reading from server: ",
	"error reading server preface: ",
	"transport is closing",
	"keepalive ping failed to receive ACK within timeout",
	"closing connection since the server is not reading",
	"stream terminated by RST_STREAM with error code: ",
	"server is draining the connection",
	"received goaway",
	"no active streams left to process while draining",
	"server closed the stream without sending trailers",
	"transport: ",
	"context deadline exceeded",
	"context canceled",
	"grpc: the client connection is closing",
}

// clientMade reports whether st is one grpc-go's client made for a failure
// of the transport or of the call's context, not one the server sent.
func clientMade(st *status.Status) bool {
	msg := st.Message()
	for _, m := range clientMadeMessages {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}
