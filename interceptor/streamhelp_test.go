package interceptor_test

// The helpers of the stream tests (stream_test.go and streamtimeout_test.go):
// the scripted server, what its attempts send and receive, and the checks of
// what it saw.

import (
	"context"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// streamKey is the request metadata that names a stream, so that one server
// can follow many streams at once; streams without it are named "".
const streamKey = "x-stream"

// untilHalfClose, as step.Recv, reads up to the client's half-close.
const untilHalfClose = -1

// step says what the scripted server does in one attempt, in this order:
// send headers, read messages, send responses, end.
type step struct {
	// Header sends response headers, with metadata x-attempt, first.
	Header bool
	// Recv is the number of client messages read before going on, or
	// untilHalfClose. A server stream's request is always read.
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
	// Pause waits, after reading, before sending responses.
	Pause time.Duration
	// RecvEvery waits before reading each message: a slow reader.
	RecvEvery time.Duration
}

// succeed is the step of an attempt that reads everything and answers with n
// responses.
func succeed(n int) step { return step{Recv: untilHalfClose, Send: n} }

// failWith is the step of an attempt that fails with code c at once.
func failWith(c codes.Code) step { return step{Err: status.Error(c, "scripted "+c.String())} }

// serverAttempt is what the server saw of one attempt.
type serverAttempt struct {
	At         time.Time   // when the attempt reached the handler
	MD         metadata.MD // its request metadata
	Msgs       []string    // payload bodies of the messages received, in order
	HalfClosed bool        // whether the client's half-close was received
	Sent       int         // responses sent
	End        time.Time   // when the handler returned
}

// scriptedServer is a TestService whose every attempt follows a script. Start
// it with newScriptedServer; it stops at the end of the test.
type scriptedServer struct {
	testgrpc.UnimplementedTestServiceServer

	script func(stream string, attempt int) step
	dial   func(context.Context) (net.Conn, error)
	srv    *grpc.Server

	mu       sync.Mutex
	attempts map[string][]*serverAttempt
}

// scriptOf returns a script in which attempt n (from 0) of every stream
// follows steps[n], or the last step past the end.
func scriptOf(steps ...step) func(string, int) step {
	return func(_ string, n int) step { return steps[min(n, len(steps)-1)] }
}

// newScriptedServer starts a scripted server on a private bufconn listener. It
// stops the server, after the connections dialled with client, when the test
// ends (inside the synctest bubble when called in one).
func newScriptedServer(tb testing.TB, script func(stream string, attempt int) step, opts ...grpc.ServerOption) *scriptedServer {
	lis := bufconn.Listen(1 << 20)
	return startScripted(tb, script, lis, lis.DialContext, opts)
}

// newScriptedServerTCP is newScriptedServer on a loopback TCP port.
func newScriptedServerTCP(tb testing.TB, script func(stream string, attempt int) step, opts ...grpc.ServerOption) *scriptedServer {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var d net.Dialer
	dial := func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", lis.Addr().String()) }
	return startScripted(tb, script, lis, dial, opts)
}

func startScripted(tb testing.TB, script func(string, int) step, lis net.Listener, dial func(context.Context) (net.Conn, error), opts []grpc.ServerOption) *scriptedServer {
	s := &scriptedServer{
		script:   script,
		dial:     dial,
		srv:      grpc.NewServer(append([]grpc.ServerOption{grpc.WaitForHandlers(true)}, opts...)...),
		attempts: make(map[string][]*serverAttempt),
	}
	testgrpc.RegisterTestServiceServer(s.srv, s)
	bufconntest.Serve(tb, s.srv, lis)
	return s
}

// client dials s with opts; the connection is closed when the test ends.
func (s *scriptedServer) client(tb testing.TB, opts ...grpc.DialOption) testgrpc.TestServiceClient {
	return testgrpc.NewTestServiceClient(bufconntest.Dial(tb, s.dial, opts...))
}

// attemptsOf returns a copy of what the server saw of stream id's attempts.
func (s *scriptedServer) attemptsOf(id string) []serverAttempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []serverAttempt
	for _, a := range s.attempts[id] {
		c := *a
		c.Msgs = slices.Clone(a.Msgs)
		out = append(out, c)
	}
	return out
}

// begin records a new attempt and returns it with its step. Every attempt
// ends with the trailer x-attempt.
func (s *scriptedServer) begin(ss grpc.ServerStream) (*serverAttempt, int, step) {
	ctx := ss.Context()
	md, _ := metadata.FromIncomingContext(ctx)
	id := ""
	if v := md.Get(streamKey); len(v) > 0 {
		id = v[0]
	}
	a := &serverAttempt{At: time.Now(), MD: md}
	s.mu.Lock()
	n := len(s.attempts[id])
	s.attempts[id] = append(s.attempts[id], a)
	s.mu.Unlock()
	ss.SetTrailer(attemptMD(n))
	return a, n, s.script(id, n)
}

func (s *scriptedServer) received(a *serverAttempt, body string) {
	s.mu.Lock()
	a.Msgs = append(a.Msgs, body)
	s.mu.Unlock()
}

// end records the end of attempt a.
func (s *scriptedServer) end(a *serverAttempt) {
	s.mu.Lock()
	a.End = time.Now()
	s.mu.Unlock()
}

func (s *scriptedServer) halfClosed(a *serverAttempt) {
	s.mu.Lock()
	a.HalfClosed = true
	s.mu.Unlock()
}

// respond sends response number a.Sent, with body, or r<number> if body is
// nil.
func (s *scriptedServer) respond(ss grpc.ServerStream, a *serverAttempt, body []byte) error {
	s.mu.Lock()
	n := a.Sent
	a.Sent++
	s.mu.Unlock()
	if body == nil {
		body = []byte("r" + strconv.Itoa(n))
	}
	return ss.SendMsg(outputResponse(string(body)))
}

func attemptMD(n int) metadata.MD { return metadata.Pairs("x-attempt", strconv.Itoa(n)) }

func (s *scriptedServer) StreamingOutputCall(req *testgrpc.StreamingOutputCallRequest, ss grpc.ServerStreamingServer[testgrpc.StreamingOutputCallResponse]) error {
	a, n, step := s.begin(ss)
	defer s.end(a)
	s.received(a, string(req.GetPayload().GetBody()))
	s.halfClosed(a) // a server stream's request comes with the half-close
	if step.Header {
		if err := ss.SendHeader(attemptMD(n)); err != nil {
			return err
		}
	}
	if err := pause(ss.Context(), step.Pause); err != nil {
		return err
	}
	for range step.Send {
		if err := s.respond(ss, a, nil); err != nil {
			return err
		}
	}
	if step.Hang {
		return hang(ss.Context())
	}
	return step.Err
}

// pause waits d, or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
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

// recv reads up to limit messages (untilHalfClose: up to the half-close),
// echoing each if echo (with its body if mirror). It returns io.EOF at the
// half-close.
func (s *scriptedServer) recv(ss grpc.ServerStream, a *serverAttempt, st step, limit int, m interface{ GetPayload() *testgrpc.Payload }) error {
	echo, mirror := st.Echo, st.Mirror
	for i := 0; limit == untilHalfClose || i < limit; i++ {
		if err := pause(ss.Context(), st.RecvEvery); err != nil {
			return err
		}
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

func (s *scriptedServer) StreamingInputCall(ss grpc.ClientStreamingServer[testgrpc.StreamingInputCallRequest, testgrpc.StreamingInputCallResponse]) error {
	a, n, step := s.begin(ss)
	defer s.end(a)
	if step.Header {
		if err := ss.SendHeader(attemptMD(n)); err != nil {
			return err
		}
	}
	err := s.recv(ss, a, step, step.Recv, new(testgrpc.StreamingInputCallRequest))
	if err != nil && err != io.EOF {
		return err
	}
	if step.Hang {
		return hang(ss.Context())
	}
	if step.Err != nil {
		return step.Err
	}
	if err == nil {
		if err := s.recv(ss, a, step, untilHalfClose, new(testgrpc.StreamingInputCallRequest)); err != io.EOF {
			return err
		}
	}
	if err := pause(ss.Context(), step.Pause); err != nil {
		return err
	}
	s.mu.Lock()
	got := len(a.Msgs)
	a.Sent++
	s.mu.Unlock()
	return ss.SendAndClose(&testgrpc.StreamingInputCallResponse{AggregatedPayloadSize: int32(got)})
}

func (s *scriptedServer) FullDuplexCall(ss grpc.BidiStreamingServer[testgrpc.StreamingOutputCallRequest, testgrpc.StreamingOutputCallResponse]) error {
	a, n, step := s.begin(ss)
	defer s.end(a)
	if step.Header {
		if err := ss.SendHeader(attemptMD(n)); err != nil {
			return err
		}
	}
	err := s.recv(ss, a, step, step.Recv, new(testgrpc.StreamingOutputCallRequest))
	if err != nil && err != io.EOF {
		return err
	}
	if err := pause(ss.Context(), step.Pause); err != nil {
		return err
	}
	for range step.Send {
		if err := s.respond(ss, a, nil); err != nil {
			return err
		}
	}
	if step.Hang {
		return hang(ss.Context())
	}
	if step.Err != nil {
		return step.Err
	}
	if err == nil {
		if err := s.recv(ss, a, step, untilHalfClose, new(testgrpc.StreamingOutputCallRequest)); err != io.EOF {
			return err
		}
	}
	return nil
}

// responses returns the responses a successful attempt sends: r0, r1, …
func responses(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "r" + strconv.Itoa(i)
	}
	return out
}

// messages returns n caller messages m0, m1, …
func messages(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "m" + strconv.Itoa(i)
	}
	return out
}

// expectedResponses returns what a caller of kind k that sent msgs receives
// from a successful attempt that sends n responses.
func expectedResponses(k callKind, msgs []string, n int) []string {
	if k == clientStream {
		return []string{strconv.Itoa(len(msgs))}
	}
	return responses(n)
}

// attemptGaps returns the time between consecutive attempts.
func attemptGaps(as []serverAttempt) []time.Duration {
	var starts []time.Time
	for _, a := range as {
		starts = append(starts, a.At)
	}
	return gapsBetween(starts)
}

// callerMessages returns what the caller of a stream of kind k sends.
func callerMessages(k callKind) []string {
	if k == serverStream {
		return []string{"q"}
	}
	return messages(5)
}

// checkAttempts checks what the server saw of a stream whose caller sent
// msgs: every attempt got a prefix of msgs, the last one all of them and the
// half-close (if last), and attempt i was told of its i previous attempts.
func checkAttempts(t *testing.T, as []serverAttempt, msgs []string, lastComplete bool) {
	t.Helper()
	for i, a := range as {
		if len(a.Msgs) > len(msgs) || !slices.Equal(a.Msgs, msgs[:len(a.Msgs)]) {
			t.Errorf("attempt %d received %q, want a prefix of %q", i+1, a.Msgs, msgs)
		}
		want := []string(nil)
		if i > 0 {
			want = []string{strconv.Itoa(i)}
		}
		if got := a.MD.Get(interceptor.PreviousAttemptsKey); !slices.Equal(got, want) {
			t.Errorf("attempt %d: %s = %q, want %q", i+1, interceptor.PreviousAttemptsKey, got, want)
		}
		if got := a.MD.Get("x-user"); len(got) != 1 || got[0] != "kept" {
			t.Errorf("attempt %d: x-user = %q, want the caller's metadata kept", i+1, got)
		}
	}
	if lastComplete && len(as) > 0 {
		last := as[len(as)-1]
		if !slices.Equal(last.Msgs, msgs) || !last.HalfClosed {
			t.Errorf("last attempt received %q (half-closed %v), want %q and the half-close", last.Msgs, last.HalfClosed, msgs)
		}
	}
}

func callerContext(t *testing.T) context.Context {
	return metadata.AppendToOutgoingContext(t.Context(), "x-user", "kept")
}
