package interceptor_test

// The scripted server and client helpers of stream_test.go and
// stream_bench_test.go. Names start with "st" so that they cannot collide with
// the helpers of other test files.

import (
	"context"
	"errors"
	"io"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// stKind is the kind of a stream, named after the interop method that has it.
type stKind int

const (
	stServerStream stKind = iota // StreamingOutputCall: one request, many responses
	stClientStream               // StreamingInputCall: many requests, one response
	stBidi                       // FullDuplexCall
)

var stKinds = []stKind{stServerStream, stClientStream, stBidi}

func (k stKind) String() string {
	return [...]string{"server", "client", "bidi"}[k]
}

// stStreamKey is the request metadata that names a stream, so that one server
// can follow many streams at once; streams without it are named "".
const stStreamKey = "x-stream"

// stAll, as stStep.Recv, reads up to the client's half-close.
const stAll = -1

// stStep says what the scripted server does in one attempt, in this order:
// send headers, read messages, send responses, end.
type stStep struct {
	// Header sends response headers, with metadata x-attempt, first.
	Header bool
	// Recv is the number of client messages read before going on, or stAll.
	// A server stream's request is always read.
	Recv int
	// Echo answers every client message read with a response (bidi only).
	Echo bool
	// Mirror makes each echo carry the body of the message it answers,
	// instead of r0, r1, …
	Mirror bool
	// Send is the number of responses sent after reading (server and bidi
	// streams; a client stream's only response is sent on success).
	Send int
	// Err ends the attempt. If nil the attempt succeeds: the server first
	// reads (and echoes) what is left up to the half-close, and a client
	// stream then answers with the number of messages received.
	Err error
	// Hang, instead of Err, waits after reading and sending until the client
	// ends the attempt.
	Hang bool
}

// stOK is the step of an attempt that reads everything and answers with n
// responses.
func stOK(n int) stStep { return stStep{Recv: stAll, Send: n} }

// stFail is the step of an attempt that fails with code c at once.
func stFail(c codes.Code) stStep { return stStep{Err: status.Error(c, "scripted "+c.String())} }

// stAttempt is what the server saw of one attempt.
type stAttempt struct {
	At         time.Time   // when the attempt reached the handler
	MD         metadata.MD // its request metadata
	Msgs       []string    // payload bodies of the messages received, in order
	HalfClosed bool        // whether the client's half-close was received
	Sent       int         // responses sent
	End        time.Time   // when the handler returned
}

// stServer is a TestService whose every attempt follows a script. Start it
// with newStServer; it stops at the end of the test.
type stServer struct {
	testgrpc.UnimplementedTestServiceServer

	script func(stream string, attempt int) stStep
	lis    *bufconn.Listener
	srv    *grpc.Server

	mu       sync.Mutex
	attempts map[string][]*stAttempt
}

// stScript returns a script in which attempt n (from 0) of every stream
// follows steps[n], or the last step past the end.
func stScript(steps ...stStep) func(string, int) stStep {
	return func(_ string, n int) stStep { return steps[min(n, len(steps)-1)] }
}

// newStServer starts a scripted server on a private bufconn listener. It
// stops the server, after the connections dialled with client, when the test
// ends (inside the synctest bubble when called in one).
func newStServer(tb testing.TB, script func(stream string, attempt int) stStep) *stServer {
	s := &stServer{
		script:   script,
		lis:      bufconn.Listen(1 << 20),
		srv:      grpc.NewServer(grpc.WaitForHandlers(true)),
		attempts: make(map[string][]*stAttempt),
	}
	testgrpc.RegisterTestServiceServer(s.srv, s)
	bufconntest.Serve(tb, s.srv, s.lis)
	return s
}

// client dials s with opts; the connection is closed when the test ends.
func (s *stServer) client(tb testing.TB, opts ...grpc.DialOption) testgrpc.TestServiceClient {
	return testgrpc.NewTestServiceClient(bufconntest.Dial(tb, s.lis.DialContext, opts...))
}

// attemptsOf returns a copy of what the server saw of stream id's attempts.
func (s *stServer) attemptsOf(id string) []stAttempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []stAttempt
	for _, a := range s.attempts[id] {
		c := *a
		c.Msgs = slices.Clone(a.Msgs)
		out = append(out, c)
	}
	return out
}

// begin records a new attempt and returns it with its step. Every attempt
// ends with the trailer x-attempt.
func (s *stServer) begin(ss grpc.ServerStream) (*stAttempt, int, stStep) {
	ctx := ss.Context()
	md, _ := metadata.FromIncomingContext(ctx)
	id := ""
	if v := md.Get(stStreamKey); len(v) > 0 {
		id = v[0]
	}
	a := &stAttempt{At: time.Now(), MD: md}
	s.mu.Lock()
	n := len(s.attempts[id])
	s.attempts[id] = append(s.attempts[id], a)
	s.mu.Unlock()
	ss.SetTrailer(stAttemptHeader(n))
	return a, n, s.script(id, n)
}

func (s *stServer) received(a *stAttempt, body string) {
	s.mu.Lock()
	a.Msgs = append(a.Msgs, body)
	s.mu.Unlock()
}

// end records the end of attempt a.
func (s *stServer) end(a *stAttempt) {
	s.mu.Lock()
	a.End = time.Now()
	s.mu.Unlock()
}

// hang waits until the client ends the attempt.
func hang(ss grpc.ServerStream) error {
	<-ss.Context().Done()
	return status.FromContextError(ss.Context().Err()).Err()
}

func (s *stServer) halfClosed(a *stAttempt) {
	s.mu.Lock()
	a.HalfClosed = true
	s.mu.Unlock()
}

// respond sends response number a.Sent, with body, or r<number> if body is
// nil.
func (s *stServer) respond(ss grpc.ServerStream, a *stAttempt, body []byte) error {
	s.mu.Lock()
	n := a.Sent
	a.Sent++
	s.mu.Unlock()
	if body == nil {
		body = []byte("r" + strconv.Itoa(n))
	}
	return ss.SendMsg(&testgrpc.StreamingOutputCallResponse{Payload: &testgrpc.Payload{Body: body}})
}

func stAttemptHeader(n int) metadata.MD { return metadata.Pairs("x-attempt", strconv.Itoa(n)) }

func (s *stServer) StreamingOutputCall(req *testgrpc.StreamingOutputCallRequest, ss grpc.ServerStreamingServer[testgrpc.StreamingOutputCallResponse]) error {
	a, n, step := s.begin(ss)
	defer s.end(a)
	s.received(a, string(req.GetPayload().GetBody()))
	s.halfClosed(a) // a server stream's request comes with the half-close
	if step.Header {
		if err := ss.SendHeader(stAttemptHeader(n)); err != nil {
			return err
		}
	}
	for range step.Send {
		if err := s.respond(ss, a, nil); err != nil {
			return err
		}
	}
	if step.Hang {
		return hang(ss)
	}
	return step.Err
}

// recv reads up to limit messages (stAll: up to the half-close), echoing each
// if echo (with its body if mirror). It returns io.EOF at the half-close.
func (s *stServer) recv(ss grpc.ServerStream, a *stAttempt, limit int, echo, mirror bool, m interface{ GetPayload() *testgrpc.Payload }) error {
	for i := 0; limit == stAll || i < limit; i++ {
		if err := ss.RecvMsg(m); err == io.EOF {
			s.halfClosed(a)
			return io.EOF
		} else if err != nil {
			return err
		}
		s.received(a, string(m.GetPayload().GetBody()))
		if echo {
			var body []byte
			if mirror {
				body = m.GetPayload().GetBody()
			}
			if err := s.respond(ss, a, body); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *stServer) StreamingInputCall(ss grpc.ClientStreamingServer[testgrpc.StreamingInputCallRequest, testgrpc.StreamingInputCallResponse]) error {
	a, n, step := s.begin(ss)
	defer s.end(a)
	if step.Header {
		if err := ss.SendHeader(stAttemptHeader(n)); err != nil {
			return err
		}
	}
	err := s.recv(ss, a, step.Recv, false, false, new(testgrpc.StreamingInputCallRequest))
	if err != nil && err != io.EOF {
		return err
	}
	if step.Hang {
		return hang(ss)
	}
	if step.Err != nil {
		return step.Err
	}
	if err == nil {
		if err := s.recv(ss, a, stAll, false, false, new(testgrpc.StreamingInputCallRequest)); err != io.EOF {
			return err
		}
	}
	s.mu.Lock()
	got := len(a.Msgs)
	a.Sent++
	s.mu.Unlock()
	return ss.SendAndClose(&testgrpc.StreamingInputCallResponse{AggregatedPayloadSize: int32(got)})
}

func (s *stServer) FullDuplexCall(ss grpc.BidiStreamingServer[testgrpc.StreamingOutputCallRequest, testgrpc.StreamingOutputCallResponse]) error {
	a, n, step := s.begin(ss)
	defer s.end(a)
	if step.Header {
		if err := ss.SendHeader(stAttemptHeader(n)); err != nil {
			return err
		}
	}
	err := s.recv(ss, a, step.Recv, step.Echo, step.Mirror, new(testgrpc.StreamingOutputCallRequest))
	if err != nil && err != io.EOF {
		return err
	}
	for range step.Send {
		if err := s.respond(ss, a, nil); err != nil {
			return err
		}
	}
	if step.Hang {
		return hang(ss)
	}
	if step.Err != nil {
		return step.Err
	}
	if err == nil {
		if err := s.recv(ss, a, stAll, step.Echo, step.Mirror, new(testgrpc.StreamingOutputCallRequest)); err != io.EOF {
			return err
		}
	}
	return nil
}

// stResponses returns the responses a successful attempt sends: r0, r1, …
func stResponses(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "r" + strconv.Itoa(i)
	}
	return out
}

// stMessages returns n caller messages m0, m1, …
func stMessages(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "m" + strconv.Itoa(i)
	}
	return out
}

// stResult is what the caller of one stream saw.
type stResult struct {
	Opened      bool        // the stream was created
	Got         []string    // responses received, in order (a client stream's is its count)
	Err         error       // the error that ended the stream; nil for a clean end
	SendErrs    []error     // errors returned by Send and CloseSend
	Header      metadata.MD // what Header returned before the first receive, if asked
	HeaderAfter metadata.MD // what Header returned after the end
	Trailer     metadata.MD
	End         time.Time // when the stream ended for the caller
}

// stHow says how stRun drives a stream.
type stHow struct {
	// Header calls Header before the first receive.
	Header bool
	// Pace, if set, says after which sends (numbered from 0) to wait until
	// every other goroutine of the bubble is blocked (synctest.Wait), so that
	// the server acts between sends. At most one goroutine of a bubble may
	// use it at a time.
	Pace func(i int) bool
}

func (h stHow) pace(i int) {
	if h.Pace != nil && h.Pace(i) {
		synctest.Wait()
	}
}

// stRun runs one stream of kind k on c: it sends msgs (a server stream sends
// msgs[0] as its request), half-closes, then receives until the stream ends.
func stRun(ctx context.Context, c testgrpc.TestServiceClient, k stKind, msgs []string, how stHow, opts ...grpc.CallOption) (r stResult) {
	defer func() { r.End = time.Now() }()
	var cs grpc.ClientStream
	var recv func() (string, error)
	switch k {
	case stServerStream:
		s, err := c.StreamingOutputCall(ctx, stOutReq(msgs[0]), opts...)
		if err != nil {
			r.Err = err
			return r
		}
		cs = s
		recv = func() (string, error) {
			m, err := s.Recv()
			return string(m.GetPayload().GetBody()), err
		}
	case stClientStream:
		s, err := c.StreamingInputCall(ctx, opts...)
		if err != nil {
			r.Err = err
			return r
		}
		cs = s
		for i, m := range msgs {
			if err := s.Send(stInReq(m)); err != nil {
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
	case stBidi:
		s, err := c.FullDuplexCall(ctx, opts...)
		if err != nil {
			r.Err = err
			return r
		}
		cs = s
		for i, m := range msgs {
			if err := s.Send(stOutReq(m)); err != nil {
				r.SendErrs = append(r.SendErrs, err)
				break
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
	}
}

func stOutReq(body string) *testgrpc.StreamingOutputCallRequest {
	return &testgrpc.StreamingOutputCallRequest{Payload: &testgrpc.Payload{Body: []byte(body)}}
}

func stInReq(body string) *testgrpc.StreamingInputCallRequest {
	return &testgrpc.StreamingInputCallRequest{Payload: &testgrpc.Payload{Body: []byte(body)}}
}

// stExpected returns what a caller of kind k that sent msgs receives from a
// successful attempt that sends n responses.
func stExpected(k stKind, msgs []string, n int) []string {
	if k == stClientStream {
		return []string{strconv.Itoa(len(msgs))}
	}
	return stResponses(n)
}

// stPolicy is a Policy with exact delays: 1 s, 2 s, 4 s, … up to 32 s.
func stPolicy() grpcbackoff.Policy {
	return grpcbackoff.Policy{
		Initial:     time.Second,
		Multiplier:  2,
		Max:         32 * time.Second,
		Jitter:      0,
		MaxAttempts: 8,
		Codes:       []codes.Code{codes.Unavailable, codes.ResourceExhausted},
	}
}

// stFailOpen is a stream interceptor, chained after the retrying one, that
// fails the first n stream creations with err. It records when each creation
// was asked for.
type stFailOpen struct {
	n   int
	err error

	mu    sync.Mutex
	calls []time.Time
}

func (f *stFailOpen) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	f.mu.Lock()
	f.calls = append(f.calls, time.Now())
	i := len(f.calls)
	f.mu.Unlock()
	if i <= f.n {
		return nil, f.err
	}
	return streamer(ctx, desc, cc, method, opts...)
}

// stGaps returns the time between consecutive attempts.
func stGaps(as []stAttempt) []time.Duration {
	var g []time.Duration
	for i := 1; i < len(as); i++ {
		g = append(g, as[i].At.Sub(as[i-1].At))
	}
	return g
}

// stSeconds returns the durations of secs seconds.
func stSeconds(secs ...float64) []time.Duration {
	var out []time.Duration
	for _, s := range secs {
		out = append(out, time.Duration(s*float64(time.Second)))
	}
	return out
}

// stCheckFinal checks that err is a *grpcbackoff.Error with the given code,
// attempts and reason.
func stCheckFinal(t *testing.T, err error, code codes.Code, attempts int, why grpcbackoff.Reason) {
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
