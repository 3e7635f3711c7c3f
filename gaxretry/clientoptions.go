package gaxretry

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	gax "github.com/googleapis/gax-go/v2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
)

// ClientOptions returns the options that make a gRPC client of
// cloud.google.com/go retry as p says, through the interceptor package: one
// Retrier, built by interceptor.New with opts and WithClientRetries, whose
// dial options it installs with option.WithGRPCDialOption. It returns
// interceptor.New's error, naming every bad setting.
//
// Give the same slice to every client of a process: they then share the one
// Retrier, and with it a retry budget per backend. Each call of
// ClientOptions makes a new Retrier.
func ClientOptions(p grpcbackoff.Policy, opts ...interceptor.Option) ([]option.ClientOption, error) {
	r, err := interceptor.New(p, append(opts, WithClientRetries())...)
	if err != nil {
		return nil, fmt.Errorf("gaxretry: ClientOptions: %w", err)
	}
	return RetrierClientOptions(r), nil
}

// RetrierClientOptions is ClientOptions for a Retrier built by the caller,
// for example to read its States for metrics. Build it with
// WithClientRetries, or the clients that retry by themselves retry twice.
func RetrierClientOptions(r *interceptor.Retrier) []option.ClientOption {
	dos := r.DialOptions()
	cos := make([]option.ClientOption, len(dos))
	for i, d := range dos {
		cos[i] = option.WithGRPCDialOption(d)
	}
	return cos
}

// WithClientRetries is the interceptor option that keeps the Retrier out of
// the way of the Google Cloud clients that retry by themselves: a call that
// one of them makes (its outgoing metadata carries x-goog-api-client) of a
// service it retries in its own code gets a single attempt from the
// Retrier (interceptor.WithOuterRetry), unless Adopt handed the call's
// retries over. The services are those of Pub/Sub, Bigtable (data and
// admin), Spanner, and long-running operations, whose clients retry in
// code that no CallOptions reach (the Pub/Sub publisher and subscriber,
// Bigtable's and Spanner's own layers, the polling of op.Wait).
func WithClientRetries() interceptor.Option {
	return interceptor.WithOuterRetry(clientRetries)
}

// retriedByClient are the services whose Google Cloud Go clients retry
// their calls in their own code.
var retriedByClient = map[string]bool{
	"/google.longrunning.Operations/":                  true, // the LRO client of every client with long-running operations
	"/google.pubsub.v1.Publisher/":                     true, // the publisher, and the topic admin client
	"/google.pubsub.v1.Subscriber/":                    true, // the subscriber's stream and acks, and the subscription admin client
	"/google.pubsub.v1.SchemaService/":                 true,
	"/google.bigtable.v2.Bigtable/":                    true, // the data client
	"/google.bigtable.admin.v2.BigtableTableAdmin/":    true, // bigtable.AdminClient
	"/google.bigtable.admin.v2.BigtableInstanceAdmin/": true, // bigtable.InstanceAdminClient
	"/google.spanner.v1.Spanner/":                      true, // the spanner client's sessions and transactions
	"/google.spanner.admin.database.v1.DatabaseAdmin/": true,
	"/google.spanner.admin.instance.v1.InstanceAdmin/": true,
}

// googleClientHeader is the metadata key of the Google Cloud clients, which
// generated code (x-goog-api-client) and the hand-written clients set.
const googleClientHeader = "x-goog-api-client"

// clientRetries reports whether a call of method is one a Google Cloud
// client retries by itself: see WithClientRetries.
func clientRetries(ctx context.Context, method string, opts []grpc.CallOption) bool {
	i := strings.LastIndexByte(method, '/')
	if i <= 0 || !retriedByClient[method[:i+1]] {
		return false
	}
	for _, o := range opts {
		if _, ok := o.(handedOver); ok {
			return false
		}
	}
	return len(metadata.ValueFromOutgoingContext(ctx, googleClientHeader)) > 0
}

// handedOver is the call option by which Adopt tells the Retrier that a
// call's retries were handed over to it. gRPC ignores it.
type handedOver struct{ grpc.EmptyCallOption }

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
// For each method the client retries, Adopt marks its calls as handed over
// and wraps the client's gax Retryer: when the interceptor retried a call
// (its error is a *grpcbackoff.Error), gax does not; otherwise, as when the
// interceptor does not resend a write that may have been applied, the
// client's own Retryer decides, as it would alone. If code inside the client
// drops the mark (the Pub/Sub publisher replaces the gRPC options of
// Publish), WithClientRetries keeps the Retrier out of its way. Methods the
// client does not retry are left as they are: the interceptor decides from
// what it knows of them. The gRPC options a method has are kept. Call Adopt
// before the client is used; calling it again changes nothing.
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
		if settings.Retry == nil {
			continue // the client does not retry this method
		}
		own := settings.Retry
		switch own().(type) {
		case nil:
			continue // no retry either
		case *handOver:
			continue // adopted already
		}
		// WithGRPCOptions replaces the gRPC options before it: keep them.
		grpcOpts := append(append([]grpc.CallOption(nil), settings.GRPC...), handedOver{})
		adopted := append(append(make([]gax.CallOption, 0, len(opts)+2), opts...),
			gax.WithRetry(func() gax.Retryer { return &handOver{own: newRetryer(own)} }),
			gax.WithGRPCOptions(grpcOpts...))
		f.Set(reflect.ValueOf(adopted))
	}
	return nil
}

// newRetryer returns the Retryer that factory makes for one call, or nil.
func newRetryer(factory func() gax.Retryer) gax.Retryer {
	if factory == nil {
		return nil
	}
	return factory()
}

// handOver is the gax Retryer Adopt installs: it leaves a call the
// interceptor retried (or refused to retry: its budget, the deadline) to the
// interceptor's verdict, and otherwise asks the client's own Retryer, own.
// It is never nil, as code that wraps a client's Retryer needs it.
type handOver struct {
	own gax.Retryer // the client's Retryer for this call; nil: none
}

func (r *handOver) Retry(err error) (time.Duration, bool) {
	var ge *grpcbackoff.Error
	if errors.As(err, &ge) || r.own == nil {
		return 0, false
	}
	return r.own.Retry(err)
}
