// Package interceptor carries out a grpcbackoff.Policy as gRPC client
// interceptors: Unary for unary calls, Stream for every kind of stream, and
// DialOptions for both, sharing one retry throttle.
//
//	conn, err := grpc.NewClient(target, append(interceptor.DialOptions(grpcbackoff.DefaultPolicy()), creds)...)
//
// The Google Cloud clients (cloud.google.com/go) retry by themselves, in
// their CallOptions or their own code. One retry layer per method and code,
// never two, never none: for a call of such a client (its x-goog-api-client
// carries a gapic/ or gccl/ token), the Retrier makes one attempt on a code
// the client retries for that method and hands the error back
// (ReasonClientRetries), and retries every other code of its Policy itself;
// Explain says which codes are whose. A client retries a call with one
// context and request, by which the Retrier knows its attempts: its own
// retries of one call stay within MaxAttempts across them. That memory
// never answers for the wire: every call is sent, and an attempt of a call
// its client resends only gets fewer retries of the Retrier's. The gaxretry
// module gives a Retrier's dial options to such clients
// (gaxretry.ClientOptions) and can hand their own retries over to it
// (gaxretry.Adopt). A Retrier installed twice on one connection (the same
// dial options, or two Retriers') retries in one layer: the first one.
//
// Beyond retries, a Retrier hedges the methods given WithHedging, cuts hung
// attempts (Policy.AttemptTimeout), keeps a retry budget per backend target,
// never retries a method known not to be idempotent after a failure that may
// have been applied, and tells its Observers of every decision.
//
// A call is retried when it fails with one of the Policy's codes, up to
// MaxAttempts attempts, waiting Policy.Backoff between attempts (or longer if
// the server asks for it with RetryInfo or pushback). The interceptors never
// sleep past the caller's deadline: when the next retry could not start before
// it, the last error is returned at once. The error returned after retries is
// a *grpcbackoff.Error that keeps the last status code and details.
package interceptor

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/attempt"
	"github.com/platformkit/grpcbackoff/internal/call"
	"github.com/platformkit/grpcbackoff/internal/settings"
)

// PreviousAttemptsKey is the metadata key that tells the server, on a retried
// attempt, how many attempts came before it (as grpc-go's built-in retry does).
const PreviousAttemptsKey = "grpc-previous-rpc-attempts"

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
	e         call.Engine // what every call through r shares; its options set it (internal/call)
	observers []Observer  // WithObserver, WithOnRetry, WithLogger: the engine's Observer
	hedged    bool        // some entry hedges: DialOptions watches response headers
	timed     bool        // some Policy has an AttemptTimeout: so does it
}

// Retry describes one retry decision, as passed to the hook set with
// WithOnRetry: attempt number Attempt of Method failed with Err, the server
// hinted Hint, and the next attempt starts after Delay (the longer of the
// Policy's backoff and Hint.Delay), unless Throttled, in which case there is
// none.
type Retry struct {
	Method string
	// StaticMethod is true when the call carried grpc.StaticMethod(), as in
	// End.
	StaticMethod bool
	// Target is the target of the call's ClientConn (cc.Target()), "" when
	// the interceptor was called without one.
	Target string
	// Conn is the call's ClientConn, as in End.
	Conn      *grpc.ClientConn
	Attempt   int
	Code      codes.Code
	Err       error
	Hint      grpcbackoff.Hint
	Delay     time.Duration
	Throttled bool
	// Hedge says the next attempt is a hedge (WithHedging), sent Delay after
	// the attempt before it; Code and Err are those of the last attempt that
	// failed with a non-fatal code, if one did (OK and nil otherwise).
	Hedge bool
}

// An Option changes how New builds a Retrier.
type Option func(*Retrier) error

// WithThrottle replaces the default retry throttle (grpcbackoff.DefaultThrottle).
// Each backend target gets a budget of its own for t (see Retrier).
func WithThrottle(t grpcbackoff.Throttle) Option {
	return func(r *Retrier) error {
		if err := t.Validate(); err != nil {
			return err
		}
		r.e.Targets.Throttle = &t
		return nil
	}
}

// WithoutThrottle turns the retry throttle off: every call may retry up to
// its Policy whatever the others do. Use it only where a storm is impossible.
func WithoutThrottle() Option {
	return func(r *Retrier) error { r.e.Targets.Throttle = nil; return nil }
}

// WithOnRetry sets a function called before each retry wait, and when the
// throttle refuses a retry. It runs on the caller's goroutine and must not
// block.
func WithOnRetry(f func(Retry)) Option {
	return func(r *Retrier) error {
		if f == nil {
			return errors.New("interceptor: WithOnRetry(nil): the function is nil")
		}
		r.observers = append(r.observers, hookObserver(f))
		return nil
	}
}

// WithoutPushback stops reading the grpc-retry-pushback-ms trailer of unary
// calls (streams read it at no cost). Reading it takes a grpc.Trailer call
// option on every call, for which grpc-go allocates a copy of the trailer
// even when the call succeeds. RetryInfo details are still honoured, and
// what decides a retry is known as without it: whether the call committed
// (grpc.Header) and whether it was sent (grpc.Peer). Use it where no server
// sends pushback and every allocation counts: unary calls then ignore a
// server's retry guard (package guard), whose refusal is pushback.
func WithoutPushback() Option {
	return func(r *Retrier) error { r.e.NoPushback = true; return nil }
}

// WithLogger logs, with l, each retry decision at level Info (Warn when
// throttled), and each call that gives up (End.GaveUp) at level Warn with
// its reason. The records carry the call's context. It adds an observer:
// each WithLogger adds its logger; a nil l adds nothing.
func WithLogger(l *slog.Logger) Option {
	return func(r *Retrier) error {
		if l != nil {
			r.observers = append(r.observers, &logObserver{l: l})
		}
		return nil
	}
}

// DefaultBufferLimit is the number of bytes of sent messages a stream keeps
// for replay before it commits (see Stream).
const DefaultBufferLimit = 256 << 10

// WithBufferLimit sets how many bytes of sent messages a stream keeps for
// replay before it commits; it must not be negative. 0 commits every stream
// on its first message sent. Default DefaultBufferLimit.
func WithBufferLimit(n int) Option {
	return func(r *Retrier) error {
		if n < 0 {
			return fmt.Errorf("interceptor: WithBufferLimit(%d): the limit must not be negative", n)
		}
		r.e.BufLimit = n
		return nil
	}
}

// New returns a Retrier that carries out p, or an error naming every invalid
// field of p and every invalid option (a nil one included) by its index in
// opts, all at once. Use it for configuration read at run time; Unary,
// Stream and DialOptions panic instead.
func New(p grpcbackoff.Policy, opts ...Option) (*Retrier, error) {
	c, err := settings.Compile(p)
	errs := []error{err}
	throttle := grpcbackoff.DefaultThrottle()
	r := &Retrier{}
	r.e.BufLimit = DefaultBufferLimit
	r.e.Safety.Settings = &r.e.Settings
	r.e.Targets.Throttle, r.e.Targets.Max = &throttle, maxTargets
	r.e.Settings.Base.SetPolicy(&c)
	for i, o := range opts {
		if o == nil {
			errs = append(errs, &optionError{i: i, err: errors.New("interceptor: the option is nil")})
		} else if err := o(r); err != nil {
			errs = append(errs, &optionError{i: i, err: err})
		}
	}
	if r.e.Unsafe == nil {
		r.e.Unsafe = r.e.Safety.NotIdempotent
	}
	errs = append(errs, r.checkHedging())
	r.e.Settings.All(func(_ string, e *settings.Entry) {
		r.timed = r.timed || e.Policy != nil && e.Policy.AttemptTimeout > 0
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(r.observers) > 0 {
		r.e.Observer = observers(r.observers)
	}
	return r, nil
}

// maxTargets is the number of targets past which a Retrier drops the idle
// ones (see target.Registry).
var maxTargets = 1024

// optionError is the error of the option opts[i] given to New.
type optionError struct {
	i   int
	err error
}

// Error names the option on each line of its error.
func (e *optionError) Error() string {
	lines := strings.Split(e.err.Error(), "\n")
	for j, l := range lines {
		lines[j] = fmt.Sprintf("interceptor: opts[%d]: %s", e.i, strings.TrimPrefix(l, "interceptor: "))
	}
	return strings.Join(lines, "\n")
}

func (e *optionError) Unwrap() error { return e.err }

func mustNew(p grpcbackoff.Policy, opts []Option) *Retrier {
	r, err := New(p, opts...)
	if err != nil {
		panic(err.Error())
	}
	return r
}

// DialOptions returns dial options that install both interceptors of one
// Retrier, chained (grpc.WithChainUnaryInterceptor) so that they compose with
// other interceptors, and that turn off grpc-go's own retry policy
// (grpc.WithDisableRetry), so that a service config from the resolver or
// grpc.WithDefaultServiceConfig cannot multiply attempts under ours: three
// attempts of each of three attempts would be nine. gRPC's transparent retry
// of attempts that never left the client stays on. It panics if p or an
// option is invalid.
func DialOptions(p grpcbackoff.Policy, opts ...Option) []grpc.DialOption {
	return mustNew(p, opts).DialOptions()
}

// DialOptions returns dial options that install r's unary and stream
// interceptors, chained after any installed before them, and turn off
// grpc-go's own retry policy (see the function DialOptions).
func (r *Retrier) DialOptions() []grpc.DialOption {
	opts := []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(r.Unary()),
		grpc.WithChainStreamInterceptor(r.Stream()),
		grpc.WithDisableRetry(),
	}
	if r.hedged || r.timed {
		// Tells hedged calls, and attempts under AttemptTimeout, of their
		// response headers as they arrive (internal/attempt). Only a Retrier that
		// hedges or cuts attempts pays for it: a stats handler makes grpc-go
		// allocate its events on every call.
		opts = append(opts, grpc.WithStatsHandler(attempt.HeaderWatch{}))
	}
	return opts
}
