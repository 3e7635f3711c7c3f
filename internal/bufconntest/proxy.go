package bufconntest

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// Proxy stands between a client and a server that is not a Server (an
// in-process fake of a real API: pstest, bttest, spannertest, redistest) on
// loopback TCP. It passes every call through with its frames untouched,
// counts the attempts that reach it by method, and fails those a fault says
// to, as the server would: a client cannot tell the Proxy from the server.
// Its methods are safe for concurrent use.
type Proxy struct {
	// Addr is the Proxy's loopback address, for the client to dial.
	Addr string

	backend *grpc.ClientConn
	srv     *grpc.Server

	mu       sync.Mutex
	attempts map[string]int
	fault    func(method string, n int) error
}

// NewProxy starts a Proxy to the server at backend, dialled with opts (for
// example a bufconn dialer). It stops when the test ends.
func NewProxy(tb testing.TB, backend string, opts ...grpc.DialOption) *Proxy {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	dial := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})),
	}
	cc, err := grpc.NewClient("passthrough:///"+backend, append(dial, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{Addr: lis.Addr().String(), backend: cc, attempts: make(map[string]int)}
	p.srv = grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{}), grpc.UnknownServiceHandler(p.handle))
	Serve(tb, p.srv, lis)
	tb.Cleanup(func() { _ = cc.Close() })
	return p
}

// FailWith sets the fault: f returns the error that ends attempt n (from 1)
// of method, or nil to pass the attempt through. A nil f passes every
// attempt through.
func (p *Proxy) FailWith(f func(method string, n int) error) {
	p.mu.Lock()
	p.fault = f
	p.mu.Unlock()
}

// Attempts returns how many attempts of the methods whose full name ends
// with suffix (for example "/Publish") reached the Proxy, failed ones
// included.
func (p *Proxy) Attempts(suffix string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return SumBySuffix(p.attempts, suffix)
}

// SumBySuffix sums the counts of the methods whose full name ends with
// suffix.
func SumBySuffix(counts map[string]int, suffix string) int {
	n := 0
	for m, c := range counts {
		if strings.HasSuffix(m, suffix) {
			n += c
		}
	}
	return n
}

func (p *Proxy) handle(_ any, ss grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(ss)
	p.mu.Lock()
	p.attempts[method]++
	n, fault := p.attempts[method], p.fault
	p.mu.Unlock()
	if fault != nil {
		if err := fault(method, n); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	cs, err := p.backend.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if err != nil {
		return err
	}
	go func() { // the client's messages, then its half-close
		for {
			var frame []byte
			if err := ss.RecvMsg(&frame); err != nil {
				_ = cs.CloseSend()
				return
			}
			if cs.SendMsg(&frame) != nil {
				return
			}
		}
	}()
	if md, err := cs.Header(); err == nil && md != nil {
		if err := ss.SendHeader(md); err != nil {
			return err
		}
	}
	for {
		var frame []byte
		err := cs.RecvMsg(&frame)
		if errors.Is(err, io.EOF) {
			ss.SetTrailer(cs.Trailer())
			return nil
		}
		if err != nil {
			ss.SetTrailer(cs.Trailer())
			return status.Convert(err).Err()
		}
		if err := ss.SendMsg(&frame); err != nil {
			return err
		}
	}
}

// rawCodec passes message frames through as bytes, under the name "proto"
// so that both ends see the codec they expect.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }
