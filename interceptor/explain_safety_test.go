package interceptor_test

import (
	"strings"
	"testing"
	"time"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// TestExplainSaysHedgingSkipsAWrite: Explain says of a write that its
// service's hedging entry does not hedge it, and of nothing else: not of
// the service's read, which it hedges, nor of a write with no hedging.
func TestExplainSaysHedgingSkipsAWrite(t *testing.T) {
	const skips = "; not hedged by the hedging entry of /unmarked.Orders/, which skips a method treated as a write"
	hedged, err := interceptor.New(bufconntest.Exact(), interceptor.WithHedging("/unmarked.Orders/", grpcbackoff.Hedging{MaxAttempts: 2, Delay: 10 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := interceptor.New(bufconntest.Exact())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		r      *interceptor.Retrier
		method string
		says   bool
	}{
		{hedged, "/unmarked.Orders/CreateOrder", true},
		{hedged, "/unmarked.Orders/GetOrder", false},
		{plain, "/unmarked.Orders/CreateOrder", false},
	} {
		d := tc.r.Explain(tc.method)
		if strings.HasSuffix(d.Source, skips) != tc.says || d.PolicySource != "the Retrier's Policy" {
			t.Errorf("Explain(%s): Source %q, PolicySource %q; want the hedging's skip said %v, the Retrier's Policy", tc.method, d.Source, d.PolicySource, tc.says)
		}
	}
}
