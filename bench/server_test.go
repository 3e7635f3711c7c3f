package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

// payloadSize is the size of the payload of every request and response on
// the success paths: small, so that the benchmarks measure the call, not the
// copying.
const payloadSize = 32

// server is the one fake every benchmark talks to: grpc's interop test
// service over bufconn, answering at once with small, prebuilt responses.
//
// It fails on purpose in two ways. A UnaryCall whose request has a
// ResponseStatus fails with that status every other time (the first, third,
// fifth... such call since reset), so that a retrying client makes exactly
// two attempts per call and a bare client makes two calls. And while down is
// set, every call fails with UNAVAILABLE before reading anything.
type server struct {
	testgrpc.UnimplementedTestServiceServer

	lis  *bufconn.Listener
	srv  *grpc.Server
	resp *testgrpc.SimpleResponse
	out  *testgrpc.StreamingOutputCallResponse
	in   *testgrpc.StreamingInputCallResponse

	flaky    atomic.Int64 // ResponseStatus calls since reset
	down     atomic.Bool
	attempts atomic.Int64 // calls and streams started, all methods
}

// srv is started by TestMain and serves every benchmark of the process.
var srv *server

func TestMain(m *testing.M) {
	srv = startServer()
	code := m.Run()
	srv.close()
	os.Exit(code)
}

// startServer starts a server with opts (guard_test.go's has the retry
// guard's).
func startServer(opts ...grpc.ServerOption) *server {
	s := &server{
		lis:  bufconn.Listen(1 << 20),
		srv:  grpc.NewServer(opts...),
		resp: &testgrpc.SimpleResponse{Payload: newPayload(payloadSize)},
		out:  &testgrpc.StreamingOutputCallResponse{Payload: newPayload(payloadSize)},
		in:   &testgrpc.StreamingInputCallResponse{AggregatedPayloadSize: payloadSize},
	}
	testgrpc.RegisterTestServiceServer(s.srv, s)
	go s.srv.Serve(s.lis)
	return s
}

func (s *server) close() {
	s.srv.Stop()
	s.lis.Close()
}

// dial returns a new client connection to s with opts, connected: it has
// made one call already. It panics on error, as httptest does.
func (s *server) dial(opts ...grpc.DialOption) *grpc.ClientConn {
	opts = append([]grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return s.lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}, opts...)
	cc, err := grpc.NewClient("passthrough:///bufnet", opts...)
	if err != nil {
		panic(fmt.Sprintf("bench: grpc.NewClient: %v", err))
	}
	if _, err := testgrpc.NewTestServiceClient(cc).EmptyCall(context.Background(), &testgrpc.Empty{}); err != nil {
		panic(fmt.Sprintf("bench: first call: %v", err))
	}
	return cc
}

// reset makes the next flaky call fail, and brings the server up.
func (s *server) reset() {
	s.flaky.Store(0)
	s.down.Store(false)
}

func (s *server) EmptyCall(ctx context.Context, _ *testgrpc.Empty) (*testgrpc.Empty, error) {
	s.attempts.Add(1)
	if s.down.Load() {
		return nil, errDown
	}
	return &testgrpc.Empty{}, nil
}

func (s *server) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	s.attempts.Add(1)
	if s.down.Load() {
		return nil, errDown
	}
	if st := req.GetResponseStatus(); st != nil && s.flaky.Add(1)%2 == 1 {
		return nil, status.Error(codes.Code(st.GetCode()), st.GetMessage())
	}
	return s.resp, nil
}

// StreamingOutputCall sends one response per ResponseParameters.
func (s *server) StreamingOutputCall(req *testgrpc.StreamingOutputCallRequest, stream grpc.ServerStreamingServer[testgrpc.StreamingOutputCallResponse]) error {
	s.attempts.Add(1)
	if s.down.Load() {
		return errDown
	}
	for range req.GetResponseParameters() {
		if err := stream.Send(s.out); err != nil {
			return err
		}
	}
	return nil
}

// StreamingInputCall reads requests until the client closes, then answers.
func (s *server) StreamingInputCall(stream grpc.ClientStreamingServer[testgrpc.StreamingInputCallRequest, testgrpc.StreamingInputCallResponse]) error {
	s.attempts.Add(1)
	if s.down.Load() {
		return errDown
	}
	var req testgrpc.StreamingInputCallRequest
	for {
		if err := stream.RecvMsg(&req); err == io.EOF {
			return stream.SendAndClose(s.in)
		} else if err != nil {
			return err
		}
	}
}

// FullDuplexCall answers every request with one response.
func (s *server) FullDuplexCall(stream grpc.BidiStreamingServer[testgrpc.StreamingOutputCallRequest, testgrpc.StreamingOutputCallResponse]) error {
	s.attempts.Add(1)
	if s.down.Load() {
		return errDown
	}
	var req testgrpc.StreamingOutputCallRequest
	for {
		if err := stream.RecvMsg(&req); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if err := stream.Send(s.out); err != nil {
			return err
		}
	}
}

var errDown = status.Error(codes.Unavailable, "bench: server down")

func newPayload(n int) *testgrpc.Payload {
	return &testgrpc.Payload{Body: make([]byte, n)}
}
