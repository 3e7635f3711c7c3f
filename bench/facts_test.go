package bench

import (
	"context"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
)

// BenchmarkPairedFacts measures, with no retry layer at all, what each way
// of learning how an attempt went costs a successful unary call over
// bufconn, paired with a bare call: whether its response headers arrived
// (commit) and whether a transport stream was made (sent).
//
//   - signal=none: a bare call against itself: the method's own error.
//   - signal=options: the call options every attempt the interceptor may
//     retry carries (grpc.Header, grpc.Peer, grpc.OnFinish, grpc.Trailer),
//     made once and reused, as its pooled state does.
//   - signal=options-trailer: the same without grpc.Trailer
//     (WithoutPushback).
//   - signal=trailer: grpc.Trailer and grpc.OnFinish alone, from which
//     issue 41 asked to read both facts; the trailer cannot tell a commit
//     (internal/attempt's TestGRPCFactsTrailerTellsNoCommit), so no attempt
//     of ours carries only these.
//   - signal=statshandler: a stats handler on the ClientConn that takes the
//     same facts from grpc-go's events (OutHeader: sent; InHeader: commit)
//     into a listener the call's context carries, as the interceptor would
//     have to give every attempt.
func BenchmarkPairedFacts(b *testing.B) {
	bareClient := testgrpc.NewTestServiceClient(srv.dial())
	watched := testgrpc.NewTestServiceClient(srv.dial(grpc.WithStatsHandler(factsHandler{})))
	ctx, req := context.Background(), successRequest()
	var header, trailer metadata.MD
	var p peer.Peer
	var finished atomic.Bool
	onFinish := grpc.OnFinish(func(error) { finished.Store(true) })
	all := []grpc.CallOption{grpc.Header(&header), grpc.Peer(&p), onFinish, grpc.Trailer(&trailer)}
	bareOp := func() error {
		_, err := bareClient.UnaryCall(ctx, req)
		return err
	}
	for _, c := range []struct {
		name string
		op   func() error
	}{
		{"none", bareOp},
		{"options", func() error {
			_, err := bareClient.UnaryCall(ctx, req, all...)
			return err
		}},
		{"options-trailer", func() error {
			_, err := bareClient.UnaryCall(ctx, req, all[:3]...)
			return err
		}},
		{"trailer", func() error {
			_, err := bareClient.UnaryCall(ctx, req, all[2:]...)
			return err
		}},
		{"statshandler", func() error {
			var f facts
			_, err := watched.UnaryCall(context.WithValue(ctx, factsKey{}, &f), req)
			return err
		}},
	} {
		b.Run("signal="+c.name, func(b *testing.B) {
			paired(b, bareOp, c.op)
		})
	}
}

// facts is what factsHandler learns of one call.
type facts struct{ sent, committed atomic.Bool }

type factsKey struct{}

// factsHandler is a stats.Handler that tells the facts of the calls whose
// context carries them (factsKey).
type factsHandler struct{}

func (factsHandler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (factsHandler) HandleRPC(ctx context.Context, s stats.RPCStats) {
	f, ok := ctx.Value(factsKey{}).(*facts)
	if !ok {
		return
	}
	switch s.(type) {
	case *stats.OutHeader:
		f.sent.Store(true)
	case *stats.InHeader:
		f.committed.Store(true)
	}
}

func (factsHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (factsHandler) HandleConn(context.Context, stats.ConnStats) {}
