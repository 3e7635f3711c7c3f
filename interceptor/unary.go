package interceptor

import (
	"context"
	"sync"
	"time"

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
// (gRFC A6): the server may have acted on it. A trailers-only response (an
// error sent without headers, the usual form of a failure) does not commit.
// To know, each attempt carries a grpc.Header option, for which grpc-go
// copies the response headers even when the call succeeds.
//
// With Policy.AttemptTimeout, each attempt runs under the earlier of the
// caller's deadline and its start plus AttemptTimeout; an attempt cut by its
// own timeout is retried whatever Policy.Codes says, one cut by the
// caller's deadline never is.
//
// Each call to Unary has its own throttle; use DialOptions, or the methods of
// one Retrier, to share one between the unary and stream interceptors.
func Unary(p grpcbackoff.Policy, opts ...Option) grpc.UnaryClientInterceptor {
	return mustNew(p, opts).Unary()
}

// Unary returns r's unary client interceptor.
func (r *Retrier) Unary() grpc.UnaryClientInterceptor { return r.unary }

// unaryState holds what an attempt needs besides the caller's arguments: the
// response headers, to know whether the call committed, the trailer, for
// pushback, and the call options with grpc.Header (and grpc.Trailer) added.
// It is pooled so that a call that succeeds allocates nothing.
type unaryState struct {
	header  metadata.MD
	trailer metadata.MD
	opts    []grpc.CallOption
}

var unaryStates = sync.Pool{New: func() any { return new(unaryState) }}

func getUnaryState(opts []grpc.CallOption, trailer bool) *unaryState {
	s := unaryStates.Get().(*unaryState)
	if n := len(opts) + 2; cap(s.opts) < n {
		s.opts = make([]grpc.CallOption, 0, n) // one allocation for both additions
	}
	s.opts = append(append(s.opts[:0], opts...), grpc.Header(&s.header))
	if trailer {
		s.opts = append(s.opts, grpc.Trailer(&s.trailer))
	}
	return s
}

// release puts s back in the pool. Its option slice keeps the last call's
// options until it is reused, as the pool drops it at the next collections.
func (s *unaryState) release() {
	s.opts, s.header, s.trailer = s.opts[:0], nil, nil
	unaryStates.Put(s)
}

func (r *Retrier) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	conn := r.conn(cc)
	if err := r.admit(ctx, conn, method, cc, opts); err != nil {
		return err
	}
	if b := conn.t.budget; b != nil {
		b.Started()
	}
	outer := r.outer != nil && r.outer(ctx, method, opts)
	if hp, n := r.hedgingFor(method, opts); hp != nil && !outer {
		return r.hedgeUnary(ctx, conn, hp, n, method, req, reply, cc, invoker, opts)
	}
	p, max, err := r.policyFor(method, opts)
	if outer && err == nil {
		p = nil
	}
	if p == nil {
		if err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
		err = invoker(ctx, method, req, reply, cc, opts...)
		conn.record(err)
		return err
	}
	trailer, headers, cut, err := r.attemptUnary(ctx, ctx, p, conn, method, req, reply, cc, invoker, opts)
	if err == nil {
		conn.succeeded()
		if len(r.observers) > 0 {
			r.endFirst(ctx, method, cc, opts)
		}
		return nil
	}
	c := &call{r: r, p: p, max: max, method: method, static: staticMethod(opts), cc: cc, target: target(cc),
		conn: conn, attempts: 1, opts: opts, adaptive: r.adaptiveFor(conn, opts), headers: headers, cut: cut}
	return c.end(ctx, r.retryUnary(ctx, c, req, reply, cc, invoker, opts, err, trailer))
}

// endFirst tells the observers of a call whose first attempt succeeded.
func (r *Retrier) endFirst(ctx context.Context, method string, cc *grpc.ClientConn, opts []grpc.CallOption) {
	e := End{Method: method, StaticMethod: staticMethod(opts), Target: target(cc), Conn: cc, Attempts: 1}
	for _, o := range r.observers {
		o.OnEnd(ctx, e)
	}
}

// attemptUnary makes one attempt of a call of method with policy p on conn,
// with context actx (ctx itself, or ctx with the retry metadata), under the
// Policy's AttemptTimeout if it has one. For a failed attempt it returns the
// trailer (nil unless pushback is read), whether response headers had
// arrived (the call committed, gRFC A6) and whether the attempt's own timeout
// cut it: its context ended with DEADLINE_EXCEEDED while the caller's ctx is
// still live.
func (r *Retrier) attemptUnary(ctx, actx context.Context, p *compiled, conn *connState, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) (trailer metadata.MD, headers, cut bool, err error) {
	var cancel context.CancelFunc
	var own bool // the attempt's deadline is its own, not the caller's
	var adl time.Time
	if t := p.AttemptTimeout; t > 0 {
		adl = time.Now().Add(t)
		// The earlier of the caller's deadline and now+t.
		dl, ok := ctx.Deadline()
		own = !ok || time.Now().Add(t).Before(dl)
		actx, cancel = context.WithTimeout(actx, t)
	}
	s := getUnaryState(opts, !r.noPushback)
	err = invoker(actx, method, req, reply, cc, s.opts...)
	conn.record(err)
	if err != nil {
		// grpc-go gives nil headers for a trailers-only response, which
		// carries no headers, and for an attempt that got no response.
		trailer, headers = s.trailer, s.header != nil
		// Cut by its own timeout, the caller's context live: the attempt's
		// context has ended, or the server, which was sent the attempt's
		// deadline, reset the call when that deadline passed a moment
		// before the client's timer fired.
		cut = cancel != nil && ctx.Err() == nil &&
			(actx.Err() == context.DeadlineExceeded || own && status.Code(err) == codes.DeadlineExceeded && !time.Now().Add(p.AttemptTimeout/10).Before(adl))
	}
	s.release()
	if cancel != nil {
		cancel()
	}
	return trailer, headers, cut, err
}

// target returns cc's target, or "" for a call made without a ClientConn.
func target(cc *grpc.ClientConn) string {
	if cc == nil {
		return ""
	}
	return cc.Target()
}

// retryUnary is the slow path: attempt 1 failed with err, and trailer (if
// pushback is read). opts are the caller's options. The trailer of an
// attempt is not held through the wait that follows it.
func (r *Retrier) retryUnary(ctx context.Context, c *call, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption, err error, trailer metadata.MD) error {
	for {
		d, final := c.next(ctx, err, trailer)
		trailer = nil
		if final != nil {
			return final
		}
		if final := c.wait(ctx, d, err); final != nil {
			return final
		}
		trailer, c.headers, c.cut, err = r.attemptUnary(ctx, c.retryContext(ctx), c.p, c.conn, c.method, req, reply, cc, invoker, opts)
		c.attempts++
		if err == nil {
			c.conn.succeeded()
			return nil
		}
	}
}
