package interceptor_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/logtail"
)

// flakyLog serves a log of 10 records; its first Tail fails after 3, as a
// server restarting would.
type flakyLog struct {
	logtail.UnimplementedLogTailServer
	opens atomic.Int32
}

func (l *flakyLog) Tail(req *logtail.TailRequest, s grpc.ServerStreamingServer[logtail.Record]) error {
	first := l.opens.Add(1) == 1
	for off := req.GetOffset(); off < 10; off++ {
		if first && off == 3 {
			return status.Error(codes.Unavailable, "restarting")
		}
		if err := s.Send(&logtail.Record{Offset: off}); err != nil {
			return err
		}
	}
	return nil
}

// A log's reader resumes where it stopped: the rule keeps the offset of
// the next record, and reopens the stream from there (here with the
// recipe's waits 100 times shorter, without jitter).
func ExampleWithResume() {
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	log := &flakyLog{}
	logtail.RegisterLogTailServer(srv, log)
	go srv.Serve(lis)
	defer srv.Stop()

	p := grpcbackoff.DefaultPolicy()
	p.Initial, p.Max, p.Jitter = 10*time.Millisecond, 320*time.Millisecond, 0
	r, err := interceptor.New(p, interceptor.WithResume("/grpcbackoff.logtail.v1.LogTail/Tail",
		// The token: the offset of the next record to read.
		func(_ int64, rec *logtail.Record) int64 { return rec.GetOffset() + 1 },
		// The request to reopen with: the caller's, from that offset.
		func(req *logtail.TailRequest, next int64) (*logtail.TailRequest, error) {
			req.Offset = next
			return req, nil
		}))
	if err != nil {
		panic(err)
	}
	conn, err := grpc.NewClient("passthrough:///log", append(r.DialOptions(),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		panic(err)
	}
	defer conn.Close()

	stream, err := logtail.NewLogTailClient(conn).Tail(context.Background(), &logtail.TailRequest{})
	if err != nil {
		panic(err)
	}
	var offsets []int64
	for {
		rec, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		offsets = append(offsets, rec.GetOffset())
	}
	fmt.Println(offsets, "opens:", log.opens.Load())
	// Output: [0 1 2 3 4 5 6 7 8 9] opens: 2
}
