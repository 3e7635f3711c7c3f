package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

// The paired benchmarks measure what the ratio targets compare: each op is
// one op of the bare column and one of the mechanism, back to back, in
// alternating order, each timed on its own; x-bare is the mechanism's median
// time over bare's. Over bufconn a call takes ~20 µs and, on a shared machine,
// rounds drift by tens of percent: two columns measured seconds apart cannot
// be compared to 2%, but two calls measured microseconds apart can. The
// mech=bare column pairs bare with itself: its distance from 1 is the method's
// own error. ns/call is the mechanism's median time per op, bare-ns/call
// bare's;
// allocs/op counts both ops, and the unpaired benchmarks count each alone.

// maxPairs is how many pairs a paired benchmark keeps the times of.
const maxPairs = 1 << 15

// pairTimes are the times of the first maxPairs pairs of a paired benchmark.
type pairTimes struct{ bare, mech []time.Duration }

func newPairTimes() *pairTimes {
	return &pairTimes{make([]time.Duration, 0, maxPairs), make([]time.Duration, 0, maxPairs)}
}

func (p *pairTimes) add(bare, mech time.Duration) {
	if len(p.bare) < maxPairs {
		p.bare, p.mech = append(p.bare, bare), append(p.mech, mech)
	}
}

// report reports the medians, which a garbage collection or a preemption
// landing on one op moves far less than it moves a mean.
func (p *pairTimes) report(b *testing.B) {
	bare, mech := median(p.bare), median(p.mech)
	b.ReportMetric(float64(mech)/float64(bare), "x-bare")
	b.ReportMetric(float64(mech.Nanoseconds()), "ns/call")
	b.ReportMetric(float64(bare.Nanoseconds()), "bare-ns/call")
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// paired runs the timed loop of a paired benchmark.
func paired(b *testing.B, bareOp, mechOp func() error) {
	warmUp(b, 10, bareOp)
	warmUp(b, 10, mechOp)
	times := newPairTimes()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		first, second := bareOp, mechOp
		if i%2 == 1 {
			first, second = mechOp, bareOp
		}
		start := time.Now()
		if err := first(); err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		if err := second(); err != nil {
			b.Fatal(err)
		}
		d1, d2 := mid.Sub(start), time.Since(mid)
		if i%2 == 1 {
			d1, d2 = d2, d1
		}
		times.add(d1, d2)
	}
	times.report(b)
}

// pairedMechs runs one paired sub-benchmark per mechanism of ms (ms[0] is
// bare) with op.
func pairedMechs(b *testing.B, prefix string, ms []*mech, op func(m *mech) func() error) {
	if ms[0].name != bare {
		panic("bench: the first mechanism must be bare")
	}
	for _, i := range order(b, len(ms)) {
		m := ms[i]
		b.Run(prefix+"mech="+m.name, func(b *testing.B) {
			paired(b, op(ms[0]), op(m))
		})
	}
}

func BenchmarkPairedUnary(b *testing.B) {
	ctx, req := context.Background(), successRequest()
	pairedMechs(b, "", newMechs(b, defaults, unaryNames...), func(m *mech) func() error {
		return func() error { return m.unary(ctx, req) }
	})
}

func BenchmarkPairedUnaryRetry(b *testing.B) {
	ctx, req := context.Background(), flakyRequest()
	srv.reset()
	pairedMechs(b, "", newMechs(b, fast, unaryNames...), func(m *mech) func() error {
		return func() error { return m.unaryRetried(ctx, req) }
	})
}

// BenchmarkPairedUnaryParallel pairs calls within each goroutine of
// BenchmarkUnaryParallel's crowd.
func BenchmarkPairedUnaryParallel(b *testing.B) {
	ms := newMechs(b, defaults, unaryNames...)
	for _, i := range order(b, len(ms)) {
		m := ms[i]
		b.Run("mech="+m.name, func(b *testing.B) { pairedParallel(b, ms[0], m) })
	}
}

// pairedParallel pairs successful unary calls of base and m within each of
// 4 goroutines per core.
func pairedParallel(b *testing.B, base, m *mech) {
	var mu sync.Mutex
	times := newPairTimes()
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		ctx, req := context.Background(), successRequest()
		for j := 0; pb.Next(); j++ {
			first, second := base, m
			if j%2 == 1 {
				first, second = m, base
			}
			start := time.Now()
			err := first.unary(ctx, req)
			mid := time.Now()
			if err == nil {
				err = second.unary(ctx, req)
			}
			if err != nil {
				b.Error(err)
				return
			}
			d1, d2 := mid.Sub(start), time.Since(mid)
			if j%2 == 1 {
				d1, d2 = d2, d1
			}
			mu.Lock()
			times.add(d1, d2)
			mu.Unlock()
		}
	})
	times.report(b)
}

func BenchmarkPairedServerStream(b *testing.B) {
	ms := newMechs(b, defaults, streamNames...)
	for _, n := range streamMsgs {
		ctx, req := context.Background(), outputRequest(n)
		pairedMechs(b, fmt.Sprintf("msgs=%d/", n), ms, func(m *mech) func() error {
			return func() error { return serverStream(ctx, m, req, n) }
		})
	}
}

func BenchmarkPairedClientStream(b *testing.B) {
	ms := newMechs(b, defaults, sendingNames...)
	ctx, req := context.Background(), &testgrpc.StreamingInputCallRequest{Payload: newPayload(payloadSize)}
	for _, n := range streamMsgs {
		pairedMechs(b, fmt.Sprintf("msgs=%d/", n), ms, func(m *mech) func() error {
			return func() error { return clientStream(ctx, m, req, n) }
		})
	}
}

func BenchmarkPairedBidiStream(b *testing.B) {
	ms := newMechs(b, defaults, sendingNames...)
	ctx, req := context.Background(), outputRequest(1)
	for _, n := range streamMsgs {
		pairedMechs(b, fmt.Sprintf("msgs=%d/", n), ms, func(m *mech) func() error {
			return func() error { return bidiStream(ctx, m, req, n) }
		})
	}
}
