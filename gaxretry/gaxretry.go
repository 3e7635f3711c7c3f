// Package gaxretry gives the Retrier of package interceptor to the gRPC
// clients of cloud.google.com/go: one set of options for every client of a
// process, and never two retry layers on one call.
//
//	opts, err := gaxretry.ClientOptions(grpcbackoff.DefaultPolicy()) // once per process
//	rc, err := redis.NewCloudRedisClient(ctx, opts...)               // nothing more
//	ps, err := pubsub.NewClient(ctx, project, opts...)
//	err = gaxretry.Adopt(ps.TopicAdminClient.CallOptions)            // optional
//	err = gaxretry.Adopt(ps.SubscriptionAdminClient.CallOptions)
//
// # Who retries what
//
// Every call goes through the Retrier, which retries in one layer per method
// and code (see package interceptor):
//
//   - Calls of a Google Cloud client: a code the client retries for the
//     method (in its CallOptions, or in its own code: the Pub/Sub publisher
//     and subscriber, Bigtable, Spanner, Storage, the polling of op.Wait)
//     gets one attempt and goes back to the client; every other code of the
//     Policy, RESOURCE_EXHAUSTED on most clients and every code on clients
//     that retry nothing (Cloud Redis), is retried by the Retrier, as its
//     Policy and what it knows of the method say (interceptor.Safety: a
//     write that may apply twice is not resent after a failure the server
//     may have applied). Retrier.Explain says which codes are whose.
//   - Calls of generated stubs on a connection of your own, or with an
//     x-goog-api-client of your own: the Retrier retries every code of its
//     Policy.
//   - Calls of a generated client whose CallOptions were given to Adopt: the
//     Retrier retries them, with its Policy, budget and metrics, and the
//     client does not retry again what the Retrier gave up on. What it does
//     not retry (a write, a code outside its Policy), even after retrying
//     other codes, goes to the client's own retry, as alone. Adopted calls
//     wait as the Policy says, and one whose next wait would pass its
//     deadline ends then: in an outage of most of the deadline, sooner than
//     the client alone, whose own waits are often shorter.
//   - A call given a per-call gax.WithRetry: adopted, what that Retryer
//     retries is its alone; not adopted, the interceptor cannot see it
//     until it resends the call (with the context gax.Invoke was given),
//     and then gives each resend what is left of MaxAttempts, one attempt
//     at least: at most its attempts + MaxAttempts − 1 reach the server.
//
// Each call of ClientOptions makes a new Retrier, with its own retry budget
// per backend: give the same slice to every client of a process.
//
// A create with an ID of the caller's choosing (AIP-133), such as Cloud
// Redis's CreateInstance, is resent after a failure that may have been
// applied when its request sets the ID (an empty one, where the API lets
// the server choose, is not): if the first attempt was applied, the second
// answers ALREADY_EXISTS, for an instance that may be the caller's own, and
// no operation handle; the error is then a *grpcbackoff.Error whose
// Attempts is 2 or more. Check with GetInstance before taking it for
// someone else's.
//
// # Without an interceptor
//
// Retryer, CallOption and MustCallOption carry out a Policy as a gax
// Retryer, for clients with no gRPC connection to intercept (the REST
// clients of cloud.google.com/go; an HTTP error gets its code from
// codes.FromHTTP) and for code that sets per-method gax CallOptions. The
// delay before retry n is Policy.RetryDelay(n, hint), only Policy.Codes are
// retried, and MaxAttempts counts every attempt. The interceptor knows more:
// it sees the caller's deadline (gax sleeps until it and returns
// context.DeadlineExceeded), the grpc-retry-pushback-ms trailer, a retry
// budget shared between calls, streams and the method's Safety, and returns
// a *grpcbackoff.Error that counts the attempts. Both on one call retry in
// one layer: CallOption marks its calls, and the interceptor leaves the
// codes its Retryer retries to it. Never grpc-go's own retry (a retryPolicy
// in a service config) under either: their attempts multiply.
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
	"github.com/platformkit/grpcbackoff/internal/cloudclients"
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
// or pass it to one call. It also marks the calls with a gRPC call option
// (ignored by gRPC), by which the interceptors of package interceptor know
// the client retries p's codes itself and leave them to it: one retry
// layer. A later gax.WithRetry replaces its Retryer, and a later
// gax.WithGRPCOptions its mark.
func CallOption(p grpcbackoff.Policy) (gax.CallOption, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	p.Codes = append([]codes.Code(nil), p.Codes...)
	mark := &cloudclients.ClientRetry{MaxPause: time.Duration(float64(p.Max) * (1 + p.JitterFactor))}
	for _, c := range p.Codes {
		mark.Codes |= 1 << c
	}
	return callOption{retry: func() gax.Retryer { return &retryer{p: &p} }, mark: mark}, nil
}

// callOption is CallOption's gax.CallOption: a gax.WithRetry, and a mark
// added to the call's gRPC options.
type callOption struct {
	retry func() gax.Retryer
	mark  *cloudclients.ClientRetry
}

func (o callOption) Resolve(s *gax.CallSettings) {
	gax.WithRetry(o.retry).Resolve(s)
	s.GRPC = append(s.GRPC[:len(s.GRPC):len(s.GRPC)], o.mark) // never into the caller's array
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
