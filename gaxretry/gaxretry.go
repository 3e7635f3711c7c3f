// Package gaxretry carries out a grpcbackoff.Policy as a gax-go Retryer, for
// code that configures retries with gax CallOptions: the per-method
// CallOptions of cloud.google.com/go clients, or gax.Invoke.
//
//	co := gaxretry.MustCallOption(grpcbackoff.DefaultPolicy())
//	c.CallOptions.GetInstance = append(c.CallOptions.GetInstance, co)
//
// The Retryer uses the Policy as the interceptor package does: the delay
// before retry n is Policy.RetryDelay(n, hint) (the Memorystore formula,
// lengthened by a google.rpc.RetryInfo detail, and no retry when the server
// asks for more than grpcbackoff.MaxHintDelay and Policy.MaxBackoff), only
// Policy.Codes are retried, and
// MaxAttempts counts every attempt, the first one included.
//
// # Which one to use
//
// Use the interceptor package for new code and for every gRPC client:
// retrying below gax is where more is known. The interceptors see the
// caller's deadline and return the last error at once when the next retry
// could not start before it, where gax.Invoke, which sleeps with gax.Sleep,
// sleeps until the deadline and returns context.DeadlineExceeded (a Retryer
// is never shown the context). They also honour the grpc-retry-pushback-ms
// trailer, which gax cannot see, share a retry throttle between calls, record
// metrics, retry streams, and return a *grpcbackoff.Error that counts the
// attempts; gax returns the last attempt's error as it is.
//
// Use gaxretry where a codebase already sets per-method gax CallOptions and
// should keep doing so, and for clients with no gRPC connection to
// intercept, such as the REST clients of cloud.google.com/go (HTTP errors
// get their code from codes.FromHTTP of this module).
//
// # Every client of a platform
//
// ClientOptions gives the interceptor to any gRPC client of
// cloud.google.com/go, one slice for all of them (a retry budget per
// backend). For a client that retries by itself in its CallOptions (Pub/Sub,
// Spanner, the Bigtable admin client...), Adopt hands those retries over to
// the interceptor, keeping the client's view of which methods may be
// retried:
//
//	opts, err := gaxretry.ClientOptions(grpcbackoff.DefaultPolicy())
//	ps, err := pubsub.NewClient(ctx, project, opts...)
//	err = gaxretry.Adopt(ps.TopicAdminClient.CallOptions)
//
// Never both on the same call: each attempt gax makes goes through the
// interceptor, which makes its own attempts, so a Policy of 3 attempts in
// each makes 9. The same goes for grpc-go's built-in retry (a retryPolicy in
// the service config) under either of them: turn it off with
// grpc.WithDisableRetry.
package gaxretry

import (
	"errors"
	"time"

	gax "github.com/googleapis/gax-go/v2"
	"github.com/googleapis/gax-go/v2/apierror"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	httpcodes "github.com/platformkit/grpcbackoff/codes"
)

// Retryer returns a gax.Retryer that carries out p for one call, or
// Validate's error if p is invalid. It counts the attempts of that call, so
// it must not be shared between calls or goroutines: gax.WithRetry takes a
// function that makes one per call, which is what CallOption does.
//
// Retry(err) reports whether to retry after a failed attempt, and after how
// long: not when err carries no status (gax.Invoke hands it a
// *apierror.APIError, from a gRPC status or an HTTP error), when its code is
// not in p.Codes, when this was attempt p.MaxAttempts, or when the server
// asked to wait longer than p.RetryDelay allows; otherwise after
// p.RetryDelay. A Retryer does not know the caller's deadline: gax.Invoke
// sleeps through a hint that passes it and returns its context's error.
func Retryer(p grpcbackoff.Policy) (gax.Retryer, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	p.Codes = append([]codes.Code(nil), p.Codes...) // the caller keeps its slice
	return &retryer{p: &p}, nil
}

// CallOption returns a gax.CallOption that retries as p says, each call
// with a fresh Retryer, or Validate's error if p is invalid. Add it to a
// client's per-method CallOptions, after the defaults so as to keep their
// timeout:
//
//	c.CallOptions.GetInstance = append(c.CallOptions.GetInstance, co)
//
// or pass it to one call. A later gax.WithRetry replaces it.
func CallOption(p grpcbackoff.Policy) (gax.CallOption, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	p.Codes = append([]codes.Code(nil), p.Codes...)
	return gax.WithRetry(func() gax.Retryer { return &retryer{p: &p} }), nil
}

// MustCallOption is CallOption for a Policy written in code: it panics, with
// Validate's message, if p is invalid.
func MustCallOption(p grpcbackoff.Policy) gax.CallOption {
	co, err := CallOption(p)
	if err != nil {
		panic(err.Error())
	}
	return co
}

// retryer is the Retryer of one call.
type retryer struct {
	p        *grpcbackoff.Policy // validated, shared read-only by the retryers of one CallOption
	attempts int                 // failed attempts so far
}

func (r *retryer) Retry(err error) (time.Duration, bool) {
	r.attempts++
	code, hint, ok := classify(err)
	if !ok || !r.p.Retryable(code) || r.attempts >= r.p.MaxAttempts {
		return 0, false
	}
	return r.p.RetryDelay(r.attempts-1, hint)
}

// classify returns the code of err and the server's hint, or false if err
// carries no status.
func classify(err error) (codes.Code, grpcbackoff.Hint, bool) {
	// gax.Invoke hands over an *apierror.APIError; parsing one again would
	// lose its HTTP status to the code its GRPCStatus maps it to.
	var ae *apierror.APIError
	if !errors.As(err, &ae) {
		var ok bool
		if ae, ok = apierror.FromError(err); !ok {
			return 0, grpcbackoff.Hint{}, false
		}
	}
	if hc := ae.HTTPCode(); hc != -1 {
		code := httpcodes.FromHTTP(hc)
		var st *status.Status
		if ri := ae.Details().RetryInfo; ri != nil {
			// Through a status, so that ServerHint's bounds apply.
			st, _ = status.New(code, "").WithDetails(ri)
		}
		return code, grpcbackoff.ServerHint(st, nil), true
	}
	st := ae.GRPCStatus()
	return st.Code(), grpcbackoff.ServerHint(st, nil), true
}
