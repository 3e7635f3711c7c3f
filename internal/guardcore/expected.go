package guardcore

import "sync/atomic"

// Expected counts the retries a guard expects: the retriable failures it
// let through, each a retry to come, less the retries that have come since
// (each matched with the oldest failure not yet matched), over the last
// horizon buckets. A failure let through longer ago is expected no more
// (its client gave up, or sends no grpc-previous-rpc-attempts, or waits
// longer: its retry is then counted when it comes). So a retry is counted
// once: expected from its failure on, then as a retry from its arrival.
// Its words are a Window's, their two counts the failures let through in
// the bucket and the retries matched with them. Its zero value expects
// nothing; it reads no clock. It keeps a whole window of buckets: those
// past the horizon hold the failures whose retries never came (see
// expired).
type Expected struct {
	b [buckets]atomic.Uint64
}

// horizon is the number of buckets a failure let through is expected to be
// retried within: half a window, 5 s by default, which holds the first
// backoffs of grpc-go's usual policies and of the Memorystore recipe (1 to
// 2 s, then 2 to 3 s).
const horizon = buckets / 2

// let counts a failure let through in epoch e.
func (x *Expected) let(e int64) { bump(&x.b[e%buckets], e, false, 1) }

// arrive matches a retry that arrives in epoch e with the oldest failure
// let through within the horizon that no retry has matched yet, and
// reports whether there was one.
func (x *Expected) arrive(e int64) bool {
	for ep := max(e-horizon+1, 0); ep <= e; ep++ {
		slot := &x.b[ep%buckets]
		for {
			old := slot.Load()
			if old>>(2*countBits) != uint64(ep)&epochMask || old>>countBits&countMax <= old&countMax {
				break // nothing of ep's left to match
			}
			if slot.CompareAndSwap(old, old+1) {
				return true
			}
		}
	}
	return false
}

// sum returns the failures let through within the horizon whose retries
// have not come.
func (x *Expected) sum(e int64) int64 {
	var n int64
	for i := int64(0); i < horizon && e-i >= 0; i++ {
		let, came := counts(&x.b[(e-i)%buckets], e-i)
		n += let - came
	}
	return n
}

// expired returns the failures let through in the window but before the
// horizon whose retries never came: calls that ended there (out of
// attempts, past their deadline, given up).
func (x *Expected) expired(e int64) int64 {
	var n int64
	for i := int64(horizon); i < buckets && e-i >= 0; i++ {
		let, came := counts(&x.b[(e-i)%buckets], e-i)
		n += let - came
	}
	return n
}

// lets returns the failures let through in the window, retried or not.
func (x *Expected) lets(e int64) int64 {
	var n int64
	for i := int64(0); i < buckets && e-i >= 0; i++ {
		let, _ := counts(&x.b[(e-i)%buckets], e-i)
		n += let
	}
	return n
}
