package gaxretry

import (
	"errors"
	"fmt"
	"reflect"
	"time"

	gax "github.com/googleapis/gax-go/v2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
)

// ClientOptions returns the options that make a gRPC client of
// cloud.google.com/go retry as p says, through the interceptor package: one
// Retrier (see interceptor.New, which reports bad input) installed with
// option.WithGRPCDialOption for each of its dial options. It suits every
// gRPC client, so a platform can put the same slice on all of them:
//
//	opts, err := gaxretry.ClientOptions(grpcbackoff.DefaultPolicy())
//	...
//	redis, err := redis.NewCloudRedisClient(ctx, opts...)
//	topics, err := pubsub.NewClient(ctx, project, opts...)
//
// Every client given the slice shares the one Retrier, and with it a retry
// budget per backend (the ClientConn's canonical target): the clients of one
// backend share its budget, those of two backends never do. Methods known not
// to be idempotent are not retried after a failure the server may have
// applied (see interceptor.Safety).
//
// For a client with retries of its own in its CallOptions (Pub/Sub,
// Spanner, Firestore...), call Adopt on them too, or each of its attempts
// makes ours. Dial options never reach HTTP/JSON clients (Cloud Storage's
// default, BigQuery): for those, use CallOption.
func ClientOptions(p grpcbackoff.Policy, opts ...interceptor.Option) ([]option.ClientOption, error) {
	r, err := interceptor.New(p, opts...)
	if err != nil {
		return nil, fmt.Errorf("gaxretry: ClientOptions: %w", err)
	}
	return RetrierClientOptions(r), nil
}

// RetrierClientOptions is ClientOptions for a Retrier built by the caller,
// for example to read its States for metrics.
func RetrierClientOptions(r *interceptor.Retrier) []option.ClientOption {
	dos := r.DialOptions()
	cos := make([]option.ClientOption, len(dos))
	for i, d := range dos {
		cos[i] = option.WithGRPCDialOption(d)
	}
	return cos
}

var callOptionsType = reflect.TypeFor[[]gax.CallOption]()

// Adopt makes the interceptor the only retry layer of a cloud.google.com/go
// client whose CallOptions retry by themselves, while keeping the client's
// judgement of which methods may be retried. callOptions is the client's
// CallOptions, a pointer to a struct whose fields are all []gax.CallOption:
//
//	c, err := pubsub.NewClient(ctx, project, opts...) // opts from ClientOptions
//	err = gaxretry.Adopt(c.TopicAdminClient.CallOptions)
//
// For each field (each method) that configures a gax retry, Adopt appends
// options that turn gax's retry off (gax.WithRetry of a Retryer that never
// retries: never nil, as code that wraps a client's Retryer, such as the
// Pub/Sub publisher's, calls it) and mark the method's calls
// interceptor.CallIdempotent, so that the interceptor retries them as its
// Policy says, even where the method's descriptor says it is not idempotent:
// the client knows better. Each field with none gets interceptor.NoRetry, as
// the client does not retry that method. A client that configures no retry on
// any method (Cloud Redis) expresses no judgement: Adopt leaves it as it is,
// and the interceptor decides from what it knows of each method. The gRPC call
// options a field already has are kept. Adopt must be called before the
// client is used, and calling it again changes nothing more.
//
// It returns an error naming the type for anything else: a nil pointer, a
// value that is not a pointer to a struct, or a field that is not
// []gax.CallOption; it then changes nothing.
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
	retried := make([]bool, s.NumField())
	anyRetried := false
	for i := range s.NumField() {
		retried[i] = retries(s.Field(i).Interface().([]gax.CallOption))
		anyRetried = anyRetried || retried[i]
	}
	if !anyRetried {
		return nil
	}
	for i := range s.NumField() {
		f := s.Field(i)
		opts := f.Interface().([]gax.CallOption)
		var settings gax.CallSettings
		for _, o := range opts {
			o.Resolve(&settings)
		}
		if settings.Retry != nil && !retried[i] {
			continue // adopted already: its retryer is noRetry
		}
		// WithGRPCOptions replaces the gRPC options before it: keep them.
		grpcOpts := append([]grpc.CallOption(nil), settings.GRPC...)
		added := make([]gax.CallOption, 0, len(opts)+2)
		added = append(added, opts...)
		if retried[i] {
			added = append(added, gax.WithRetry(newNoRetry), gax.WithGRPCOptions(append(grpcOpts, interceptor.CallIdempotent())...))
		} else {
			added = append(added, gax.WithGRPCOptions(append(grpcOpts, interceptor.NoRetry())...))
		}
		f.Set(reflect.ValueOf(added))
	}
	return nil
}

// noRetry is the gax.Retryer of a method whose retries the interceptor
// makes: it never retries.
type noRetry struct{}

func (noRetry) Retry(error) (time.Duration, bool) { return 0, false }

func newNoRetry() gax.Retryer { return noRetry{} }

// retries reports whether opts configure a gax retry other than Adopt's.
func retries(opts []gax.CallOption) bool {
	var settings gax.CallSettings
	for _, o := range opts {
		o.Resolve(&settings)
	}
	if settings.Retry == nil {
		return false
	}
	switch settings.Retry().(type) {
	case nil, noRetry:
		return false
	}
	return true
}
