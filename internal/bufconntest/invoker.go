package bufconntest

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
)

// Invoker is a scripted grpc.UnaryInvoker, for the interceptors' unit tests:
// attempt i (from 0) returns Errs[i], or nil past the end, and records when
// it ran. It is safe for concurrent use.
type Invoker struct {
	Errs []error

	mu    sync.Mutex
	times []time.Time
}

// Invoke is the grpc.UnaryInvoker.
func (s *Invoker) Invoke(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := len(s.times)
	s.times = append(s.times, time.Now())
	if i < len(s.Errs) {
		return s.Errs[i]
	}
	return nil
}

// Call calls "/pkg.Svc/Get" through the unary interceptor ic, with s as its
// invoker and no ClientConn.
func (s *Invoker) Call(ctx context.Context, ic grpc.UnaryClientInterceptor, opts ...grpc.CallOption) error {
	return ic(ctx, "/pkg.Svc/Get", "req", new(string), nil, s.Invoke, opts...)
}

// Exact is grpcbackoff.DefaultPolicy without jitter, so that every delay is
// exact.
func Exact() grpcbackoff.Policy {
	p := grpcbackoff.DefaultPolicy()
	p.Jitter = 0
	return p
}

// Attempts returns the number of attempts made.
func (s *Invoker) Attempts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.times)
}

// Gaps returns the times between the attempts.
func (s *Invoker) Gaps() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Gaps(slices.Clone(s.times))
}

// Unavailable returns n UNAVAILABLE errors.
func Unavailable(n int) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = status.Error(codes.Unavailable, "down")
	}
	return errs
}

// Seconds returns the durations of secs seconds, each rounded to the
// nanosecond.
func Seconds(secs ...float64) []time.Duration {
	out := make([]time.Duration, len(secs))
	for i, s := range secs {
		out[i] = time.Duration(math.Round(s * float64(time.Second)))
	}
	return out
}

// Gaps returns the time between consecutive instants of times.
func Gaps(times []time.Time) []time.Duration {
	var g []time.Duration
	for i := 1; i < len(times); i++ {
		g = append(g, times[i].Sub(times[i-1]))
	}
	return g
}
