package interceptor_test

import (
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// TestRedteamManyMethodNamesBounded (red team, issue 42): a gateway's
// backend client with the standard options (DialOptions(DefaultPolicy())),
// forwarding whatever method its callers name (grpc-proxy's
// UnknownServiceHandler pattern): 20 000 distinct method names, each
// called once and failing UNAVAILABLE (the DefaultPolicy's codes, its delays shortened). What the Retrier learns of a method
// (internal/safety.Catalog's known, a sync.Map from method to Knowledge,
// learnt once per method, never forgotten) must not grow without bound
// with names its callers choose.
func TestRedteamManyMethodNamesBounded(t *testing.T) {
	if raceEnabled {
		t.Skip("a storm's statistics over thousands of calls: run without -race (the README's test command)")
	}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		if err := ss.RecvMsg(new(emptypb.Empty)); err != nil && err != io.EOF {
			return err
		}
		return status.Error(codes.Unavailable, "down") // a failure: the Retrier decides, and learns the method
	}))
	lis := bufconntest.Listen()
	bufconntest.Serve(t, srv, lis)
	call := func(cc *grpc.ClientConn, i int) {
		if err := cc.Invoke(t.Context(), fmt.Sprintf("/tenant%d.Service/Method", i), new(emptypb.Empty), new(emptypb.Empty)); status.Code(err) != codes.Unavailable {
			t.Fatal(err)
		}
	}
	heap := func() int64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	const n = 20000
	grown := func(opts ...grpc.DialOption) int64 {
		cc := bufconntest.Dial(t, lis.DialContext, opts...)
		for i := range 100 {
			call(cc, -1-i) // the connection, its buffers and pools
		}
		before := heap()
		for i := range n {
			call(cc, i)
		}
		after := heap()
		runtime.KeepAlive(cc)
		return after - before
	}
	bare := grown()
	p := grpcbackoff.DefaultPolicy()
	p.Initial, p.Max, p.Jitter = time.Microsecond, time.Microsecond, 0
	lib := grown(interceptor.DialOptions(p, interceptor.WithoutThrottle())...)
	t.Logf("heap grown over %d method names: bare %+d KiB, standard options %+d KiB (%d B a name more)", n, bare>>10, lib>>10, (lib-bare)/n)
	// A bare client's heap can shrink over the run (garbage of the tests
	// before it, freed late: -4 MiB under -race), which would count against
	// the options; only a growth is subtracted.
	if lib-max(bare, 0) > 1<<20 {
		t.Errorf("the standard options hold %d KiB more than a bare client after %d distinct method names (%d B a name): the per-method memory is unbounded", (lib-bare)>>10, n, (lib-bare)/n)
	}
}
