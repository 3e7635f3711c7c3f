package bench

import (
	"context"
	"io"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/logtail"
)

// What a resume rule (interceptor.WithResume, issue 43) costs a receive:
// its record runs on every message the caller receives, and must allocate
// nothing. One op is one message received from a long server stream.
//
//	go test -run '^$' -bench 'ResumeRecv' -benchmem -count 6 .

// resumeMechs are the columns: bare gRPC, the standard options, and the
// standard options with a resume rule for the method.
var resumeMechs = []string{bare, ours, "ours+resume"}

// resumeOptions returns the Retrier's options of mechanism name: the rule
// (a log's next offset) for ours+resume.
func resumeOptions(name string) []interceptor.Option {
	if name != "ours+resume" {
		return nil
	}
	return []interceptor.Option{interceptor.WithResume(logtail.LogTail_Scan_FullMethodName,
		func(_ int64, r *logtail.Record) int64 { return r.GetOffset() + 1 },
		func(req *logtail.TailRequest, next int64) (*logtail.TailRequest, error) {
			req.Offset = next
			return req, nil
		})}
}

// BenchmarkResumeRecv: a receive of a 1 KiB record from logtail's Scan over
// bufconn, the server in the same process (its allocations count too),
// the caller reusing one message.
func BenchmarkResumeRecv(b *testing.B) {
	for _, i := range order(b, len(resumeMechs)) {
		name := resumeMechs[i]
		b.Run("mech="+name, func(b *testing.B) {
			srv := logtail.NewServer(b, logtail.Options{Records: 1 << 40, Size: 1 << 10})
			var opts []grpc.DialOption
			if name != bare {
				opts = interceptor.DialOptions(grpcbackoff.DefaultPolicy(), resumeOptions(name)...)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s, err := srv.Client(b, opts...).Scan(ctx, &logtail.TailRequest{})
			if err != nil {
				b.Fatal(err)
			}
			m := new(logtail.Record)
			warmUp(b, 100, func() error { return s.RecvMsg(m) })
			b.ReportAllocs()
			for b.Loop() {
				if err := s.RecvMsg(m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkIsolatedResumeRecv: a receive through the stream interceptor
// alone, from a fake stream that fills the caller's message in place: no
// transport, so that the interceptor's own allocations per receive show
// (bare: the fake's RecvMsg called directly).
func BenchmarkIsolatedResumeRecv(b *testing.B) {
	desc := &logtail.LogTail_ServiceDesc.Streams[1] // Scan
	for _, i := range order(b, len(resumeMechs)) {
		name := resumeMechs[i]
		b.Run("mech="+name, func(b *testing.B) {
			var s grpc.ClientStream = &recordStream{ctx: context.Background()}
			if name != bare {
				r, err := interceptor.New(grpcbackoff.DefaultPolicy(), resumeOptions(name)...)
				if err != nil {
					b.Fatal(err)
				}
				streamer := func(ctx context.Context, _ *grpc.StreamDesc, _ *grpc.ClientConn, _ string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
					return &recordStream{ctx: ctx}, nil
				}
				if s, err = r.Stream()(context.Background(), desc, nil, logtail.LogTail_Scan_FullMethodName, streamer, grpc.StaticMethod()); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.SendMsg(&logtail.TailRequest{}); err != nil {
				b.Fatal(err)
			}
			m := new(logtail.Record)
			warmUp(b, 100, func() error { return s.RecvMsg(m) })
			b.ReportAllocs()
			for b.Loop() {
				if err := s.RecvMsg(m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// recordStream is a server stream of logtail records that never ends: each
// RecvMsg fills the caller's *logtail.Record with the next offset, in
// place, and its headers are there from the start.
type recordStream struct {
	ctx  context.Context
	next int64
}

var recordHeader = metadata.Pairs("x-open", "0")

func (s *recordStream) Header() (metadata.MD, error) { return recordHeader, nil }
func (s *recordStream) Trailer() metadata.MD         { return nil }
func (s *recordStream) CloseSend() error             { return nil }
func (s *recordStream) Context() context.Context     { return s.ctx }
func (s *recordStream) SendMsg(any) error            { return nil }
func (s *recordStream) RecvMsg(m any) error {
	r, ok := m.(*logtail.Record)
	if !ok {
		return io.EOF
	}
	r.Offset = s.next
	s.next++
	return nil
}
