package cloudclients

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff/internal/attempt"
)

// The rule the interceptors follow for a Google Cloud client's call: for a
// code the client retries for the method (Lookup's Rule), the Retrier
// makes one attempt and hands the error back (ReasonClientRetries); it
// retries every other code of its Policy itself. Learn finds, at a call's
// first failure, what its client leaves to itself; Leaves applies it to a
// failure.

// CodeSet is a set of codes, bit 1<<code.
type CodeSet uint32

// Has reports whether c is in s.
func (s CodeSet) Has(c codes.Code) bool { return c < 32 && s&(1<<c) != 0 }

// List returns the codes of s, in order.
func (s CodeSet) List() []codes.Code {
	var cs []codes.Code
	for c := codes.Code(0); c < 32; c++ {
		if s.Has(c) {
			cs = append(cs, c)
		}
	}
	return cs
}

// Client is what a call's plan knows of the Google Cloud client that makes
// it, learnt at the first failure (a call that succeeds never asks).
type Client struct {
	Learnt  bool
	Google  bool    // the call is a Google Cloud client's (or an adopted one's)
	Codes   CodeSet // the codes left to the client
	Hinted  CodeSet // the codes left to the client when the error carries RetryInfo
	Opening bool    // the client retries only a stream's opening
	// Resends are the codes after which the client may send the call again
	// (those it retries; every code when the data does not know the
	// method), and Pause the longest it waits before it does: what the
	// Memory of its call needs.
	Resends CodeSet
	Pause   time.Duration
	// HandedOver: the client handed its retries over (gaxretry.Adopt); its
	// Retryer says when it will not send the call again (Decline).
	HandedOver bool
	// PerCall, for an adopted call whose gax Retryer a per-call
	// gax.WithRetry replaced, reports whether that Retryer retries err:
	// such an error is left to it (HandedOver.Retries).
	PerCall func(err error) bool
}

// everyCode is every code but OK.
const everyCode CodeSet = 1<<17 - 2

// gaxMaxPause is gax.Backoff's default Max: the longest pause of a gax
// Retryer whose backoff is not known.
const gaxMaxPause = 30 * time.Second

// Learn returns what is known of the Google Cloud client that makes a call
// of method with ctx, opts and req (nil for a stream) on a ClientConn whose
// calls serve api (nil: not known yet): whether it is a Google Cloud
// client's, and which codes its client retries. A call marked by
// gaxretry.Adopt (HandedOver) is the Retrier's for every code; one marked
// by gaxretry.CallOption (ClientRetry) leaves to its gax Retryer the codes
// it retries.
func Learn(ctx context.Context, method string, opts []grpc.CallOption, api *API, req any) Client {
	cl := Client{Learnt: true}
	var handedOver *HandedOver
	var marked *ClientRetry
	for _, o := range opts {
		switch o := o.(type) {
		case *HandedOver:
			handedOver = o
		case *ClientRetry:
			marked = o
		}
	}
	c := Call{Method: method, Stream: req == nil}
	if vs := metadata.ValueFromOutgoingContext(ctx, Header); len(vs) > 0 {
		c.Header = vs[0]
	}
	if api != nil {
		c.API, c.APIGapic = api.Service, api.Gapic
	}
	rl := Lookup(c)
	if rl.Google {
		cl = Client{Learnt: true, Google: true, Codes: CodeSet(rl.Codes), Hinted: CodeSet(rl.Hinted), Opening: rl.Opening,
			Resends: CodeSet(rl.Codes | rl.Hinted | rl.ExactlyOnce), Pause: rl.Pause}
		if !rl.Known {
			cl.Resends = everyCode
		}
		if rl.ExactlyOnce != 0 && ExactlyOnce(req) {
			cl.Codes |= CodeSet(rl.ExactlyOnce)
		}
	}
	if marked != nil {
		cl.Google = true
		cl.Codes |= CodeSet(marked.Codes)
		cl.Resends |= CodeSet(marked.Codes)
		cl.Pause = max(cl.Pause, marked.MaxPause)
	}
	if handedOver != nil {
		// A per-call gax.WithRetry replaces Adopt's Retryer and may resend
		// the call after any code, with gax's pauses (30 s at most by
		// default): what it retries is left to it (PerCall); Adopt's own
		// Retryer says when it will not (Decline).
		cl.Google, cl.HandedOver, cl.PerCall = true, true, handedOver.Retries
		cl.Codes, cl.Hinted, cl.Opening = 0, 0, false
		cl.Resends, cl.Pause = everyCode, max(cl.Pause, gaxMaxPause)
	}
	return cl
}

// APIOf returns the API that a call of method on ctx tells, or nil for a
// mixin's call, which tells none. It allocates.
func APIOf(ctx context.Context, method string) *API {
	if IsMixin(method) {
		return nil
	}
	service, _, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	a := &API{Service: service}
	if vs := metadata.ValueFromOutgoingContext(ctx, Header); len(vs) > 0 {
		for f := range strings.FieldsSeq(vs[0]) {
			if v, ok := strings.CutPrefix(f, "gapic/"); ok {
				a.Gapic = v
				break
			}
		}
	}
	return a
}

// Leaves reports whether a failure with st is the client's to retry: its
// code is one the client retries (or, with RetryInfo, one it retries then),
// at a stream's opening (atOpening), or anywhere for a unary call or a
// stream the client retries whole; or, for an adopted call, one its
// per-call gax Retryer retries (PerCall).
func (c Client) Leaves(st *status.Status, atOpening bool) bool {
	code := st.Code()
	left := c.Codes.Has(code) || c.Hinted.Has(code) && attempt.HasRetryInfo(st)
	if !left && c.PerCall != nil && code != 0 {
		left = c.PerCall(st.Err())
	}
	return left && (atOpening || !c.Opening)
}
