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
// Each call to Unary has its own throttle; use DialOptions, or the methods of
// one Retrier, to share one between the unary and stream interceptors.
func Unary(p grpcbackoff.Policy, opts ...Option) grpc.UnaryClientInterceptor {
	return mustNew(p, opts).Unary()
}

// Unary returns r's unary client interceptor.
func (r *Retrier) Unary() grpc.UnaryClientInterceptor { return r.unary }

// unaryState holds what an attempt needs besides the caller's arguments: the
// trailer (for pushback) and the call options with the trailer's. It is
// pooled, so that a call that succeeds allocates nothing.
type unaryState struct {
	trailer metadata.MD
	buf     [8]grpc.CallOption
	opts    []grpc.CallOption
}

var unaryStates = sync.Pool{New: func() any { return new(unaryState) }}

func getUnaryState(opts []grpc.CallOption) *unaryState {
	s := unaryStates.Get().(*unaryState)
	if len(opts) < len(s.buf) {
		n := copy(s.buf[:], opts)
		s.buf[n] = grpc.Trailer(&s.trailer)
		s.opts = s.buf[:n+1]
	} else {
		s.opts = append(opts[:len(opts):len(opts)], grpc.Trailer(&s.trailer))
	}
	return s
}

func (s *unaryState) release() {
	clear(s.buf[:])
	s.opts, s.trailer = nil, nil
	unaryStates.Put(s)
}

func (r *Retrier) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if r.budget != nil {
		r.budget.Started()
	}
	p, max, err := r.policyFor(method, opts)
	if p == nil {
		if err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	s := getUnaryState(opts)
	err = invoker(ctx, method, req, reply, cc, s.opts...)
	if err == nil {
		s.release()
		if r.metrics != nil {
			r.metrics.attempt(method, codes.OK)
		}
		return nil
	}
	return r.retryUnary(ctx, call{r: r, p: p, max: max, method: method, attempts: 1}, req, reply, cc, invoker, s, err)
}

// retryUnary is the slow path: attempt 1 failed with err.
func (r *Retrier) retryUnary(ctx context.Context, c call, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, s *unaryState, err error) error {
	defer s.release()
	method := c.method
	for {
		d, final := c.next(ctx, err, s.trailer)
		if final != nil {
			return final
		}
		if final := c.wait(ctx, d, err); final != nil {
			return final
		}
		s.trailer = nil
		err = invoker(c.retryContext(ctx), method, req, reply, cc, s.opts...)
		c.attempts++
		if err == nil {
			c.succeeded()
			return nil
		}
	}
}
