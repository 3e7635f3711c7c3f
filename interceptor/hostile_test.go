package interceptor_test

// Hostile and broken servers. A retry library sits on every call a service
// makes, so whatever the server does, a call must end within the caller's
// deadline and MaxAttempts, leave no goroutine behind and keep its memory
// bounded. Every case runs over bufconn inside a synctest bubble: delays are
// checked exactly on the fake clock, and a goroutine left behind fails the
// test (the bubble will not end).

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// hsDeadline is the deadline every hostile call gets.
const hsDeadline = 30 * time.Second

// hsPolicy is the Policy of the hostile tests: exact waits of 1, 2, 4 and
// 8 s between five attempts, 15 s in all, well within hsDeadline.
func hsPolicy() grpcbackoff.Policy {
	return grpcbackoff.Policy{
		Initial:     time.Second,
		Multiplier:  2,
		Max:         8 * time.Second,
		Jitter:      0,
		MaxAttempts: 5,
		Codes:       []codes.Code{codes.Unavailable, codes.ResourceExhausted},
	}
}

// hsKind is a kind of call: unary, or one of the three kinds of stream.
type hsKind int

const (
	hsUnary        hsKind = iota // UnaryCall
	hsServerStream               // StreamingOutputCall: one request, many responses
	hsClientStream               // StreamingInputCall: many requests, one response
	hsBidi                       // FullDuplexCall
)

var (
	hsAllKinds    = []hsKind{hsUnary, hsServerStream, hsClientStream, hsBidi}
	hsStreamKinds = []hsKind{hsServerStream, hsClientStream, hsBidi}
	// hsResponseStreams are the kinds whose server can send a response
	// before the end.
	hsResponseStreams = []hsKind{hsServerStream, hsBidi}
)

func (k hsKind) String() string {
	return [...]string{"unary", "server", "client", "bidi"}[k]
}

// hsMessages are what the caller of a client or bidi stream sends.
var hsMessages = []string{"m0", "m1", "m2"}

// hsSuccess returns what the caller of kind k receives from an attempt that
// succeeds: the unary answer, the two responses of a server stream, the
// number of messages a client stream's server received, and the messages a
// bidi server received, echoed after the half-close.
func hsSuccess(k hsKind) []string {
	switch k {
	case hsUnary:
		return []string{"ok"}
	case hsServerStream:
		return []string{"r0", "r1"}
	case hsClientStream:
		return []string{strconv.Itoa(len(hsMessages))}
	default:
		return hsMessages
	}
}

// hsListener is a bufconn listener that can cut every connection it has
// accepted, as a server that crashes or a proxy that drops connections would.
type hsListener struct {
	*bufconn.Listener

	mu    sync.Mutex
	conns []net.Conn
}

func (l *hsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

// cut closes the server's end of every connection accepted so far.
func (l *hsListener) cut() {
	l.mu.Lock()
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// hsEnv is what a hostile act can do in one attempt.
type hsEnv struct {
	n    int // the attempt, from 0
	s    *hsServer
	send func() error // sends the next response, r0, r1, …; nil for unary calls and client streams
}

// hsAct is what the server does in one attempt, before anything else. It
// returns the error that ends the attempt, or nil to let it succeed.
type hsAct func(ctx context.Context, x hsEnv) error

// hsServer is a TestService whose every attempt first runs an act.
type hsServer struct {
	testgrpc.UnimplementedTestServiceServer

	act hsAct
	lis *hsListener
	srv *grpc.Server

	deliverOnce sync.Once
	delivered   chan struct{} // closed when a caller received a response

	mu       sync.Mutex
	attempts []time.Time
}

// newHsServer starts a server running act on a private bufconn listener; it
// stops when the test ends.
func newHsServer(tb testing.TB, act hsAct) *hsServer {
	s := &hsServer{
		act:       act,
		lis:       &hsListener{Listener: bufconn.Listen(1 << 20)},
		srv:       grpc.NewServer(grpc.WaitForHandlers(true)),
		delivered: make(chan struct{}),
	}
	testgrpc.RegisterTestServiceServer(s.srv, s)
	bufconntest.Serve(tb, s.srv, s.lis)
	return s
}

// conn dials s with opts; the connection is closed when the test ends.
func (s *hsServer) conn(tb testing.TB, opts ...grpc.DialOption) *grpc.ClientConn {
	return bufconntest.Dial(tb, s.lis.DialContext, opts...)
}

// seen returns the number of attempts the server saw.
func (s *hsServer) seen() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.attempts)
}

func (s *hsServer) begin(ctx context.Context, send func() error) error {
	s.mu.Lock()
	n := len(s.attempts)
	s.attempts = append(s.attempts, time.Now())
	s.mu.Unlock()
	return s.act(ctx, hsEnv{n: n, s: s, send: send})
}

// markDelivered records that the caller received a response.
func (s *hsServer) markDelivered() { s.deliverOnce.Do(func() { close(s.delivered) }) }

func hsResponse(body string) *testgrpc.StreamingOutputCallResponse {
	return &testgrpc.StreamingOutputCallResponse{Payload: &testgrpc.Payload{Body: []byte(body)}}
}

// responder returns a function that sends r0, r1, … on ss.
func responder(ss grpc.ServerStream) func() error {
	n := 0
	return func() error {
		n++
		return ss.SendMsg(hsResponse("r" + strconv.Itoa(n-1)))
	}
}

func (s *hsServer) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if err := s.begin(ctx, nil); err != nil {
		return nil, err
	}
	return &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: []byte("ok")}}, nil
}

func (s *hsServer) StreamingOutputCall(_ *testgrpc.StreamingOutputCallRequest, ss grpc.ServerStreamingServer[testgrpc.StreamingOutputCallResponse]) error {
	send := responder(ss)
	if err := s.begin(ss.Context(), send); err != nil {
		return err
	}
	for range 2 {
		if err := send(); err != nil {
			return err
		}
	}
	return nil
}

func (s *hsServer) StreamingInputCall(ss grpc.ClientStreamingServer[testgrpc.StreamingInputCallRequest, testgrpc.StreamingInputCallResponse]) error {
	if err := s.begin(ss.Context(), nil); err != nil {
		return err
	}
	n := 0
	for {
		if _, err := ss.Recv(); err == io.EOF {
			break
		} else if err != nil {
			return err
		}
		n++
	}
	return ss.SendAndClose(&testgrpc.StreamingInputCallResponse{AggregatedPayloadSize: int32(n)})
}

func (s *hsServer) FullDuplexCall(ss grpc.BidiStreamingServer[testgrpc.StreamingOutputCallRequest, testgrpc.StreamingOutputCallResponse]) error {
	if err := s.begin(ss.Context(), responder(ss)); err != nil {
		return err
	}
	var got []string
	for {
		m, err := ss.Recv()
		if err == io.EOF {
			break
		} else if err != nil {
			return err
		}
		got = append(got, string(m.GetPayload().GetBody()))
	}
	for _, m := range got {
		if err := ss.Send(hsResponse(m)); err != nil {
			return err
		}
	}
	return nil
}

// hsResult is what the caller of one call saw.
type hsResult struct {
	got    []string    // responses received, in order
	err    error       // the error that ended the call; nil for a clean end
	header metadata.MD // what Header returned, when asked before receiving
}

// hsRun makes one call of kind k to s: it sends hsMessages (client and bidi
// streams) and half-closes, calls Header first if header, then receives
// until the end, telling s when the first response arrived.
func hsRun(ctx context.Context, s *hsServer, cc *grpc.ClientConn, k hsKind, header bool) (r hsResult) {
	c := testgrpc.NewTestServiceClient(cc)
	if k == hsUnary {
		resp, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		if err != nil {
			return hsResult{err: err}
		}
		return hsResult{got: []string{string(resp.GetPayload().GetBody())}}
	}
	var cs grpc.ClientStream
	var recv func() (string, error)
	switch k {
	case hsServerStream:
		st, err := c.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
		if err != nil {
			return hsResult{err: err}
		}
		cs = st
		recv = func() (string, error) {
			m, err := st.Recv()
			return string(m.GetPayload().GetBody()), err
		}
	case hsClientStream:
		st, err := c.StreamingInputCall(ctx)
		if err != nil {
			return hsResult{err: err}
		}
		cs = st
		for _, m := range hsMessages {
			if st.Send(&testgrpc.StreamingInputCallRequest{Payload: &testgrpc.Payload{Body: []byte(m)}}) != nil {
				break // io.EOF: the receive says why
			}
		}
		done := false
		recv = func() (string, error) {
			if done {
				return "", io.EOF
			}
			done = true
			m, err := st.CloseAndRecv()
			return strconv.Itoa(int(m.GetAggregatedPayloadSize())), err
		}
	case hsBidi:
		st, err := c.FullDuplexCall(ctx)
		if err != nil {
			return hsResult{err: err}
		}
		cs = st
		for _, m := range hsMessages {
			if st.Send(&testgrpc.StreamingOutputCallRequest{Payload: &testgrpc.Payload{Body: []byte(m)}}) != nil {
				break
			}
		}
		st.CloseSend()
		recv = func() (string, error) {
			m, err := st.Recv()
			return string(m.GetPayload().GetBody()), err
		}
	}
	if header {
		r.header, _ = cs.Header()
	}
	for {
		m, err := recv()
		if err != nil {
			if err != io.EOF {
				r.err = err
			}
			return r
		}
		r.got = append(r.got, m)
		s.markDelivered()
	}
}

// hsCounter is a client interceptor, installed inside the retrying ones, that
// records when each attempt started.
type hsCounter struct {
	mu    sync.Mutex
	times []time.Time
}

func (c *hsCounter) record() {
	c.mu.Lock()
	c.times = append(c.times, time.Now())
	c.mu.Unlock()
}

func (c *hsCounter) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			c.record()
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			c.record()
			return streamer(ctx, desc, cc, method, opts...)
		}),
	}
}

// gaps returns the times between the attempts.
func (c *hsCounter) gaps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var g []time.Duration
	for i := 1; i < len(c.times); i++ {
		g = append(g, c.times[i].Sub(c.times[i-1]))
	}
	return g
}

// The acts.

// hsFail fails every attempt with st.
func hsFail(st *spb.Status) hsAct {
	return func(context.Context, hsEnv) error { return status.FromProto(st).Err() }
}

// hsUnavailable returns an UNAVAILABLE status with details.
func hsUnavailable(details ...proto.Message) *spb.Status {
	st := &spb.Status{Code: int32(codes.Unavailable), Message: "hostile"}
	for _, d := range details {
		a, err := anypb.New(d)
		if err != nil {
			panic(err)
		}
		st.Details = append(st.Details, a)
	}
	return st
}

// hsRetryInfo fails every attempt with UNAVAILABLE and a RetryInfo of d.
func hsRetryInfo(d *durationpb.Duration) hsAct {
	return hsFail(hsUnavailable(&errdetails.RetryInfo{RetryDelay: d}))
}

// hsPushback fails every attempt with UNAVAILABLE, the pushback trailer with
// vals and the details.
func hsPushback(vals []string, details ...proto.Message) hsAct {
	return func(ctx context.Context, _ hsEnv) error {
		md := metadata.MD{}
		md[grpcbackoff.PushbackKey] = vals
		if err := grpc.SetTrailer(ctx, md); err != nil {
			return err
		}
		return status.FromProto(hsUnavailable(details...)).Err()
	}
}

// hsHang answers nothing: the attempt ends only at the caller's deadline
// (the server's grpc-timeout and the caller's context both end it).
func hsHang(ctx context.Context, _ hsEnv) error {
	<-ctx.Done()
	return status.FromContextError(ctx.Err()).Err()
}

// hsHeadersFirst sends headers (x-attempt: n), so that the response is not
// trailers-only, then does act.
func hsHeadersFirst(act hsAct) hsAct {
	return func(ctx context.Context, x hsEnv) error {
		if err := grpc.SendHeader(ctx, metadata.Pairs("x-attempt", strconv.Itoa(x.n))); err != nil {
			return err
		}
		return act(ctx, x)
	}
}

// hsHeadersThenFail sends headers, then fails with UNAVAILABLE before any
// message.
var hsHeadersThenFail = hsHeadersFirst(hsFail(&spb.Status{Code: int32(codes.Unavailable), Message: "hostile: headers, then down"}))

// hsCut cuts every connection to the server, as a crash would, and waits
// until the server noticed.
func hsCut(ctx context.Context, x hsEnv) error {
	x.s.lis.cut()
	<-ctx.Done()
	return status.FromContextError(ctx.Err()).Err()
}

// hsStop stops the whole server (listener and connections) for good.
func hsStop(ctx context.Context, x hsEnv) error {
	go x.s.srv.Stop() // Stop waits for this handler
	<-ctx.Done()
	return status.FromContextError(ctx.Err()).Err()
}

// hsAfterFirst sends the first response, waits until the caller received
// it (so the stream committed), then does act.
func hsAfterFirst(act hsAct) hsAct {
	return func(ctx context.Context, x hsEnv) error {
		if err := x.send(); err != nil {
			return err
		}
		select {
		case <-x.s.delivered:
		case <-ctx.Done():
			return ctx.Err()
		}
		return act(ctx, x)
	}
}

// hsFirst does act in the first n attempts, and lets the others succeed.
func hsFirst(n int, act hsAct) hsAct {
	return func(ctx context.Context, x hsEnv) error {
		if x.n < n {
			return act(ctx, x)
		}
		return nil
	}
}

func hsSeconds(s ...float64) []time.Duration {
	d := make([]time.Duration, len(s))
	for i, v := range s {
		d[i] = time.Duration(v * float64(time.Second))
	}
	return d
}

func hsSum(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum
}

const hsYear = 365 * 24 * time.Hour

// hsCase is one hostile behaviour and what it must come to.
type hsCase struct {
	name   string
	kinds  []hsKind // nil: every kind
	act    hsAct
	header bool // the caller calls Header before receiving

	gaps   []time.Duration // between the attempts the client made
	end    time.Duration   // when the call ends, if not after the gaps
	server int             // the attempts the server sees, if not len(gaps)+1
	code   codes.Code
	reason grpcbackoff.Reason // 0: the error, if any, is not a *grpcbackoff.Error
	first  bool               // the caller got the first response, r0, before the error
	check  func(t *testing.T, err error)
}

// exhausted: five attempts at 0, 1, 3, 7 and 15 s.
var hsExhausted = hsSeconds(1, 2, 4, 8)

func hsCases() []hsCase {
	big := strings.Repeat("~", 1<<20)
	var infos []proto.Message
	for i := range 1000 {
		infos = append(infos, &errdetails.ErrorInfo{Reason: "HOSTILE", Domain: "hostile.example.com",
			Metadata: map[string]string{"i": strconv.Itoa(i), "pad": strings.Repeat("p", 64)}})
	}
	return []hsCase{
		{name: "RetryInfo 100 years: not retried", act: hsRetryInfo(durationpb.New(100 * hsYear)),
			code: codes.Unavailable, reason: grpcbackoff.ReasonServerRefused},
		{name: "RetryInfo 10000 years (largest valid, saturates)", act: hsRetryInfo(&durationpb.Duration{Seconds: 315_576_000_000}),
			code: codes.Unavailable, reason: grpcbackoff.ReasonServerRefused},
		{name: "RetryInfo 10^15 s (out of range): not retried", act: hsRetryInfo(&durationpb.Duration{Seconds: 1e15}),
			code: codes.Unavailable, reason: grpcbackoff.ReasonServerRefused},
		{name: "RetryInfo −1 s: ignored", act: hsRetryInfo(durationpb.New(-time.Second)),
			gaps: hsExhausted, code: codes.Unavailable, reason: grpcbackoff.ReasonExhausted},
		{name: "RetryInfo 0 s: backoff", act: hsRetryInfo(durationpb.New(0)),
			gaps: hsExhausted, code: codes.Unavailable, reason: grpcbackoff.ReasonExhausted},
		{name: "RetryInfo invalid (1 s, −1 ns): ignored", act: hsRetryInfo(&durationpb.Duration{Seconds: 1, Nanos: -1}),
			gaps: hsExhausted, code: codes.Unavailable, reason: grpcbackoff.ReasonExhausted},
		{name: "RetryInfo without delay: ignored", act: hsRetryInfo(nil),
			gaps: hsExhausted, code: codes.Unavailable, reason: grpcbackoff.ReasonExhausted},
		{name: "RetryInfo 20 s, over the 8 s Max: waited while the deadline allows", act: hsRetryInfo(durationpb.New(20 * time.Second)),
			gaps: hsSeconds(20), code: codes.Unavailable, reason: grpcbackoff.ReasonDeadline},
		{name: "RetryInfo = Max every time: stops before the deadline", act: hsRetryInfo(durationpb.New(8 * time.Second)),
			gaps: hsSeconds(8, 8, 8), code: codes.Unavailable, reason: grpcbackoff.ReasonDeadline},
		{name: "pushback 0 forever: backoff, not a spin", act: hsPushback([]string{"0"}),
			gaps: hsExhausted, code: codes.Unavailable, reason: grpcbackoff.ReasonExhausted},
		{name: "pushback 0 and RetryInfo 0 forever", act: hsPushback([]string{"0"}, &errdetails.RetryInfo{RetryDelay: durationpb.New(0)}),
			gaps: hsExhausted, code: codes.Unavailable, reason: grpcbackoff.ReasonExhausted},
		{name: "pushback −1: not retried", act: hsPushback([]string{"-1"}),
			code: codes.Unavailable, reason: grpcbackoff.ReasonServerRefused},
		{name: "pushback garbage: not retried", act: hsPushback([]string{"soon"}),
			code: codes.Unavailable, reason: grpcbackoff.ReasonServerRefused},
		{name: "pushback sent twice: not retried", act: hsPushback([]string{"0", "0"}),
			code: codes.Unavailable, reason: grpcbackoff.ReasonServerRefused},
		{name: "pushback 2^70 ms (saturates): not retried", act: hsPushback([]string{"1180591620717411303424"}),
			code: codes.Unavailable, reason: grpcbackoff.ReasonServerRefused},
		{name: "1000 ErrorInfo details: kept", act: hsFail(hsUnavailable(infos...)),
			gaps: hsExhausted, code: codes.Unavailable, reason: grpcbackoff.ReasonExhausted,
			check: func(t *testing.T, err error) {
				if n := len(status.Convert(err).Details()); n != 1000 {
					t.Errorf("len(Details()) = %d, want 1000", n)
				}
			}},
		{name: "1 MiB message: kept", act: hsFail(&spb.Status{Code: int32(codes.Unavailable), Message: big}),
			gaps: hsExhausted, code: codes.Unavailable, reason: grpcbackoff.ReasonExhausted,
			check: func(t *testing.T, err error) {
				if msg := status.Convert(err).Message(); !strings.HasPrefix(msg, big) || !strings.Contains(msg, "5 attempts") {
					t.Errorf("message (%d bytes) = %.40q…, want the server's 1 MiB message and the attempts", len(msg), msg)
				}
			}},
		{name: "headers, then UNAVAILABLE with pushback 3000 ms in the trailer", kinds: hsStreamKinds, act: hsHeadersFirst(hsPushback([]string{"3000"})),
			gaps: hsSeconds(3, 3, 4, 8), code: codes.Unavailable, reason: grpcbackoff.ReasonExhausted},
		{name: "headers, then UNAVAILABLE with RetryInfo 100 years", kinds: hsStreamKinds, act: hsHeadersFirst(hsRetryInfo(durationpb.New(100 * hsYear))),
			code: codes.Unavailable, reason: grpcbackoff.ReasonServerRefused},
		// A unary call commits once headers arrive (gRFC A6): the server's
		// error, unchanged, after one attempt, whatever the trailer says.
		{name: "headers, then UNAVAILABLE with pushback 3000 ms: unary committed", kinds: []hsKind{hsUnary}, act: hsHeadersFirst(hsPushback([]string{"3000"})),
			code: codes.Unavailable},
		{name: "headers, then UNAVAILABLE with RetryInfo 100 years: unary committed", kinds: []hsKind{hsUnary}, act: hsHeadersFirst(hsRetryInfo(durationpb.New(100 * hsYear))),
			code: codes.Unavailable},
		{name: "no answer: the caller's deadline", act: hsHang,
			end: hsDeadline, code: codes.DeadlineExceeded},
		{name: "UNAVAILABLE, then no answer: the caller's deadline", act: func(ctx context.Context, x hsEnv) error {
			if x.n == 0 {
				return status.Error(codes.Unavailable, "hostile")
			}
			return hsHang(ctx, x)
		}, gaps: hsSeconds(1), end: hsDeadline, code: codes.DeadlineExceeded, reason: grpcbackoff.ReasonDeadline},
		{name: "trailers only, twice: retried", act: hsFirst(2, hsFail(hsUnavailable())),
			gaps: hsSeconds(1, 2), code: codes.OK},
		{name: "headers then UNAVAILABLE, twice: retried", kinds: hsStreamKinds, act: hsFirst(2, hsHeadersThenFail),
			gaps: hsSeconds(1, 2), code: codes.OK},
		{name: "headers then UNAVAILABLE forever", kinds: hsStreamKinds, act: hsHeadersThenFail,
			gaps: hsExhausted, code: codes.Unavailable, reason: grpcbackoff.ReasonExhausted},
		{name: "headers then UNAVAILABLE: unary committed", kinds: []hsKind{hsUnary}, act: hsFirst(2, hsHeadersThenFail),
			code: codes.Unavailable},
		{name: "headers then UNAVAILABLE, Header called: committed", kinds: hsStreamKinds, act: hsHeadersThenFail, header: true,
			code: codes.Unavailable},
		{name: "connection cut before any response: retried", act: hsFirst(1, hsCut),
			gaps: hsSeconds(1), code: codes.OK},
		{name: "connection cut before any response, forever", act: hsCut,
			gaps: hsExhausted, code: codes.Unavailable, reason: grpcbackoff.ReasonExhausted},
		{name: "connection cut after the first response: not retried", kinds: hsResponseStreams, act: hsAfterFirst(hsCut),
			code: codes.Unavailable, first: true},
		{name: "server stopped before any response", act: hsStop,
			gaps: hsExhausted, server: 1, code: codes.Unavailable, reason: grpcbackoff.ReasonExhausted},
		{name: "server stopped after the first response: not retried", kinds: hsResponseStreams, act: hsAfterFirst(hsStop),
			code: codes.Unavailable, first: true},
	}
}

func TestHostileServers(t *testing.T) {
	for _, tc := range hsCases() {
		kinds := tc.kinds
		if kinds == nil {
			kinds = hsAllKinds
		}
		for _, k := range kinds {
			t.Run(tc.name+"/"+k.String(), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { hsCheck(t, tc, k) })
			})
		}
	}
}

// hsCheck makes one call of kind k to a server that does tc.act, with a
// Retrier of hsPolicy and the default throttle, and checks what came of it.
func hsCheck(t *testing.T, tc hsCase, k hsKind) {
	srv := newHsServer(t, tc.act)
	var cnt hsCounter
	var retries []interceptor.Retry
	r, err := interceptor.New(hsPolicy(), interceptor.WithOnRetry(func(r interceptor.Retry) { retries = append(retries, r) }))
	if err != nil {
		t.Fatal(err)
	}
	cc := srv.conn(t, append(r.DialOptions(), cnt.dialOptions()...)...)

	ctx, cancel := context.WithTimeout(t.Context(), hsDeadline)
	defer cancel()
	start := time.Now()
	res := hsRun(ctx, srv, cc, k, tc.header)
	took := time.Since(start)

	wantEnd := hsSum(tc.gaps)
	if tc.end != 0 {
		wantEnd = tc.end
	}
	if got, want := took, wantEnd; got != want {
		t.Errorf("the call returned after %v, want %v", got, want)
	}
	if took > hsDeadline {
		t.Errorf("the call returned after %v, past its deadline (%v)", took, hsDeadline)
	}
	if got, want := cnt.gaps(), tc.gaps; !slices.Equal(got, want) {
		t.Errorf("gaps between attempts = %v, want %v", got, want)
	}
	attempts := len(tc.gaps) + 1
	wantSeen := attempts
	if tc.server > 0 {
		wantSeen = tc.server
	}
	if got := srv.seen(); got != wantSeen || got > hsPolicy().MaxAttempts {
		t.Errorf("attempts the server saw = %d, want %d (MaxAttempts %d)", got, wantSeen, hsPolicy().MaxAttempts)
	}
	if got := len(retries); got != attempts-1 {
		t.Errorf("retries announced to WithOnRetry = %d, want %d", got, attempts-1)
	}
	for _, rt := range retries {
		if want := hsPolicy().Nominal(rt.Attempt - 1); rt.Delay < want {
			t.Errorf("retry after attempt %d waits %v, want at least the Policy's %v", rt.Attempt, rt.Delay, want)
		}
	}

	if got := status.Code(res.err); got != tc.code {
		t.Errorf("status.Code(err) = %v, want %v (err %.200v)", got, tc.code, res.err)
	}
	var e *grpcbackoff.Error
	switch isErr := errors.As(res.err, &e); {
	case tc.reason == 0 && isErr:
		t.Errorf("err = %.200v, want the server's error, not a *grpcbackoff.Error", e)
	case tc.reason != 0 && !isErr:
		t.Errorf("err = %.200v (%T), want a *grpcbackoff.Error", res.err, res.err)
	case isErr && (e.Attempts != attempts || e.Reason != tc.reason || e.Elapsed != took):
		// The first attempt is not timed: Elapsed runs from its end.
		t.Errorf("Attempts, Reason, Elapsed = %d, %v, %v; want %d, %v, %v", e.Attempts, e.Reason, e.Elapsed, attempts, tc.reason, took)
	}

	var want []string
	switch {
	case tc.code == codes.OK:
		want = hsSuccess(k)
	case tc.first:
		want = []string{"r0"}
	}
	if !slices.Equal(res.got, want) {
		t.Errorf("received %q, want %q", res.got, want)
	}
	if tc.header {
		if got := res.header.Get("x-attempt"); !slices.Equal(got, []string{"0"}) {
			t.Errorf("Header() x-attempt = %q, want the first attempt's, 0", got)
		}
	}
	if tc.check != nil {
		tc.check(t, res.err)
	}
}

// hsHeap returns the live heap after a full collection.
func hsHeap() uint64 {
	runtime.GC()
	runtime.GC() // the second empties the pools' victim caches
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestHostileMemoryBounded checks that hostile answers do not make memory
// grow with the number of calls or attempts: calls that each fail five times
// with a 1 MiB message or with 1000 details leave the live heap where it was,
// and a stream that sends 32 MiB before it could commit keeps at most its
// buffer limit. The live heap is measured after a full collection; the slack
// covers grpc's own buffers and pools.
func TestHostileMemoryBounded(t *testing.T) {
	var infos []proto.Message
	for i := range 1000 {
		infos = append(infos, &errdetails.ErrorInfo{Reason: "HOSTILE", Metadata: map[string]string{"i": strconv.Itoa(i)}})
	}
	calls := []struct {
		name  string
		st    *spb.Status
		calls int
		slack uint64
	}{
		// A leak of one status per call would be 6 MiB, of every attempt's 30 MiB.
		{"1 MiB message", &spb.Status{Code: int32(codes.Unavailable), Message: strings.Repeat("~", 1<<20)}, 6, 2 << 20},
		// About 60 KiB on the wire, several times that decoded: a leak of
		// every attempt's status would be well over 2 MiB.
		{"1000 details", hsUnavailable(infos...), 10, 2 << 20},
	}
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := newHsServer(t, hsFail(tc.st))
				cc := srv.conn(t, interceptor.DialOptions(hsPolicy(), interceptor.WithoutThrottle())...)
				run := func(n int) {
					for range n {
						res := hsRun(t.Context(), srv, cc, hsUnary, false)
						if e := (*grpcbackoff.Error)(nil); !errors.As(res.err, &e) || e.Attempts != 5 {
							t.Fatalf("err = %.100v, want 5 attempts", res.err)
						}
						_ = res.err.Error() // formatting the message must not pin anything either
					}
				}
				run(1) // warm up grpc's buffers and pools
				before := hsHeap()
				var ms0, ms1 runtime.MemStats
				runtime.ReadMemStats(&ms0)
				run(tc.calls)
				runtime.ReadMemStats(&ms1)
				after := hsHeap()
				t.Logf("status of %d KiB on the wire; %d calls of 5 attempts: live heap %d KiB → %d KiB; %d KiB allocated per call",
					proto.Size(tc.st)>>10, tc.calls, before>>10, after>>10, (ms1.TotalAlloc-ms0.TotalAlloc)/uint64(tc.calls)>>10)
				if after > before+tc.slack {
					t.Errorf("live heap grew from %d KiB to %d KiB over %d calls, want at most %d KiB more",
						before>>10, after>>10, tc.calls, tc.slack>>10)
				}
			})
		})
	}

	t.Run("stream replay buffer", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// The server reads everything and fails at the half-close: the
			// stream has not committed by receiving, only the buffer limit
			// can commit it.
			srv := newHsServer(t, func(ctx context.Context, x hsEnv) error { return nil })
			cc := srv.conn(t, interceptor.DialOptions(hsPolicy(), interceptor.WithoutThrottle())...)
			before := hsHeap()
			st, err := testgrpc.NewTestServiceClient(cc).StreamingInputCall(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			const msgSize, total = 64 << 10, 32 << 20
			for range total / msgSize { // a fresh message each time: only the interceptor can keep them
				if err := st.Send(&testgrpc.StreamingInputCallRequest{Payload: &testgrpc.Payload{Body: make([]byte, msgSize)}}); err != nil {
					t.Fatalf("Send = %v, want nil", err)
				}
			}
			during := hsHeap()
			resp, err := st.CloseAndRecv()
			if err != nil || resp.GetAggregatedPayloadSize() != total/msgSize {
				t.Fatalf("CloseAndRecv = %v, %v; want %d messages received", resp, err, total/msgSize)
			}
			t.Logf("sent %d MiB on an uncommitted stream: live heap %d KiB → %d KiB (buffer limit %d KiB)",
				total>>20, before>>10, during>>10, interceptor.DefaultBufferLimit>>10)
			const slack = 8 << 20 // grpc's flow-control windows and buffers
			if during > before+interceptor.DefaultBufferLimit+slack {
				t.Errorf("live heap grew from %d KiB to %d KiB with the stream open, want at most the buffer limit (%d KiB) + %d KiB",
					before>>10, during>>10, interceptor.DefaultBufferLimit>>10, slack>>10)
			}
		})
	})
}
