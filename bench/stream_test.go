package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"testing"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

// The stream benchmarks: one op is one whole stream of msgs messages, so
// allocs/op is per stream; ns/msg is ns/op divided by msgs. With one message
// the stream's setup dominates, with 1000 the messages do.
var streamMsgs = []int{1, 1000}

// The middleware refuses to retry client and bidirectional streams (it fails
// them with UNIMPLEMENTED unless retrying is disabled), so it has no column
// there.
var sendingNames = slices.DeleteFunc(slices.Clone(streamNames), func(n string) bool { return n == middleware })

// BenchmarkServerStream is a server stream: one request, msgs responses.
func BenchmarkServerStream(b *testing.B) {
	benchStreams(b, streamNames, func(ctx context.Context, m *mech, n int) func() error {
		req := outputRequest(n)
		return func() error { return serverStream(ctx, m, req, n) }
	})
}

// BenchmarkClientStream is a client stream: msgs requests, one response.
func BenchmarkClientStream(b *testing.B) {
	req := &testgrpc.StreamingInputCallRequest{Payload: newPayload(payloadSize)}
	benchStreams(b, sendingNames, func(ctx context.Context, m *mech, n int) func() error {
		return func() error { return clientStream(ctx, m, req, n) }
	})
}

// BenchmarkBidiStream is a bidirectional stream of msgs requests, each
// answered before the next is sent (ping-pong).
func BenchmarkBidiStream(b *testing.B) {
	req := outputRequest(1)
	benchStreams(b, sendingNames, func(ctx context.Context, m *mech, n int) func() error {
		return func() error { return bidiStream(ctx, m, req, n) }
	})
}

// benchStreams runs one sub-benchmark per message count and mechanism of
// names, in shuffled order; newOp returns the op that makes one whole stream
// of n messages through m.
func benchStreams(b *testing.B, names []string, newOp func(ctx context.Context, m *mech, n int) func() error) {
	ms := newMechs(b, defaults, names...)
	for _, n := range streamMsgs {
		for _, i := range order(b, len(ms)) {
			m := ms[i]
			b.Run(fmt.Sprintf("msgs=%d/mech=%s", n, m.name), func(b *testing.B) {
				op := newOp(context.Background(), m, n)
				warmUp(b, max(2, 100/n), op)
				b.ReportAllocs()
				for b.Loop() {
					if err := op(); err != nil {
						b.Fatal(err)
					}
				}
				reportPerMsg(b, n)
			})
		}
	}
}

func reportPerMsg(b *testing.B, msgs int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*msgs), "ns/msg")
}

// outputRequest asks for n responses.
func outputRequest(n int) *testgrpc.StreamingOutputCallRequest {
	req := &testgrpc.StreamingOutputCallRequest{Payload: newPayload(payloadSize)}
	for range n {
		req.ResponseParameters = append(req.ResponseParameters, &testgrpc.ResponseParameters{Size: payloadSize})
	}
	return req
}

func serverStream(ctx context.Context, m *mech, req *testgrpc.StreamingOutputCallRequest, n int) error {
	st, err := m.serverStream(ctx, req)
	if err != nil {
		return err
	}
	for got := 0; ; got++ {
		_, err := st.Recv()
		if err == io.EOF {
			if got != n {
				return fmt.Errorf("got %d messages, want %d", got, n)
			}
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func clientStream(ctx context.Context, m *mech, req *testgrpc.StreamingInputCallRequest, n int) error {
	st, err := m.clientStream(ctx)
	if err != nil {
		return err
	}
	for range n {
		if err := st.Send(req); err != nil {
			return err
		}
	}
	_, err = st.CloseAndRecv()
	return err
}

func bidiStream(ctx context.Context, m *mech, req *testgrpc.StreamingOutputCallRequest, n int) error {
	st, err := m.bidiStream(ctx)
	if err != nil {
		return err
	}
	for range n {
		if err := st.Send(req); err != nil {
			return err
		}
		if _, err := st.Recv(); err != nil {
			return err
		}
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	if _, err := st.Recv(); err != io.EOF {
		return fmt.Errorf("Recv after CloseSend = %v, want io.EOF", err)
	}
	return nil
}
