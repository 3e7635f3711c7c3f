package main

import (
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"
)

// TestRun plays the script in a synctest bubble, where its timing is exact,
// and checks the summary line by line and the exported JSON's instruments.
func TestRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out strings.Builder
		if err := run(t.Context(), &out); err != nil {
			t.Fatal(err)
		}
		exported, summary, ok := strings.Cut(out.String(), "\nAfter ")
		if !ok {
			t.Fatalf("no summary in the output:\n%s", out.String())
		}
		if got := "After " + summary; got != wantSummary {
			t.Errorf("summary:\n%s\nwant:\n%s", got, wantSummary)
		}

		var rm struct {
			ScopeMetrics []struct {
				Metrics []struct {
					Name, Unit string
					Data       struct {
						DataPoints []struct {
							Bounds []float64
						}
					}
				}
			}
		}
		if err := json.Unmarshal([]byte(exported), &rm); err != nil {
			t.Fatalf("the export is not one JSON object: %v", err)
		}
		got := map[string]string{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				got[m.Name] = m.Unit
				if m.Name == "grpc.client.call.retries" {
					for _, dp := range m.Data.DataPoints {
						if len(dp.Bounds) != 5 || dp.Bounds[0] != 1 || dp.Bounds[4] != 5 {
							t.Errorf("%s: bounds %v, want [1 2 3 4 5]", m.Name, dp.Bounds)
						}
					}
				}
			}
		}
		for name, unit := range map[string]string{
			"grpc.client.call.retries":            "{retry}",
			"grpc.client.call.retry_delay":        "s",
			"grpcbackoff.client.call.gave_up":     "{call}",
			"grpcbackoff.client.budget.refused":   "{attempt}",
			"grpcbackoff.client.budget.available": "{retry}",
		} {
			if got[name] != unit {
				t.Errorf("exported %s with unit %q, want %q (exported: %v)", name, got[name], unit, got)
			}
		}
	})
}

// wantSummary is the story of the script, per client (each has its own
// budget of 5 retries): the call started at 0.5 s retries at 0.6, 0.8 and
// 1.2 s and gives up at its deadline (next retry at 2.0 s, past 1.5 s): 3
// retries, 0.7 s of delay; the next one, at 1.25 s, retries twice (0.3 s)
// and finds the budget empty at 1.55 s; the two after it are refused their
// first retry; the call at 1.7 s finds the outage over. The three budgets
// hold 8.70 retries at the end.
const wantSummary = `After 2.5s of traffic with an outage from 500ms to 1.7s:
grpc.client.call.retries
  {grpc.method=grpc.testing.TestService/EmptyCall, grpc.target=passthrough:///in-process}: 2 calls, 5 in all
  {grpc.method=grpc.testing.TestService/StreamingOutputCall, grpc.target=passthrough:///in-process}: 2 calls, 5 in all
  {grpc.method=grpc.testing.TestService/UnaryCall, grpc.target=passthrough:///in-process}: 2 calls, 5 in all
grpc.client.call.retry_delay
  {grpc.method=grpc.testing.TestService/EmptyCall, grpc.target=passthrough:///in-process}: 2 calls, 1.00 s in all
  {grpc.method=grpc.testing.TestService/StreamingOutputCall, grpc.target=passthrough:///in-process}: 2 calls, 1.00 s in all
  {grpc.method=grpc.testing.TestService/UnaryCall, grpc.target=passthrough:///in-process}: 2 calls, 1.00 s in all
grpc.client.call.hedges
  (no data: the interceptors do not hedge yet)
grpc.client.call.transparent_retries
  (no data: never recorded: grpc-go does not show transparent retries to interceptors)
grpcbackoff.client.call.gave_up
  {grpc.method=grpc.testing.TestService/EmptyCall, grpc.status=UNAVAILABLE, grpc.target=passthrough:///in-process, grpcbackoff.reason=deadline}: 1
  {grpc.method=grpc.testing.TestService/EmptyCall, grpc.status=UNAVAILABLE, grpc.target=passthrough:///in-process, grpcbackoff.reason=throttled}: 3
  {grpc.method=grpc.testing.TestService/StreamingOutputCall, grpc.status=UNAVAILABLE, grpc.target=passthrough:///in-process, grpcbackoff.reason=deadline}: 1
  {grpc.method=grpc.testing.TestService/StreamingOutputCall, grpc.status=UNAVAILABLE, grpc.target=passthrough:///in-process, grpcbackoff.reason=throttled}: 3
  {grpc.method=grpc.testing.TestService/UnaryCall, grpc.status=UNAVAILABLE, grpc.target=passthrough:///in-process, grpcbackoff.reason=deadline}: 1
  {grpc.method=grpc.testing.TestService/UnaryCall, grpc.status=UNAVAILABLE, grpc.target=passthrough:///in-process, grpcbackoff.reason=throttled}: 3
grpcbackoff.client.budget.refused
  {grpc.method=grpc.testing.TestService/EmptyCall, grpc.target=passthrough:///in-process, grpcbackoff.attempt_type=retry}: 3
  {grpc.method=grpc.testing.TestService/StreamingOutputCall, grpc.target=passthrough:///in-process, grpcbackoff.attempt_type=retry}: 3
  {grpc.method=grpc.testing.TestService/UnaryCall, grpc.target=passthrough:///in-process, grpcbackoff.attempt_type=retry}: 3
grpcbackoff.client.budget.available
  {grpc.target=passthrough:///in-process}: 8.70
`
