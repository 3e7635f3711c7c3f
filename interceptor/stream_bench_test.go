package interceptor_test

import (
	"context"
	"io"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/test/bufconn"

	"github.com/platformkit/grpcbackoff/interceptor"
)

// benchResponses is the number of responses of each benchmarked stream.
const benchResponses = 10

// benchServer answers every StreamingOutputCall with benchResponses
// responses and records nothing, so that the benchmark measures the client.
type benchServer struct {
	testgrpc.UnimplementedTestServiceServer
	resp *testgrpc.StreamingOutputCallResponse
}

func (s *benchServer) StreamingOutputCall(_ *testgrpc.StreamingOutputCallRequest, ss grpc.ServerStreamingServer[testgrpc.StreamingOutputCallResponse]) error {
	for range benchResponses {
		if err := ss.Send(s.resp); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkServerStream measures a server stream of benchResponses
// responses that succeeds at once, over bufconn, without the interceptor
// (bare) and with it (retry, installed by DialOptions with its defaults). An
// op is one stream; ns/msg divides its time by the responses.
func BenchmarkServerStream(b *testing.B) {
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, &benchServer{
		resp: &testgrpc.StreamingOutputCallResponse{Payload: &testgrpc.Payload{Body: make([]byte, 64)}},
	})
	go func() { _ = srv.Serve(lis) }()
	b.Cleanup(srv.Stop)

	for _, bc := range []struct {
		name string
		opts []grpc.DialOption
	}{
		{"bare", nil},
		{"retry", interceptor.DialOptions(exact())},
	} {
		b.Run(bc.name, func(b *testing.B) {
			opts := append([]grpc.DialOption{
				grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
				grpc.WithTransportCredentials(insecure.NewCredentials()),
			}, bc.opts...)
			cc, err := grpc.NewClient("passthrough:///bufconn", opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Close()
			c := testgrpc.NewTestServiceClient(cc)
			ctx := context.Background()
			req := outputRequest("q")
			resp := new(testgrpc.StreamingOutputCallResponse)
			b.ReportAllocs()
			for b.Loop() {
				s, err := c.StreamingOutputCall(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				for {
					if err := s.RecvMsg(resp); err == io.EOF {
						break
					} else if err != nil {
						b.Fatal(err)
					}
					n++
				}
				if n != benchResponses {
					b.Fatalf("received %d responses, want %d", n, benchResponses)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchResponses), "ns/msg")
		})
	}
}
