package unary

import (
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/platformkit/grpcbackoff/internal/attempt"
	"github.com/platformkit/grpcbackoff/internal/loop"
)

// unaryState holds what an attempt needs besides the caller's arguments:
// the call options with the Retrier's mark and, for an attempt that may be
// retried, those by which grpc-go tells what became of it (attempt.Facts). It
// is pooled so that a call that succeeds allocates nothing.
//
// It also names the stripe of the budgets' counters of successes that the
// attempts it serves count on (budget.Budget.SucceededOn): the pool keeps
// its states per processor, so the successes of calls on every core do not
// all write one counter's cache line. For the same reason a state, which
// every call writes (its options, the facts grpc-go writes back), and its
// option array are whole 64-byte cache lines: two processors' states never
// share one (bench/README.md).
type unaryState struct {
	facts                                         attempt.Facts
	readHeader, readPeer, readTrailer, readFinish grpc.CallOption // of facts, made once
	opts                                          []grpc.CallOption
	stripe                                        int
	_                                             [24]byte // to 192 bytes (TestUnaryStateLines)
}

// stripes numbers the unaryStates, to give each a stripe.
var stripes atomic.Int64

var unaryStates = sync.Pool{New: func() any {
	s := &unaryState{stripe: int(stripes.Add(1))}
	s.readHeader, s.readPeer, s.readFinish, s.readTrailer = s.facts.Options()
	return s
}}

// getUnaryState returns a state whose options are opts, then the layer mark
// (loop.Mark), then, with facts, grpc.Header, grpc.Peer and grpc.OnFinish
// of its facts, and grpc.Trailer too with trailer (pushback).
func getUnaryState(opts []grpc.CallOption, facts, trailer bool) *unaryState {
	s := unaryStates.Get().(*unaryState)
	n := len(opts)
	if cap(s.opts) < n+6 { // and one more: connpolicy.Attempts'
		s.opts = make([]grpc.CallOption, 0, (n+6+3)&^3) // 4 options a cache line
	}
	s.opts = s.opts[:n+1]
	if n > 0 {
		copy(s.opts, opts)
	}
	s.opts[n] = loop.Mark
	if facts {
		s.facts.Reset()
		s.opts = append(s.opts, s.readHeader, s.readPeer, s.readFinish)
		if trailer {
			s.opts = append(s.opts, s.readTrailer)
		}
	}
	return s
}

// release puts s back in the pool. Its option slice keeps the last call's
// options until it is reused, as the pool drops it at the next collections.
func (s *unaryState) release() {
	s.opts = s.opts[:0]
	s.facts.Reset()
	unaryStates.Put(s)
}
