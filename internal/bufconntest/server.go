package bufconntest

import (
	"context"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

// StreamKey is the request metadata that names a call, so that one Server
// can number the attempts of many calls at once; calls without it share the
// name "".
const StreamKey = "x-stream"

// AttemptKey is the response header and trailer metadata that carries an
// attempt's number, from 0.
const AttemptKey = "x-attempt"

// UntilHalfClose, as Step.Recv, reads up to the client's half-close.
const UntilHalfClose = -1

// Step says what a Server does in one attempt, in this order: run Before,
// send headers, read messages, pause, send responses, run After, end.
type Step struct {
	// Before, if set, runs first, with the attempt's context: a non-nil
	// error ends the attempt with it (to block, hold, or count attempts).
	Before func(ctx context.Context) error
	// Header sends response headers, with metadata AttemptKey, first.
	Header bool
	// Recv is the number of client messages read before going on, or
	// UntilHalfClose (client and bidi streams; a unary or server-stream
	// request is always read).
	Recv int
	// Echo answers every client message read with a response (bidi only).
	// Mirror makes responses carry the body of what they answer instead of
	// r0, r1, …: a unary call's request, a bidi stream's echoed message; a
	// server stream's responses carry its request's, then /0, /1, …
	Echo, Mirror bool
	// Send is the number of responses sent after reading (server streams,
	// and bidi streams that do not Echo; a unary call's or client stream's
	// only response is sent on success).
	Send int
	// Body, if set, is each response's body, instead of r0, r1, …; Payload,
	// if positive, the size in bytes of a body of x's.
	Body    string
	Payload int
	// Reply, if set, is the response of a call of a method the TestService
	// does not have, instead of an empty message.
	Reply proto.Message
	// Pause waits, after reading, before sending responses.
	Pause time.Duration
	// After, if set, runs once the responses are sent (server and bidi
	// streams), with the attempt's context: a non-nil error ends the
	// attempt with it.
	After func(ctx context.Context) error
	// RecvEvery waits before reading each message: a slow reader.
	RecvEvery time.Duration
	// Discard counts the messages read without keeping their bodies in
	// Attempt.Msgs: for a stream of megabytes.
	Discard bool
	// Err ends the attempt. If nil the attempt succeeds: the server first
	// reads (and echoes) what is left up to the half-close, and a client
	// stream then answers with the number of messages received.
	Err error
	// Hang, instead of Err, waits after reading and sending until the client
	// ends the attempt.
	Hang bool
	// Trailer is added to the attempt's trailer.
	Trailer metadata.MD
}

// Succeed is the Step of an attempt that reads everything and answers with
// n responses (1 for a unary call).
func Succeed(n int) Step { return Step{Recv: UntilHalfClose, Send: n} }

// Fail is the Step of an attempt that fails with err at once.
func Fail(err error) Step { return Step{Err: err} }

// Script says what attempt n (from 0) of call id does.
type Script func(id string, n int) Step

// Steps returns a Script in which attempt n of every call follows steps[n],
// or the last step past the end.
func Steps(steps ...Step) Script {
	return func(_ string, n int) Step { return steps[min(n, len(steps)-1)] }
}

// Attempt is what a Server saw of one attempt.
type Attempt struct {
	Method     string      // the full method name
	N          int         // the attempt's number in its call, from 0
	At         time.Time   // when the attempt reached the handler
	MD         metadata.MD // its request metadata
	Msgs       []string    // payload bodies of the messages received, in order (but with Step.Discard)
	Received   int         // messages received
	HalfClosed bool        // whether the client's half-close was received
	Sent       int         // responses sent
	End        time.Time   // when the handler returned
	Canceled   error       // the attempt's context's error when the handler returned, if any
}

// Server is grpc's interop TestService, whose every attempt follows a
// Script: UnaryCall, and the three kinds of stream. Calls of any other
// method (a service config test's "/google.logging.v2.LoggingServiceV2/…",
// Cloud Redis's GetInstance) are served too, as unary calls answered with
// the step's Reply, or an empty message. Every attempt ends with the
// trailer AttemptKey. It is safe for concurrent use.
type Server struct {
	testgrpc.UnimplementedTestServiceServer

	script Script
	dial   func(context.Context) (net.Conn, error)
	lis    *cutListener
	srv    *grpc.Server

	mu       sync.Mutex
	attempts map[string][]*Attempt
	all      []*Attempt
}

// NewServer starts a Server on a private bufconn listener, with opts. It
// stops when the test ends, after the connections made with Conn (inside
// the synctest bubble when called in one).
func NewServer(tb testing.TB, script Script, opts ...grpc.ServerOption) *Server {
	lis := Listen()
	return start(tb, script, lis, lis.DialContext, opts)
}

// NewServerTCP is NewServer on a loopback TCP port, for the faults of a
// transport: Addr gives it.
func NewServerTCP(tb testing.TB, script Script, opts ...grpc.ServerOption) *Server {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var d net.Dialer
	dial := func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", lis.Addr().String()) }
	return start(tb, script, lis, dial, opts)
}

// NewServerOn is NewServer on lis, a TCP listener: to serve again on the
// address of a Server that was stopped, as a restart does.
func NewServerOn(tb testing.TB, lis net.Listener, script Script, opts ...grpc.ServerOption) *Server {
	var d net.Dialer
	dial := func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", lis.Addr().String()) }
	return start(tb, script, lis, dial, opts)
}

func start(tb testing.TB, script Script, lis net.Listener, dial func(context.Context) (net.Conn, error), opts []grpc.ServerOption) *Server {
	s := &Server{script: script, dial: dial, lis: &cutListener{Listener: lis}, attempts: make(map[string][]*Attempt)}
	s.srv = grpc.NewServer(append([]grpc.ServerOption{grpc.WaitForHandlers(true), grpc.UnknownServiceHandler(s.unknown)}, opts...)...)
	testgrpc.RegisterTestServiceServer(s.srv, s)
	Serve(tb, s.srv, s.lis)
	return s
}

// Addr is the address the Server listens on.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Dialer dials the Server.
func (s *Server) Dialer() func(context.Context) (net.Conn, error) { return s.dial }

// Conn returns a connection to the Server with opts; it is closed when the
// test ends.
func (s *Server) Conn(tb testing.TB, opts ...grpc.DialOption) *grpc.ClientConn {
	return Dial(tb, s.dial, opts...)
}

// Client returns a TestService client on Conn(tb, opts...).
func (s *Server) Client(tb testing.TB, opts ...grpc.DialOption) testgrpc.TestServiceClient {
	return testgrpc.NewTestServiceClient(s.Conn(tb, opts...))
}

// Stop stops the Server at once, as a crash would: connections close and
// calls in flight fail.
func (s *Server) Stop() { s.srv.Stop() }

// Cut closes the server's end of every connection accepted so far, as a
// proxy that drops connections would; the Server goes on serving new ones.
func (s *Server) Cut() { s.lis.cut() }

// cutListener is a listener that can cut every connection it has accepted.
type cutListener struct {
	net.Listener

	mu    sync.Mutex
	conns []net.Conn
}

func (l *cutListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

// cut closes the server's end of every connection accepted so far.
func (l *cutListener) cut() {
	l.mu.Lock()
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// Attempts returns a copy of what the Server saw of call id's attempts.
func (s *Server) Attempts(id string) []Attempt { return s.copies(s.attemptsOf(id)) }

// All returns a copy of what the Server saw of every attempt, in order of
// arrival.
func (s *Server) All() []Attempt {
	s.mu.Lock()
	all := slices.Clone(s.all)
	s.mu.Unlock()
	return s.copies(all)
}

// Count returns the number of attempts that reached the Server.
func (s *Server) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.all)
}

func (s *Server) attemptsOf(id string) []*Attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.attempts[id])
}

func (s *Server) copies(as []*Attempt) []Attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Attempt, 0, len(as))
	for _, a := range as {
		c := *a
		c.Msgs = slices.Clone(a.Msgs)
		out = append(out, c)
	}
	return out
}

// attemptStream is what begin needs of an attempt: a server stream, or a
// unary call's context (unaryStream).
type attemptStream interface {
	Context() context.Context
	SetTrailer(metadata.MD)
	SendHeader(metadata.MD) error
}

// begin records a new attempt of ss, runs its step's Before, sends its
// headers if the step says so, and returns the attempt and its step.
func (s *Server) begin(ss attemptStream) (*Attempt, Step, error) {
	ctx := ss.Context()
	md, _ := metadata.FromIncomingContext(ctx)
	method, _ := grpc.Method(ctx)
	id := ""
	if v := md.Get(StreamKey); len(v) > 0 {
		id = v[0]
	}
	a := &Attempt{Method: method, At: time.Now(), MD: md}
	s.mu.Lock()
	a.N = len(s.attempts[id])
	s.attempts[id] = append(s.attempts[id], a)
	s.all = append(s.all, a)
	s.mu.Unlock()
	st := s.script(id, a.N)
	ss.SetTrailer(metadata.Join(attemptMD(a.N), st.Trailer))
	if st.Before != nil {
		if err := st.Before(ctx); err != nil {
			return a, st, err
		}
	}
	if st.Header {
		if err := ss.SendHeader(attemptMD(a.N)); err != nil {
			return a, st, err
		}
	}
	return a, st, nil
}

// end records the end of attempt a in ctx.
func (s *Server) end(ctx context.Context, a *Attempt) {
	s.mu.Lock()
	a.End = time.Now()
	a.Canceled = ctx.Err()
	s.mu.Unlock()
}

// received counts a message of a, and keeps its body unless discard.
func (s *Server) received(a *Attempt, body []byte, discard bool) {
	s.mu.Lock()
	a.Received++
	if !discard {
		a.Msgs = append(a.Msgs, string(body))
	}
	s.mu.Unlock()
}

func (s *Server) halfClosed(a *Attempt) {
	s.mu.Lock()
	a.HalfClosed = true
	s.mu.Unlock()
}

// next counts a response of a, and returns its body: body if not nil, else
// st.Payload bytes, else r<number>.
func (s *Server) next(a *Attempt, st Step, body []byte) []byte {
	s.mu.Lock()
	n := a.Sent
	a.Sent++
	s.mu.Unlock()
	switch {
	case body != nil:
		return body
	case st.Body != "":
		return []byte(st.Body)
	case st.Payload > 0:
		return []byte(strings.Repeat("x", st.Payload))
	}
	return []byte("r" + strconv.Itoa(n))
}

func output(body []byte) *testgrpc.StreamingOutputCallResponse {
	return &testgrpc.StreamingOutputCallResponse{Payload: &testgrpc.Payload{Body: body}}
}

func attemptMD(n int) metadata.MD { return metadata.Pairs(AttemptKey, strconv.Itoa(n)) }

// finish ends an attempt whose work is done as its step says: hanging, with
// its error, or nil.
func finish(ctx context.Context, st Step) error {
	if st.Hang {
		<-ctx.Done()
		return status.FromContextError(ctx.Err()).Err()
	}
	return st.Err
}

// UnaryCall answers as its step says, with one response of the type the
// request asks for. Its response headers carry AttemptKey, sent first if the
// step says Header, else with the response (a failure without Header is
// trailers-only).
func (s *Server) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	a, st, err := s.begin(unaryStream{ctx})
	defer s.end(ctx, a)
	if err != nil {
		return nil, err
	}
	s.received(a, req.GetPayload().GetBody(), st.Discard)
	s.halfClosed(a)
	if err := Pause(ctx, st.Pause); err != nil {
		return nil, err
	}
	if err := finish(ctx, st); err != nil {
		return nil, err
	}
	var body []byte
	if st.Mirror {
		body = req.GetPayload().GetBody()
	}
	if !st.Header {
		_ = grpc.SetHeader(ctx, attemptMD(a.N)) // sent with the response: a failure stays trailers-only
	}
	return &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: s.next(a, st, body), Type: req.GetResponseType()}}, nil
}

// unaryStream is a unary call as an attemptStream.
type unaryStream struct{ ctx context.Context }

func (u unaryStream) Context() context.Context        { return u.ctx }
func (u unaryStream) SetTrailer(md metadata.MD)       { _ = grpc.SetTrailer(u.ctx, md) }
func (u unaryStream) SendHeader(md metadata.MD) error { return grpc.SendHeader(u.ctx, md) }

// unknown serves any other method as a unary call, with the step's Reply or
// an empty response.
func (s *Server) unknown(_ any, ss grpc.ServerStream) error {
	a, st, err := s.begin(ss)
	defer s.end(ss.Context(), a)
	if err != nil {
		return err
	}
	if err := ss.RecvMsg(new(emptypb.Empty)); err != nil {
		return err
	}
	s.halfClosed(a)
	if err := Pause(ss.Context(), st.Pause); err != nil {
		return err
	}
	if err := finish(ss.Context(), st); err != nil {
		return err
	}
	s.next(a, st, nil)
	if st.Reply != nil {
		return ss.SendMsg(st.Reply)
	}
	return ss.SendMsg(new(emptypb.Empty))
}

// StreamingOutputCall reads the request, then sends Send responses.
func (s *Server) StreamingOutputCall(req *testgrpc.StreamingOutputCallRequest, ss grpc.ServerStreamingServer[testgrpc.StreamingOutputCallResponse]) error {
	a, st, err := s.begin(ss)
	defer s.end(ss.Context(), a)
	if err != nil {
		return err
	}
	s.received(a, req.GetPayload().GetBody(), st.Discard)
	s.halfClosed(a) // a server stream's request comes with the half-close
	if err := Pause(ss.Context(), st.Pause); err != nil {
		return err
	}
	for i := range st.Send {
		var body []byte
		if st.Mirror {
			body = []byte(string(req.GetPayload().GetBody()) + "/" + strconv.Itoa(i))
		}
		if err := ss.Send(output(s.next(a, st, body))); err != nil {
			return err
		}
	}
	if err := after(ss.Context(), st); err != nil {
		return err
	}
	return finish(ss.Context(), st)
}

// after runs the step's After, if it has one.
func after(ctx context.Context, st Step) error {
	if st.After == nil {
		return nil
	}
	return st.After(ctx)
}

// Pause waits d, or until ctx ends, with its status.
func Pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// recv reads up to limit messages (UntilHalfClose: up to the half-close),
// echoing each if the step says so. It returns io.EOF at the half-close.
func (s *Server) recv(ss grpc.ServerStream, a *Attempt, st Step, limit int, m interface{ GetPayload() *testgrpc.Payload }) error {
	for i := 0; limit == UntilHalfClose || i < limit; i++ {
		if err := Pause(ss.Context(), st.RecvEvery); err != nil {
			return err
		}
		if err := ss.RecvMsg(m); err == io.EOF {
			s.halfClosed(a)
			return io.EOF
		} else if err != nil {
			return err
		}
		s.received(a, m.GetPayload().GetBody(), st.Discard)
		if st.Echo {
			var body []byte
			if st.Mirror {
				body = m.GetPayload().GetBody()
			}
			if err := ss.SendMsg(output(s.next(a, st, body))); err != nil {
				return err
			}
		}
	}
	return nil
}

// StreamingInputCall reads Recv messages, then, on success, the rest, and
// answers with their number.
func (s *Server) StreamingInputCall(ss grpc.ClientStreamingServer[testgrpc.StreamingInputCallRequest, testgrpc.StreamingInputCallResponse]) error {
	a, st, err := s.begin(ss)
	defer s.end(ss.Context(), a)
	if err != nil {
		return err
	}
	err = s.recv(ss, a, st, st.Recv, new(testgrpc.StreamingInputCallRequest))
	if err != nil && err != io.EOF {
		return err
	}
	if st.Hang || st.Err != nil {
		return finish(ss.Context(), st)
	}
	if err == nil {
		if err := s.recv(ss, a, st, UntilHalfClose, new(testgrpc.StreamingInputCallRequest)); err != io.EOF {
			return err
		}
	}
	if err := Pause(ss.Context(), st.Pause); err != nil {
		return err
	}
	s.mu.Lock()
	got := a.Received
	a.Sent++
	s.mu.Unlock()
	return ss.SendAndClose(&testgrpc.StreamingInputCallResponse{AggregatedPayloadSize: int32(got)})
}

// FullDuplexCall reads Recv messages (echoing them if Echo), then sends Send
// responses, then, on success, reads the rest.
func (s *Server) FullDuplexCall(ss grpc.BidiStreamingServer[testgrpc.StreamingOutputCallRequest, testgrpc.StreamingOutputCallResponse]) error {
	a, st, err := s.begin(ss)
	defer s.end(ss.Context(), a)
	if err != nil {
		return err
	}
	err = s.recv(ss, a, st, st.Recv, new(testgrpc.StreamingOutputCallRequest))
	if err != nil && err != io.EOF {
		return err
	}
	if err := Pause(ss.Context(), st.Pause); err != nil {
		return err
	}
	for i := 0; i < st.Send && !st.Echo; i++ {
		if err := ss.Send(output(s.next(a, st, nil))); err != nil {
			return err
		}
	}
	if err := after(ss.Context(), st); err != nil {
		return err
	}
	if st.Hang || st.Err != nil {
		return finish(ss.Context(), st)
	}
	if err == nil {
		if err := s.recv(ss, a, st, UntilHalfClose, new(testgrpc.StreamingOutputCallRequest)); err != io.EOF {
			return err
		}
	}
	return nil
}
