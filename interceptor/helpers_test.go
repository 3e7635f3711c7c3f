package interceptor_test

// Helpers shared by the test files of the package: the kinds of call and how
// to run one against a TestService, the Policy with exact delays, the checks
// of times and final errors, the fake unary invoker (script), and the
// recorders of what the interceptors did (recorder, attemptLog).

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/platformkit/grpcbackoff/internal/bufconntest"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
)

// callKind is a kind of call, named after the interop method that has it:
// unary, or one of the three kinds of stream.
type callKind int

const (
	unary        callKind = iota // UnaryCall
	serverStream                 // StreamingOutputCall: one request, many responses
	clientStream                 // StreamingInputCall: many requests, one response
	bidi                         // FullDuplexCall
)

// streamKinds are the three kinds of stream.
var streamKinds = []callKind{serverStream, clientStream, bidi}

func (k callKind) String() string {
	return [...]string{"unary", "server", "client", "bidi"}[k]
}

// callResult is what the caller of one call saw.
type callResult struct {
	Opened      bool        // the call was made (for a stream: created)
	Got         []string    // responses received, in order (a client stream's is its count)
	Err         error       // the error that ended the call; nil for a clean end
	SendErrs    []error     // errors returned by Send and CloseSend
	Header      metadata.MD // what Header returned before the first receive, if asked
	HeaderAfter metadata.MD // what Header returned after the end (streams)
	Trailer     metadata.MD // what Trailer returned after the end (streams)
	End         time.Time   // when the call ended for the caller
}

// howToRun says how runCall drives a call.
type howToRun struct {
	// Header calls Header before the first receive (streams).
	Header bool
	// Pace, if set, says after which sends (numbered from 0) to wait until
	// every other goroutine of the bubble is blocked (synctest.Wait), so that
	// the server acts between sends. At most one goroutine of a bubble may
	// use it at a time.
	Pace func(i int) bool
	// Received, if set, is called after each response the caller receives.
	Received func()
}

func (h howToRun) pace(i int) {
	if h.Pace != nil && h.Pace(i) {
		synctest.Wait()
	}
}

func (h howToRun) received() {
	if h.Received != nil {
		h.Received()
	}
}

// runCall makes one call of kind k on c, with opts. A unary call and a
// server stream send msgs[0] (an empty message if msgs is empty) as their
// request; client and bidi streams send msgs, stopping at the first error,
// and half-close. It then receives until the call ends.
func runCall(ctx context.Context, c testgrpc.TestServiceClient, k callKind, msgs []string, how howToRun, opts ...grpc.CallOption) (r callResult) {
	defer func() { r.End = time.Now() }()
	var first *testgrpc.Payload
	if len(msgs) > 0 {
		first = &testgrpc.Payload{Body: []byte(msgs[0])}
	}
	var cs grpc.ClientStream
	var recv func() (string, error)
	switch k {
	case unary:
		resp, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{Payload: first}, opts...)
		r.Opened = true
		if err != nil {
			r.Err = err
			return r
		}
		r.Got = []string{string(resp.GetPayload().GetBody())}
		how.received()
		return r
	case serverStream:
		s, err := c.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{Payload: first}, opts...)
		if err != nil {
			r.Err = err
			return r
		}
		cs = s
		recv = func() (string, error) {
			m, err := s.Recv()
			return string(m.GetPayload().GetBody()), err
		}
	case clientStream:
		s, err := c.StreamingInputCall(ctx, opts...)
		if err != nil {
			r.Err = err
			return r
		}
		cs = s
		for i, m := range msgs {
			if err := s.Send(inputRequest(m)); err != nil {
				r.SendErrs = append(r.SendErrs, err)
				break // io.EOF: CloseAndRecv tells why
			}
			how.pace(i)
		}
		done := false
		recv = func() (string, error) {
			if done {
				return "", io.EOF
			}
			done = true
			m, err := s.CloseAndRecv()
			return strconv.Itoa(int(m.GetAggregatedPayloadSize())), err
		}
	case bidi:
		s, err := c.FullDuplexCall(ctx, opts...)
		if err != nil {
			r.Err = err
			return r
		}
		cs = s
		for i, m := range msgs {
			if err := s.Send(outputRequest(m)); err != nil {
				r.SendErrs = append(r.SendErrs, err)
				break // io.EOF: Recv tells why
			}
			how.pace(i)
		}
		if err := s.CloseSend(); err != nil {
			r.SendErrs = append(r.SendErrs, err)
		}
		recv = func() (string, error) {
			m, err := s.Recv()
			return string(m.GetPayload().GetBody()), err
		}
	}
	r.Opened = true
	if how.Header {
		r.Header, _ = cs.Header()
	}
	for {
		m, err := recv()
		if err != nil {
			if err != io.EOF {
				r.Err = err
			}
			r.Trailer = cs.Trailer()
			r.HeaderAfter, _ = cs.Header()
			return r
		}
		r.Got = append(r.Got, m)
		how.received()
	}
}

// hang waits until ctx ends, as a server that never answers would, and
// returns the status of its end (DEADLINE_EXCEEDED or CANCELED).
func hang(ctx context.Context) error {
	<-ctx.Done()
	return status.FromContextError(ctx.Err()).Err()
}

// outputRequest is a request of a server or bidi stream with body.
func outputRequest(body string) *testgrpc.StreamingOutputCallRequest {
	return &testgrpc.StreamingOutputCallRequest{Payload: &testgrpc.Payload{Body: []byte(body)}}
}

// inputRequest is a request of a client stream with body.
func inputRequest(body string) *testgrpc.StreamingInputCallRequest {
	return &testgrpc.StreamingInputCallRequest{Payload: &testgrpc.Payload{Body: []byte(body)}}
}

// checkFinal checks that err is a *grpcbackoff.Error with the given code,
// attempts and reason.
func checkFinal(t *testing.T, err error, code codes.Code, attempts int, why grpcbackoff.Reason) {
	t.Helper()
	if got := status.Code(err); got != code {
		t.Errorf("status.Code(err) = %v, want %v (err %v)", got, code, err)
	}
	var e *grpcbackoff.Error
	if !errors.As(err, &e) {
		t.Errorf("err = %v (%T), want a *grpcbackoff.Error", err, err)
		return
	}
	if e.Attempts != attempts || e.Reason != why {
		t.Errorf("Attempts, Reason = %d, %v; want %d, %v", e.Attempts, e.Reason, attempts, why)
	}
}

// script is a fake invoker: attempt i (from 0) returns errs[i], or nil past
// the end. It records when each attempt started and its outgoing metadata.
// As grpc-go does for an attempt that made a transport stream, it writes the
// targets of the attempt's grpc.Header (nil for a failure: a trailers-only
// response), grpc.Trailer (trailers[i], if set) and grpc.Peer options;
// for an error wrapped in neverSent it writes none, as grpc-go does not
// when it found no connection to send on. Either way it runs the attempt's
// grpc.OnFinish functions, as grpc-go does for every call.
type script struct {
	errs     []error
	trailers []metadata.MD // trailers[i] is set as attempt i's trailer
	times    []time.Time
	md       []metadata.MD
	opts     [][]grpc.CallOption
}

// neverSent is the error of a scripted attempt that made no transport
// stream (see script).
type neverSent struct{ error }

// scriptPeer is the peer script writes for an attempt that was sent.
var scriptPeer = peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 443}}

func (s *script) invoke(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
	i := len(s.times)
	s.times = append(s.times, time.Now())
	md, _ := metadata.FromOutgoingContext(ctx)
	s.md = append(s.md, md)
	s.opts = append(s.opts, slices.Clone(opts))
	var err error
	if i < len(s.errs) {
		err = s.errs[i]
	}
	defer func() {
		for _, o := range opts {
			if o, ok := o.(grpc.OnFinishCallOption); ok {
				o.OnFinish(err)
			}
		}
	}()
	if ns, ok := err.(neverSent); ok {
		err = ns.error
		return err
	}
	header := metadata.Pairs("content-type", "application/grpc")
	tr := metadata.MD{}
	if i < len(s.trailers) {
		tr = s.trailers[i]
	}
	if err != nil {
		// A failure without headers: grpc-go puts the trailers-only
		// response's content-type in its trailer.
		header, tr = nil, metadata.Join(tr, metadata.Pairs("content-type", "application/grpc"))
	}
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			*o.HeaderAddr = header
		case grpc.TrailerCallOption:
			*o.TrailerAddr = tr
		case grpc.PeerCallOption:
			*o.PeerAddr = scriptPeer
		}
	}
	return err
}

// gaps returns the time between consecutive attempts.
func (s *script) gaps() []time.Duration {
	return bufconntest.Gaps(s.times)
}

// call makes a call of /pkg.Svc/Get through the unary interceptor ic, with
// s as the invoker.
func call(ctx context.Context, t *testing.T, ic grpc.UnaryClientInterceptor, s *script, opts ...grpc.CallOption) error {
	t.Helper()
	return ic(ctx, "/pkg.Svc/Get", "req", new(string), nil, s.invoke, opts...)
}

// retryInfo is an UNAVAILABLE error with a RetryInfo of d.
func retryInfo(d time.Duration) error {
	st, err := status.New(codes.Unavailable, "busy").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

// opt returns its arguments, a slice of call options.
func opt(o ...grpc.CallOption) []grpc.CallOption { return o }

// recorder is an Observer that keeps what it is told.
type recorder struct {
	mu      sync.Mutex
	retries []interceptor.Retry
	ends    []interceptor.End
}

func (r *recorder) OnRetry(_ context.Context, x interceptor.Retry) {
	r.mu.Lock()
	r.retries = append(r.retries, x)
	r.mu.Unlock()
}

func (r *recorder) OnEnd(_ context.Context, e interceptor.End) {
	r.mu.Lock()
	r.ends = append(r.ends, e)
	r.mu.Unlock()
}

// attemptLog is a client interceptor, installed inside the retrying ones,
// that records when each attempt started and, for unary calls, ended.
type attemptLog struct {
	mu    sync.Mutex
	times []time.Time // when each attempt started
	ends  []time.Time // when each unary attempt ended
}

func (a *attemptLog) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			a.mu.Lock()
			a.times = append(a.times, time.Now())
			a.mu.Unlock()
			err := invoker(ctx, method, req, reply, cc, opts...)
			a.mu.Lock()
			a.ends = append(a.ends, time.Now())
			a.mu.Unlock()
			return err
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			a.mu.Lock()
			a.times = append(a.times, time.Now())
			a.mu.Unlock()
			return streamer(ctx, desc, cc, method, opts...)
		}),
	}
}

// count returns the number of attempts started.
func (a *attemptLog) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.times)
}

// gaps returns the times between the starts of the attempts.
func (a *attemptLog) gaps() []time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return bufconntest.Gaps(a.times)
}
