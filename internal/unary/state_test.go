package unary

import (
	"testing"
	"unsafe"

	"google.golang.org/grpc"
)

// TestUnaryStateLines: a unary call's pooled state, which every call
// writes, is a whole number of 64-byte cache lines, and so is its option
// array, whatever the caller's options: the allocator then places each on
// lines of its own, and two processors' calls never write one line (a 168
// byte state, next to another's, cost a call 45% more at -cpu 2 in
// BenchmarkIsolatedParallel).
func TestUnaryStateLines(t *testing.T) {
	if size := unsafe.Sizeof(unaryState{}); size%64 != 0 {
		t.Errorf("unaryState is %d bytes, not a whole number of 64-byte lines: change its padding", size)
	}
	for n := range 20 {
		s := getUnaryState(make([]grpc.CallOption, n), true, true)
		if c := cap(s.opts); c*int(unsafe.Sizeof(s.opts[0]))%64 != 0 || c < n+5 {
			t.Errorf("%d options: an array of %d, want whole lines of at least %d", n, c, n+5)
		}
		s.release()
	}
}
