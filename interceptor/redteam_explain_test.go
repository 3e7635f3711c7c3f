package interceptor_test

import (
	"strings"
	"testing"
	"time"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// TestRedteamExplainHedgedServiceWrite (red team, issue 42): a service's
// hedging entry (WithHedging for unmarked.Orders, nothing else) does not
// hedge the service's writes nobody marked; their calls follow the
// Retrier's own Policy (TestUnmarkedHedging). Explain must say where that
// Policy comes from: the Retrier's, as it says for the service's hedged
// read. It names "WithMethod or WithServiceConfig for /unmarked.Orders/",
// options the Retrier was never given.
func TestRedteamExplainHedgedServiceWrite(t *testing.T) {
	r, err := interceptor.New(bufconntest.Exact(), interceptor.WithHedging("/unmarked.Orders/", grpcbackoff.Hedging{MaxAttempts: 2, Delay: 10 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	read, write := r.Explain("/unmarked.Orders/GetOrder").String(), r.Explain("/unmarked.Orders/CreateOrder").String()
	t.Logf("read: %s\nwrite: %s", read, write)
	if !strings.Contains(read, "[the Retrier's Policy]") {
		t.Errorf("Explain(GetOrder) = %s; want its Policy said to be the Retrier's", read)
	}
	if !strings.Contains(write, "[the Retrier's Policy]") || strings.Contains(write, "WithMethod or WithServiceConfig") {
		t.Errorf("Explain(CreateOrder) = %s; want its Policy said to be the Retrier's, not WithMethod's or WithServiceConfig's", write)
	}
}
