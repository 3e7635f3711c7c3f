package guard_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff/guard"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// TestRedteamLongMethodNamesBounded (red team, issue 44): a gateway's
// unknown-service handler behind the guard, and a flood of 300 method
// names of 128 KiB each, every one called once and failing UNAVAILABLE
// (grpc-go's server takes a :path up to its 16 MiB header list). The
// guard's table of methods is bounded by count (1000, "a flood of names
// churns among itself"), but it keeps each name whole: the flood leaves
// 300 × 128 KiB = 37.5 MiB held by the Guard for as long as the names
// keep their places. The table must hold a bounded amount of memory,
// whatever the names' length (the handoff's figure: "a method ~1.3 KB
// (1000 methods: 1.3 MB)").
func TestRedteamLongMethodNamesBounded(t *testing.T) {
	if raceEnabled {
		t.Skip("a heap's growth: run without -race (the README's test command)")
	}
	g := newGuard(t, guard.Options{})
	srv := grpc.NewServer(append(g.ServerOptions(), grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
		return status.Error(codes.Unavailable, "down")
	}))...)
	lis := bufconntest.Listen()
	bufconntest.Serve(t, srv, lis)
	cc := bufconntest.Dial(t, lis.DialContext)
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	const names, size = 300, 128 << 10
	long := strings.Repeat("m", size)
	// One call first: the connection, its buffers, grpc-go's pools.
	if err := cc.Invoke(t.Context(), "/flood.S/warm", &testgrpc.SimpleRequest{}, &testgrpc.SimpleResponse{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("warm-up call: %v", err)
	}
	before := heap()
	for i := range names {
		method := fmt.Sprintf("/flood.S%d/%s", i, long)
		if err := cc.Invoke(t.Context(), method, &testgrpc.SimpleRequest{}, &testgrpc.SimpleResponse{}); status.Code(err) != codes.Unavailable {
			t.Fatalf("flood call %d: %v", i, err)
		}
	}
	held := int64(heap()) - int64(before)
	runtime.KeepAlive(g)
	t.Logf("heap after %d names of %d KiB: %+d KiB", names, size>>10, held>>10)
	if held > 8<<20 {
		t.Errorf("the guard holds %d MiB after a flood of %d method names of %d KiB; want a bounded table (under 8 MiB)", held>>20, names, size>>10)
	}
}
