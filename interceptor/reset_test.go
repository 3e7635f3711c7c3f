package interceptor_test

// Tests over loopback TCP, first written as red-team probes of issue 34:
// what a write's failure made by the transport (an HTTP/2 reset) rather
// than by the server's status tells about whether it was applied.

import (
	"bytes"
	"context"
	"io"
	"net"
	"strconv"
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

// rawAnswer is how probeRawServer answers a request: reset the stream with
// an HTTP/2 error code (reset), answer trailers-only with a gRPC status
// (status, when not OK), or answer OK with an empty message.
type rawAnswer struct {
	reset  http2.ErrCode
	status codes.Code
}

// probeRawServer is a gRPC server on HTTP/2 frames over loopback TCP. A
// stream whose request arrived whole (its END_STREAM) is "applied"; then
// answer(n), for the n-th request from 0, decides how it is answered; nil
// is an OK answer.
type probeRawServer struct {
	lis     net.Listener
	applied atomic.Int32
	answer  func(n int) *rawAnswer
	wg      sync.WaitGroup
}

func newProbeRawServer(t *testing.T, answer func(n int) *rawAnswer) *probeRawServer {
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
		switch a := s.answer(n); {
		case a == nil:
		case a.status != codes.OK:
			return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block(":status", "200", "content-type", "application/grpc",
				"grpc-status", strconv.Itoa(int(a.status)), "grpc-message", "quota"), EndStream: true, EndHeaders: true})
		default:
			return fr.WriteRSTStream(id, a.reset)
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
// 1 ms apart, with no budget, and opts.
func probeTCPClient(t *testing.T, addr string, opts ...interceptor.Option) testgrpc.TestServiceClient {
	p := grpcbackoff.DefaultPolicy()
	p.Initial, p.Max, p.Jitter, p.MaxAttempts = time.Millisecond, time.Millisecond, 0, 3
	dopts := append(interceptor.DialOptions(p, append(opts, interceptor.WithoutThrottle())...), grpc.WithTransportCredentials(insecure.NewCredentials()))
	cc, err := grpc.NewClient("passthrough:///"+addr, dopts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testgrpc.NewTestServiceClient(cc)
}

// TestResetAfterWriteNotResent: the server (or a proxy in front of it: an
// HTTP/2 RST_STREAM is no gRPC status) has the whole request of a write
// (CallNotIdempotent), then resets the stream with ENHANCE_YOUR_CALM or
// FLOW_CONTROL_ERROR, which grpc-go turns into RESOURCE_EXHAUSTED. No
// status came from the server (an empty trailer), so nothing says the
// write was not applied: it is not resent, as GUARANTEES says. CANCEL
// (CANCELED, not retried) is applied once too. A server's own
// RESOURCE_EXHAUSTED, trailers-only, says the write was not applied: it is
// resent, unless WithoutPushback leaves the trailer unread (the safe side).
func TestResetAfterWriteNotResent(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answer  rawAnswer
		opts    []interceptor.Option
		applied int32
		code    codes.Code
	}{
		{"reset ENHANCE_YOUR_CALM", rawAnswer{reset: http2.ErrCodeEnhanceYourCalm}, nil, 1, codes.ResourceExhausted},
		{"reset FLOW_CONTROL_ERROR", rawAnswer{reset: http2.ErrCodeFlowControl}, nil, 1, codes.ResourceExhausted},
		{"reset CANCEL", rawAnswer{reset: http2.ErrCodeCancel}, nil, 1, codes.Canceled},
		{"server's RESOURCE_EXHAUSTED", rawAnswer{status: codes.ResourceExhausted}, nil, 2, codes.OK},
		{"server's RESOURCE_EXHAUSTED, WithoutPushback", rawAnswer{status: codes.ResourceExhausted}, []interceptor.Option{interceptor.WithoutPushback()}, 1, codes.ResourceExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newProbeRawServer(t, func(n int) *rawAnswer {
				if n == 0 {
					return &tc.answer
				}
				return nil
			})
			c := probeTCPClient(t, srv.lis.Addr().String(), tc.opts...)
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
				applied, want := srv.applied.Load(), tc.applied
				if kind == "client stream" && tc.opts != nil {
					want = 2 // streams read the trailer whatever WithoutPushback says
				}
				wantCode := tc.code
				if want == 2 {
					wantCode = codes.OK
				}
				if applied != want || status.Code(err) != wantCode {
					t.Errorf("%s: the write reached the server %d times, the caller got %v; want %d and %v", kind, applied, err, want, wantCode)
				}
			}
		})
	}
}
