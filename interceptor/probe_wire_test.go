package interceptor_test

// Red-team probes of issue 34 over loopback TCP: what a write's failure
// made by the transport (an HTTP/2 reset) rather than by the server's
// status tells about whether it was applied.

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
)

// probeRawServer is a gRPC server on HTTP/2 frames over loopback TCP. A
// stream whose request arrived whole (its END_STREAM) is "applied"; then
// answer decides: reset the stream with an HTTP/2 error code, or answer it
// OK (an empty message).
type probeRawServer struct {
	lis     net.Listener
	applied atomic.Int32
	answer  func(n int) (reset bool, code http2.ErrCode)
	wg      sync.WaitGroup
}

func newProbeRawServer(t *testing.T, answer func(n int) (bool, http2.ErrCode)) *probeRawServer {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &probeRawServer{lis: lis, answer: answer}
	var mu sync.Mutex
	var conns []net.Conn
	s.wg.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			s.wg.Go(func() { defer c.Close(); s.serve(c) })
		}
	})
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *probeRawServer) serve(c net.Conn) {
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil {
		return
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if fr.WriteSettings() != nil {
		return
	}
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	block := func(fields ...string) []byte {
		hbuf.Reset()
		for i := 0; i < len(fields); i += 2 {
			enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
		}
		return bytes.Clone(hbuf.Bytes())
	}
	respond := func(id uint32) error {
		n := int(s.applied.Add(1)) - 1 // the request arrived whole: the handler has it
		if reset, code := s.answer(n); reset {
			return fr.WriteRSTStream(id, code)
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block(":status", "200", "content-type", "application/grpc"), EndHeaders: true}); err != nil {
			return err
		}
		if err := fr.WriteData(id, false, []byte{0, 0, 0, 0, 0}); err != nil {
			return err
		}
		return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block("grpc-status", "0"), EndStream: true, EndHeaders: true})
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() && fr.WriteSettingsAck() != nil {
				return
			}
		case *http2.PingFrame:
			if !f.IsAck() && fr.WritePing(true, f.Data) != nil {
				return
			}
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() && respond(f.StreamID) != nil {
				return
			}
		case *http2.DataFrame:
			if n := len(f.Data()); n > 0 {
				fr.WriteWindowUpdate(0, uint32(n))
				fr.WriteWindowUpdate(f.StreamID, uint32(n))
			}
			if f.StreamEnded() && respond(f.StreamID) != nil {
				return
			}
		}
	}
}

// probeTCPClient dials addr through DialOptions of a Policy of 3 attempts,
// 1 ms apart, with no budget.
func probeTCPClient(t *testing.T, addr string) testgrpc.TestServiceClient {
	p := grpcbackoff.DefaultPolicy()
	p.Initial, p.Max, p.Jitter, p.MaxAttempts = time.Millisecond, time.Millisecond, 0, 3
	opts := append(interceptor.DialOptions(p, interceptor.WithoutThrottle()), grpc.WithTransportCredentials(insecure.NewCredentials()))
	cc, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testgrpc.NewTestServiceClient(cc)
}

// TestProbeResetAfterWriteAppliedNotResent: the server (or a proxy in front
// of it: an HTTP/2 RST_STREAM is no gRPC status) has the whole request of a
// write (CallNotIdempotent), then resets the stream with ENHANCE_YOUR_CALM
// or FLOW_CONTROL_ERROR, which grpc-go turns into RESOURCE_EXHAUSTED. No
// status came from the server (no trailer: grpc-go reports it), so nothing
// says the write was not applied; GUARANTEES: "a write is never applied
// twice by default ... nor after a reset once sent". The control, the
// same reset with CANCEL (CANCELED, not retried), is applied once.
func TestProbeResetAfterWriteAppliedNotResent(t *testing.T) {
	t.Skip("red team: a write reset with RST_STREAM ENHANCE_YOUR_CALM/FLOW_CONTROL_ERROR (RESOURCE_EXHAUSTED from the transport, no trailer) after it reached the server is resent: applied twice, the caller gets success")
	for _, tc := range []struct {
		name string
		code http2.ErrCode
	}{
		{"ENHANCE_YOUR_CALM", http2.ErrCodeEnhanceYourCalm},
		{"FLOW_CONTROL_ERROR", http2.ErrCodeFlowControl},
		{"CANCEL (control)", http2.ErrCodeCancel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newProbeRawServer(t, func(n int) (bool, http2.ErrCode) { return n == 0, tc.code })
			c := probeTCPClient(t, srv.lis.Addr().String())
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			for _, kind := range []string{"unary", "client stream"} {
				srv.applied.Store(0)
				var err error
				if kind == "unary" {
					_, err = c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, interceptor.CallNotIdempotent(), grpc.WaitForReady(true))
				} else {
					var st testgrpc.TestService_StreamingInputCallClient
					if st, err = c.StreamingInputCall(ctx, interceptor.CallNotIdempotent(), grpc.WaitForReady(true)); err == nil {
						st.Send(&testgrpc.StreamingInputCallRequest{})
						_, err = st.CloseAndRecv()
					}
				}
				t.Logf("%s: err = %v (%v); the write was applied %d times", kind, err, status.Code(err), srv.applied.Load())
				if n := srv.applied.Load(); n != 1 || status.Code(err) == codes.OK {
					t.Errorf("%s: the write was applied %d times, the caller got %v; want once, and the reset's error", kind, n, err)
				}
			}
		})
	}
}
