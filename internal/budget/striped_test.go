package budget_test

import (
	"sync/atomic"
	"testing"

	"github.com/platformkit/grpcbackoff"
)

var stripeN atomic.Int64

// BenchmarkSuccessPathStriped is BenchmarkSuccessPath with each goroutine
// counting its successes on a stripe of its own, as the interceptor's
// pooled call states do (one per processor).
func BenchmarkSuccessPathStriped(b *testing.B) {
	bt := newBudget(grpcbackoff.DefaultThrottle())
	b.RunParallel(func(pb *testing.PB) {
		i := int(stripeN.Add(1))
		for pb.Next() {
			bt.Started()
			bt.SucceededOn(i)
		}
	})
}
