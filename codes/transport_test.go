package codes_test

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/emptypb"

	httpcodes "github.com/platformkit/grpcbackoff/codes"
)

// TestFromTransportHTTPMatchesGRPCGo checks FromTransportHTTP against the
// grpc-go client in go.mod rather than against a copy of its table. A plain
// HTTP/2 server answers every call with the status named in the method
// path, a text/plain body and no grpc-status, like a proxy error page.
func TestFromTransportHTTPMatchesGRPCGo(t *testing.T) {
	statuses := []int{200, 204, 400, 401, 403, 404, 409, 412, 429, 431, 499, 500, 501, 502, 503, 504, 505}

	mux := http.NewServeMux()
	for _, s := range statuses {
		mux.HandleFunc("/test.Service/Status"+strconv.Itoa(s), func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(s)
			_, _ = w.Write([]byte("not gRPC\n"))
		})
	}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: &protocols}

	lis := bufconn.Listen(1 << 20)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})

	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })

	for _, s := range statuses {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := conn.Invoke(ctx, "/test.Service/Status"+strconv.Itoa(s), &emptypb.Empty{}, &emptypb.Empty{})
		cancel()
		got := status.Code(err)
		if got == grpccodes.DeadlineExceeded {
			t.Fatalf("HTTP %d: call timed out: %v", s, err)
		}
		if want := httpcodes.FromTransportHTTP(s); got != want {
			t.Errorf("grpc-go reports %v for HTTP %d (%v), FromTransportHTTP(%d) = %v", got, s, err, s, want)
		}
	}
}
