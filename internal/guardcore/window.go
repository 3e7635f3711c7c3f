package guardcore

import "sync/atomic"

// A Window counts first tries and retries over the last buckets buckets of
// time, the current one included. Each bucket is one atomic word holding the
// bucket's number (its epoch, the time divided by the bucket's width) and its
// two counts, so that adding is a compare-and-swap and a bucket reused for a
// later epoch starts from zero, without a lock and without losing a count to
// a reset racing an add. Its zero value is an empty window. It reads no
// clock: the epoch is an argument.
type Window struct {
	b [buckets]atomic.Uint64
}

// buckets is the number of buckets of a Window: Params.Window / buckets is
// the width of one, and the window slides by that step.
const buckets = 10

// A bucket's word: the low epochBits of its epoch, then its first tries,
// then its retries, countBits each. A count stops at countMax (4 194 303 in
// one bucket of one method). Epochs are compared modulo 2^epochBits: a
// bucket last written exactly a multiple of 2^20 epochs ago (12 days with
// 1 s buckets) that was not written since would read as current.
const (
	countBits = 22
	epochBits = 64 - 2*countBits
	countMax  = 1<<countBits - 1
	epochMask = 1<<epochBits - 1
)

// add counts one attempt, a retry or a first try, in epoch e.
func (w *Window) add(e int64, retry bool) {
	slot := &w.b[e%buckets]
	tag := uint64(e) & epochMask
	for {
		old := slot.Load()
		first, retries := uint64(0), uint64(0)
		if old>>(2*countBits) == tag {
			first, retries = old>>countBits&countMax, old&countMax
		}
		switch {
		case retry && retries < countMax:
			retries++
		case !retry && first < countMax:
			first++
		}
		if slot.CompareAndSwap(old, tag<<(2*countBits)|first<<countBits|retries) {
			return
		}
	}
}

// sum returns the first tries and retries counted in epochs e−buckets+1
// to e.
func (w *Window) sum(e int64) (first, retries int64) {
	for i := int64(0); i < buckets; i++ {
		ep := e - i
		if ep < 0 {
			break
		}
		v := w.b[ep%buckets].Load()
		if v>>(2*countBits) == uint64(ep)&epochMask {
			first += int64(v >> countBits & countMax)
			retries += int64(v & countMax)
		}
	}
	return first, retries
}

// over reports whether retries are more than share of all the attempts.
func over(first, retries int64, share float64) bool {
	return float64(retries) > share*float64(first+retries)
}
