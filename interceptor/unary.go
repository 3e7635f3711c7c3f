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
	if n := len(opts); n < len(s.buf) {
		// Loops, not copy and clear: for the one or two options calls
		// carry, the runtime's typedslicecopy and memclrHasPointers cost
		// more (~2 ns in all, measured with BenchmarkIsolated).
		//lint:ignore S1001 measured slower for short slices, see above
		for i, o := range opts {
			s.buf[i] = o
		}
		s.buf[n] = grpc.Trailer(&s.trailer)
		s.opts = s.buf[:n+1]
	} else {
		s.opts = append(opts[:len(opts):len(opts)], grpc.Trailer(&s.trailer))
	}
	return s
}

func (s *unaryState) release() {
	if len(s.opts) <= len(s.buf) {
		for i := range s.opts { // see getUnaryState
			s.buf[i] = nil
		}
	}
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
	attemptOpts := opts
	var s *unaryState
	if !r.noPushback {
		s = getUnaryState(opts)
		attemptOpts = s.opts
	}
	err = invoker(ctx, method, req, reply, cc, attemptOpts...)
	if err == nil {
		if s != nil {
			s.release()
		}
		if r.metrics != nil {
			r.metrics.attempt(method, codes.OK)
		}
		return nil
	}
	var trailer metadata.MD
	if s != nil {
		trailer = s.trailer
		s.release()
	}
	return r.retryUnary(ctx, call{r: r, p: p, max: max, method: method, attempts: 1}, req, reply, cc, invoker, opts, err, trailer)
}

// retryUnary is the slow path: attempt 1 failed with err, and trailer (if
// pushback is read). opts are the caller's options.
//
// The state that carries grpc.Trailer is taken from the pool for each
// attempt and put back before the wait: a call waiting in backoff holds as
// little as it can.
func (r *Retrier) retryUnary(ctx context.Context, c call, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption, err error, trailer metadata.MD) error {
	method := c.method
	pushback := !r.noPushback
	for {
		d, final := c.next(ctx, err, trailer)
		trailer = nil // not held through the wait
		if final != nil {
			return final
		}
		if final := c.wait(ctx, d, err); final != nil {
			return final
		}
		attemptOpts := opts
		var s *unaryState
		if pushback {
			s = getUnaryState(opts)
			attemptOpts = s.opts
		}
		err = invoker(c.retryContext(ctx), method, req, reply, cc, attemptOpts...)
		c.attempts++
		if s != nil {
			trailer = s.trailer
			s.release()
		}
		if err == nil {
			c.succeeded()
			return nil
		}
	}
}
