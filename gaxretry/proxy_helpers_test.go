package gaxretry_test

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

// faultProxy stands between a client and one of the in-process fakes (pstest,
// bttest, spannertest, redistest) on loopback TCP. It passes every call
// through, frames untouched, counts the attempts that reach it by method,
// and fails those a fault says to, as the server would: the fakes' own
// code is not changed, and a client cannot tell the proxy from the server.
type faultProxy struct {
	Addr    string
	backend *grpc.ClientConn
	srv     *grpc.Server

	mu       sync.Mutex
	attempts map[string]int
	fault    func(method string, n int) error // n: the attempt's number for method, from 1
}

// newFaultProxy starts a proxy to the server at backend, dialled with opts
// (a bufconn dialer); it stops when the test ends.
func newFaultProxy(t *testing.T, backend string, opts ...grpc.DialOption) *faultProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("passthrough:///"+backend, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{}))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{Addr: lis.Addr().String(), backend: cc, attempts: make(map[string]int)}
	p.srv = grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{}), grpc.UnknownServiceHandler(p.handle))
	go p.srv.Serve(lis)
	t.Cleanup(func() {
		p.srv.Stop()
		cc.Close()
	})
	return p
}

// failWith sets the fault: f returns the error of attempt n of method, or
// nil to pass it through.
func (p *faultProxy) failWith(f func(method string, n int) error) {
	p.mu.Lock()
	p.fault = f
	p.mu.Unlock()
}

// of returns the attempts of the methods whose name ends with suffix
// ("/Publish") that reached the proxy.
func (p *faultProxy) of(suffix string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bySuffix(p.attempts, suffix)
}

// bySuffix sums the counts of the methods whose name ends with suffix.
func bySuffix(counts map[string]int, suffix string) int {
	n := 0
	for m, c := range counts {
		if strings.HasSuffix(m, suffix) {
			n += c
		}
	}
	return n
}

func (p *faultProxy) handle(_ any, ss grpc.ServerStream) error {
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
				cs.CloseSend()
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

// rawCodec passes message frames through as bytes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }
