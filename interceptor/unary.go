package interceptor

import (
	"context"
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
// Each call to Unary has its own throttle; use DialOptions, or the methods of
// one Retrier, to share one between the unary and stream interceptors.
func Unary(p grpcbackoff.Policy, opts ...Option) grpc.UnaryClientInterceptor {
	return mustNew(p, opts).Unary()
}

// Unary returns r's unary client interceptor.
func (r *Retrier) Unary() grpc.UnaryClientInterceptor { return r.unary }

// unaryState holds what an attempt needs besides the caller's arguments: the
// trailer, for pushback, and the call options with grpc.Trailer added. It is
// pooled so that a call that succeeds allocates nothing.
type unaryState struct {
	trailer metadata.MD
	opts    []grpc.CallOption
}

var unaryStates = sync.Pool{New: func() any { return new(unaryState) }}

func getUnaryState(opts []grpc.CallOption) *unaryState {
	s := unaryStates.Get().(*unaryState)
	s.opts = append(append(s.opts[:0], opts...), grpc.Trailer(&s.trailer))
	return s
}

func (s *unaryState) release() {
	clear(s.opts)
	s.opts, s.trailer = s.opts[:0], nil
	unaryStates.Put(s)
}

func (r *Retrier) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if err := r.admit(ctx, method, cc, opts); err != nil {
		return err
	}
	if r.budget != nil {
		r.budget.Started()
	}
	p, max, err := r.policyFor(method, opts)
	if p == nil {
		if err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
		err = invoker(ctx, method, req, reply, cc, opts...)
		r.record(err)
		return err
	}
	c := call{r: r, p: p, max: max, method: method, target: target(cc), attempts: 1, adaptive: r.adaptiveFor(opts)}
	attemptOpts := opts
	var s *unaryState
	if !r.noPushback {
		s = getUnaryState(opts)
		attemptOpts = s.opts
	}
	err = invoker(ctx, method, req, reply, cc, attemptOpts...)
	r.record(err)
	var trailer metadata.MD
	if s != nil {
		trailer = s.trailer
		s.release()
	}
	if err == nil {
		return c.end(ctx, nil)
	}
	return c.end(ctx, r.retryUnary(ctx, &c, req, reply, cc, invoker, opts, err, trailer))
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
		attemptOpts := opts
		var s *unaryState
		if !r.noPushback {
			s = getUnaryState(opts)
			attemptOpts = s.opts
		}
		err = invoker(c.retryContext(ctx), c.method, req, reply, cc, attemptOpts...)
		r.record(err)
		c.attempts++
		if s != nil {
			trailer = s.trailer
			s.release()
		}
		if err == nil {
			return nil
		}
	}
}
