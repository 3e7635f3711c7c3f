package interceptor_test

// Tests over loopback TCP, first written as red-team probes of issue 34:
// what a write's failure made by the transport (an HTTP/2 reset) rather
// than by the server's status tells about whether it was applied.

import (
	"context"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// TestResetAfterWriteNotResent: the server (or a proxy in front of it: an
// HTTP/2 RST_STREAM is no gRPC status) has the whole request of a write
// (CallNotIdempotent), then resets the stream with ENHANCE_YOUR_CALM or
// FLOW_CONTROL_ERROR, which grpc-go turns into RESOURCE_EXHAUSTED. No
// status came from the server (an empty trailer), so nothing says the
// write was not applied: it is not resent, as GUARANTEES says. CANCEL
// (CANCELED, not retried) is applied once too. A server's own
// RESOURCE_EXHAUSTED, trailers-only, says the write was not applied: it is
// resent, unless WithoutPushback leaves the trailer unread (the safe side).
// A read reset the same way is retried.
func TestResetAfterWriteNotResent(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answer  bufconntest.RawAnswer
		opts    []interceptor.Option
		applied int32
		code    codes.Code
		read    bool
	}{
		{"a read, reset ENHANCE_YOUR_CALM", bufconntest.RawAnswer{Reset: http2.ErrCodeEnhanceYourCalm}, nil, 2, codes.OK, true},
		{"reset ENHANCE_YOUR_CALM", bufconntest.RawAnswer{Reset: http2.ErrCodeEnhanceYourCalm}, nil, 1, codes.ResourceExhausted, false},
		{"reset FLOW_CONTROL_ERROR", bufconntest.RawAnswer{Reset: http2.ErrCodeFlowControl}, nil, 1, codes.ResourceExhausted, false},
		{"reset CANCEL", bufconntest.RawAnswer{Reset: http2.ErrCodeCancel}, nil, 1, codes.Canceled, false},
		{"server's RESOURCE_EXHAUSTED", bufconntest.RawAnswer{Code: codes.ResourceExhausted, Message: "quota"}, nil, 2, codes.OK, false},
		{"server's RESOURCE_EXHAUSTED, WithoutPushback", bufconntest.RawAnswer{Code: codes.ResourceExhausted, Message: "quota"}, []interceptor.Option{interceptor.WithoutPushback()}, 1, codes.ResourceExhausted, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var streams atomic.Int32
			srv := bufconntest.NewRawServer(t, lis, func(_, _ int) bufconntest.RawAnswer {
				if streams.Add(1) == 1 {
					a := tc.answer
					a.AfterRequest = true
					return a
				}
				return bufconntest.RawAnswer{AfterRequest: true}
			})
			c, _, ctx := tcpClient(t, lis.Addr().String(), tc.opts...)
			callOpts := []grpc.CallOption{grpc.WaitForReady(true)}
			if !tc.read {
				callOpts = append(callOpts, interceptor.CallNotIdempotent())
			}
			for _, kind := range []string{"unary", "client stream"} {
				streams.Store(0)
				before := srv.Requests()
				var err error
				if kind == "unary" {
					_, err = c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, callOpts...)
				} else {
					var st testgrpc.TestService_StreamingInputCallClient
					if st, err = c.StreamingInputCall(ctx, callOpts...); err == nil {
						st.Send(&testgrpc.StreamingInputCallRequest{})
						_, err = st.CloseAndRecv()
					}
				}
				applied, want := int32(srv.Requests()-before), tc.applied
				if kind == "client stream" && tc.opts != nil {
					want = 2 // streams read the trailer whatever WithoutPushback says
				}
				wantCode := tc.code
				if want == 2 {
					wantCode = codes.OK
				}
				if applied != want || status.Code(err) != wantCode {
					t.Errorf("%s: the call reached the server %d times, the caller got %v; want %d and %v", kind, applied, err, want, wantCode)
				}
			}
		})
	}
}

// TestExplainWithoutPushbackWrite: Explain and the wire agree on a write's
// RESOURCE_EXHAUSTED: with the trailer read, the server's own is listed and
// resent; under WithoutPushback, neither (a red team's probe found Explain
// listing it while the wire did not resend it).
func TestExplainWithoutPushbackWrite(t *testing.T) {
	const method = "/grpc.testing.TestService/UnaryCall"
	for _, tc := range []struct {
		name string
		opts []interceptor.Option
		want int
	}{
		{"pushback read", nil, 2},
		{"WithoutPushback", []interceptor.Option{interceptor.WithoutPushback()}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := append([]interceptor.Option{interceptor.WithSafety(method, interceptor.NotIdempotent), interceptor.WithoutThrottle()}, tc.opts...)
			r, err := interceptor.New(fastPolicy(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			explained := slices.Contains(r.Explain(method).Codes, codes.ResourceExhausted)
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var streams atomic.Int32
			srv := bufconntest.NewRawServer(t, lis, func(_, _ int) bufconntest.RawAnswer {
				if streams.Add(1) == 1 {
					return bufconntest.RawAnswer{Code: codes.ResourceExhausted, Message: "quota", AfterRequest: true}
				}
				return bufconntest.RawAnswer{AfterRequest: true}
			})
			cc, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), append(r.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			_, err = testgrpc.NewTestServiceClient(cc).UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
			if n := srv.Requests(); n != tc.want || explained != (tc.want > 1) {
				t.Errorf("the write reached the server %d times (err %v), Explain lists RESOURCE_EXHAUSTED: %v; want %d, and %v", n, err, explained, tc.want, tc.want > 1)
			}
		})
	}
}
