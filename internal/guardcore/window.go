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

// A bucket's word: the low epochBits of its epoch, then two counts (a
// Window's first tries and retries, an Expected's failures let through and
// retries arrived), countBits each. A count stops at countMax (4 194 303 in
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
func (w *Window) add(e int64, retry bool) { bump(&w.b[e%buckets], e, retry, 1) }

// addN adds n to the second count (the first if !second) of epoch e.
func (w *Window) addN(e int64, second bool, n int64) { bump(&w.b[e%buckets], e, second, n) }

// sum returns the first tries and retries counted in epochs e−buckets+1
// to e.
func (w *Window) sum(e int64) (first, retries int64) {
	for i := int64(0); i < buckets && e-i >= 0; i++ {
		a, b := counts(&w.b[(e-i)%buckets], e-i)
		first += a
		retries += b
	}
	return first, retries
}

// recent returns the counts of epochs e−horizon+1 to e: the last half of
// the window.
func (w *Window) recent(e int64) (first, second int64) {
	for i := int64(0); i < horizon && e-i >= 0; i++ {
		a, b := counts(&w.b[(e-i)%buckets], e-i)
		first += a
		second += b
	}
	return first, second
}

// span returns sum's counts, and the epoch of the oldest bucket of the
// window with a count (e if none).
func (w *Window) span(e int64) (first, retries, since int64) {
	since = e
	for i := int64(0); i < buckets && e-i >= 0; i++ {
		a, b := counts(&w.b[(e-i)%buckets], e-i)
		if a+b > 0 {
			since = e - i
		}
		first += a
		retries += b
	}
	return first, retries, since
}

// bump adds n (at least 1) to the first count of the bucket word slot (the
// second if second), for epoch e: from zero if slot holds another epoch. A
// count stops at countMax.
func bump(slot *atomic.Uint64, e int64, second bool, n int64) {
	tag := uint64(e) & epochMask
	for {
		old := slot.Load()
		a, b := uint64(0), uint64(0)
		if old>>(2*countBits) == tag {
			a, b = old>>countBits&countMax, old&countMax
		}
		if second {
			b = min(b+uint64(n), countMax)
		} else {
			a = min(a+uint64(n), countMax)
		}
		if slot.CompareAndSwap(old, tag<<(2*countBits)|a<<countBits|b) {
			return
		}
	}
}

// counts returns the two counts of the bucket word slot for epoch e: zero
// if it holds another epoch.
func counts(slot *atomic.Uint64, e int64) (a, b int64) {
	v := slot.Load()
	if v>>(2*countBits) != uint64(e)&epochMask {
		return 0, 0
	}
	return int64(v >> countBits & countMax), int64(v & countMax)
}
