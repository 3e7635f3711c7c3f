package gaxretry

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	gax "github.com/googleapis/gax-go/v2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/cloudclients"
)

// ClientOptions returns the options that make a gRPC client of
// cloud.google.com/go retry as p says, through the interceptor package: the
// dial options of interceptor.New(p, opts...), installed with
// option.WithGRPCDialOption. It returns interceptor.New's error, naming
// every bad setting.
//
// Give the same slice to every client of a process: they then share the one
// Retrier, and with it a retry budget per backend. Each call of
// ClientOptions makes a new Retrier; to keep it, for its Explain and
// States, build it with interceptor.New and give it to
// RetrierClientOptions.
func ClientOptions(p grpcbackoff.Policy, opts ...interceptor.Option) ([]option.ClientOption, error) {
	r, err := interceptor.New(p, opts...)
	if err != nil {
		return nil, fmt.Errorf("gaxretry: ClientOptions: %w", err)
	}
	return RetrierClientOptions(r), nil
}

// RetrierClientOptions returns the client options that install the dial
// options of r, a Retrier built by the caller.
func RetrierClientOptions(r *interceptor.Retrier) []option.ClientOption {
	dos := r.DialOptions()
	cos := make([]option.ClientOption, len(dos))
	for i, d := range dos {
		cos[i] = option.WithGRPCDialOption(d)
	}
	return cos
}

var callOptionsType = reflect.TypeFor[[]gax.CallOption]()

// Adopt hands the retries that a cloud.google.com/go client configures in
// its CallOptions over to the interceptor, so that the Retrier's Policy,
// budget and metrics apply to them and a call is never retried by both.
// callOptions is the client's CallOptions: a pointer to a struct whose
// fields are all []gax.CallOption.
//
//	c, err := pubsub.NewClient(ctx, project, opts...) // opts from ClientOptions
//	err = gaxretry.Adopt(c.TopicAdminClient.CallOptions)
//
// Adopt marks the calls of every method as handed over, so that the
// Retrier retries them on every code of its Policy (it would otherwise
// leave the codes the client retries to the client), and wraps the client's
// gax Retryer: when the interceptor gave up on a call (a *grpcbackoff.Error
// whose Reason is neither ReasonNotRetryable nor ReasonClientRetries), gax
// does not retry it, and a next call with the same request object and
// context (a poller's) is a call of its own; an error the interceptor does not retry (a code outside
// its Policy, a write that may have been applied) goes to the client's own
// Retryer, which decides as it would alone. The polling of op.Wait is
// adopted with the client's LROClient:
//
//	err = gaxretry.Adopt(c.LROClient.CallOptions) // c: a Cloud Redis client, say
//
// A per-call gax.WithGRPCOptions replaces the mark, as code inside a client
// may (the Pub/Sub publisher does for Publish): such a call gets the rule
// of a call that was not adopted, one layer per code, its retries kept. A
// per-call gax.WithRetry replaces the wrapped Retryer, and the mark, made
// for each call, sees it: a code that Retryer retries is its alone, each of
// its attempts one attempt on the wire (a Retryer of 3 attempts on
// UNAVAILABLE: 3); the interceptor retries the other codes of its Policy,
// its retries across that Retryer's attempts staying within MaxAttempts.
// The gRPC options a method has are kept. Call Adopt before the client is
// used; calling it again changes nothing.
//
// It returns an error naming the type for anything but a non-nil pointer to
// such a struct, and then changes nothing.
func Adopt(callOptions any) error {
	v := reflect.ValueOf(callOptions)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("gaxretry: Adopt(%T): want a non-nil pointer to a client's CallOptions struct", callOptions)
	}
	s := v.Elem()
	var errs []error
	for i := range s.NumField() {
		if f := s.Type().Field(i); f.Type != callOptionsType || !f.IsExported() {
			errs = append(errs, fmt.Errorf("gaxretry: Adopt(%T): field %s is %s, want an exported []gax.CallOption", callOptions, f.Name, f.Type))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for i := range s.NumField() {
		f := s.Field(i)
		opts := f.Interface().([]gax.CallOption)
		var settings gax.CallSettings
		for _, o := range opts {
			o.Resolve(&settings)
		}
		if slices.ContainsFunc(opts, func(o gax.CallOption) bool { _, ok := o.(adoption); return ok }) {
			continue // adopted already
		}
		own := settings.Retry
		// WithGRPCOptions replaces the gRPC options before it: keep them.
		a := adoption{own: own, grpc: append([]grpc.CallOption(nil), settings.GRPC...)}
		f.Set(reflect.ValueOf(append(append(make([]gax.CallOption, 0, len(opts)+1), opts...), a)))
	}
	return nil
}

// adoption is the gax.CallOption Adopt appends to a method's CallOptions.
// For each call gax.Invoke resolves it into the call's settings: it
// installs Adopt's Retryer (handOver, over own) and the method's gRPC
// options with a mark of the call's own, cloudclients.HandedOver, which
// keeps the settings being resolved. An option resolved after it, the
// caller's per-call gax.WithRetry, replaces that Retryer there: the mark's
// Retries then asks a fresh Retryer of that kind whether it retries an
// error, so that the interceptors leave what it retries to it (one layer,
// the caller's), and retry what it does not.
type adoption struct {
	own  func() gax.Retryer // the client's own Retryer; nil: none
	grpc []grpc.CallOption  // the method's gRPC options
}

func (a adoption) Resolve(s *gax.CallSettings) {
	s.Retry = func() gax.Retryer { return &handOver{own: newRetryer(a.own)} }
	mark := &cloudclients.HandedOver{Retries: func(err error) bool {
		if s.Retry == nil {
			return false // gax.WithRetry(nil): gax sends the call once
		}
		r := s.Retry()
		if _, ours := r.(*handOver); ours || r == nil {
			return false
		}
		_, retries := r.Retry(err)
		return retries
	}}
	s.GRPC = append(a.grpc[:len(a.grpc):len(a.grpc)], mark)
}

// newRetryer returns the Retryer that factory makes for one call, or nil.
func newRetryer(factory func() gax.Retryer) gax.Retryer {
	if factory == nil {
		return nil
	}
	return factory()
}

// handOver is the gax Retryer Adopt installs: it leaves a call the
// interceptor gave up on (its attempts, budget, or the deadline spent) to
// the interceptor's verdict, and asks the client's own Retryer, own, about
// an error the interceptor does not retry (a code outside its Policy, or a
// write that may have been applied), as the client alone would. It is never
// nil, as code that wraps a client's Retryer needs it.
type handOver struct {
	own gax.Retryer // the client's Retryer for this call; nil: none
}

func (r *handOver) Retry(err error) (time.Duration, bool) {
	var ge *grpcbackoff.Error
	if errors.As(err, &ge) && ge.Reason != grpcbackoff.ReasonNotRetryable && ge.Reason != grpcbackoff.ReasonClientRetries || r.own == nil {
		cloudclients.Decline(err) // not sent again: the next call with its request and context is another
		return 0, false
	}
	pause, ok := r.own.Retry(err)
	if !ok {
		cloudclients.Decline(err)
	}
	return pause, ok
}
