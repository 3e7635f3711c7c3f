package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

// waitingN is how many calls BenchmarkWaiting keeps waiting at once.
var waitingN = flag.Int("waiting.n", 10_000, "calls BenchmarkWaiting keeps waiting at once")

// replayPayload is the payload of the message each waiting stream keeps for
// replay: by default a typical small request.
var replayPayload = flag.Int("waiting.payload", 1<<10, "bytes of the message each waiting stream keeps for replay")

// BenchmarkWaiting measures the memory that calls hold while they wait in
// backoff: -waiting.n calls (or streams) fail their first attempt on a
// server that is down, and wait an hour for their second. It reports, per
// waiting call, the live heap (B/wait, after a GC) and the goroutine stack
// (stack-B/wait) they hold beyond what the idle connection holds; the
// caller's goroutine, which any blocking call has, is in the stack figure.
//
// Each stream first sends one message of -waiting.payload bytes, made for it,
// which a mechanism keeps for replay (the caller keeps no reference).
//
// The measurement is the same whatever b.N is: run it with -benchtime 1x;
// ns/op is the time to start, measure and end all the calls.
func BenchmarkWaiting(b *testing.B) {
	cases := []struct {
		kind  string
		names []string
		call  func(ctx context.Context, m *mech) error
	}{
		{"unary", []string{ours, grpcRetry, middleware, gaxInvoke}, func(ctx context.Context, m *mech) error {
			return m.unary(ctx, successRequest())
		}},
		// gax retries only the opening of a stream, which does not fail.
		{"serverstream", []string{ours, grpcRetry, middleware}, func(ctx context.Context, m *mech) error {
			req := outputRequest(1)
			req.Payload = newPayload(*replayPayload)
			st, err := m.serverStream(ctx, req)
			if err == nil {
				_, err = st.Recv()
			}
			return err
		}},
		// The middleware refuses to retry client streams.
		{"clientstream", []string{ours, grpcRetry}, func(ctx context.Context, m *mech) error {
			st, err := m.clientStream(ctx)
			if err != nil {
				return err
			}
			st.Send(&testgrpc.StreamingInputCallRequest{Payload: newPayload(*replayPayload)})
			_, err = st.CloseAndRecv()
			return err
		}},
	}
	for _, c := range cases {
		ms := newMechs(b, slow, c.names...)
		for _, m := range ms {
			b.Run(fmt.Sprintf("kind=%s/mech=%s", c.kind, m.name), func(b *testing.B) {
				// The connection's tables grow to hold the crowd once,
				// and keep their size: the first crowd pays for that.
				measureWaiting(b, m, c.call, false)
				for range b.N {
					heap, stack := measureWaiting(b, m, c.call, true)
					b.ReportMetric(heap, "B/wait")
					b.ReportMetric(stack, "stack-B/wait")
				}
			})
		}
	}
}

// measureWaiting starts -waiting.n calls of m, waits until they all wait in
// backoff, and returns the heap and stack bytes each holds. With profile, it
// writes a heap profile if BENCH_HEAPPROFILE names a directory.
func measureWaiting(b *testing.B, m *mech, call func(context.Context, *mech) error, profile bool) (heap, stack float64) {
	srv.reset()
	srv.down.Store(true)
	defer srv.reset()
	before := memStats()
	attempts0, retries0 := srv.attempts.Load(), m.retries.Load()

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	waitingCalls := int64(*waitingN)
	for range waitingCalls {
		wg.Go(func() {
			if err := call(ctx, m); ctx.Err() == nil {
				b.Errorf("%s: call returned before it was canceled: %v", m.name, err)
			}
		})
	}
	// Every call has failed once when the server has seen them all, and
	// waits when the mechanism's hook has seen it retry (grpc's built-in
	// retry has no hook: it gets the settling time, like the others).
	deadline := time.Now().Add(time.Minute)
	for srv.attempts.Load()-attempts0 < waitingCalls || (m.name != grpcRetry && m.retries.Load()-retries0 < waitingCalls) {
		if time.Now().After(deadline) {
			b.Fatalf("%s: %d attempts and %d retries after a minute, want %d", m.name,
				srv.attempts.Load()-attempts0, m.retries.Load()-retries0, waitingCalls)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // from the hook (or the failure) to the timer
	// A few calls may have retried already: gax draws a pause anywhere in
	// [1 ns, 1000 h]; grpc retries transparently a stream refused before
	// the server saw it. They barely change the figure; many would.
	if got := srv.attempts.Load() - attempts0; got > waitingCalls+waitingCalls/100 {
		b.Errorf("%s: %d attempts while waiting, want %d", m.name, got, waitingCalls)
	}
	during := memStats()
	if dir := os.Getenv("BENCH_HEAPPROFILE"); profile && dir != "" {
		writeHeapProfile(b, filepath.Join(dir, strings.NewReplacer("/", "_", "=", "-").Replace(b.Name())+".heap"))
	}
	cancel()
	wg.Wait()
	heap = float64(int64(during.HeapAlloc)-int64(before.HeapAlloc)) / float64(waitingCalls)
	stack = float64(int64(during.StackInuse)-int64(before.StackInuse)) / float64(waitingCalls)
	return heap, stack
}

// writeHeapProfile writes the heap profile to file: with
// -test.memprofilerate 1, it shows who holds what while the calls wait
// (go tool pprof -sample_index inuse_space).
func writeHeapProfile(b *testing.B, file string) {
	f, err := os.Create(file)
	if err == nil {
		err = pprof.WriteHeapProfile(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		b.Fatal(err)
	}
}

// memStats returns the memory statistics after a full collection: HeapAlloc
// is then the live heap.
func memStats() runtime.MemStats {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms
}
