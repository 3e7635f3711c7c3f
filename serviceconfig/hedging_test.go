package serviceconfig_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/serviceconfig"
)

func TestParseHedgingPolicy(t *testing.T) {
	doc := `{"methodConfig": [
	  {"name": [{"service": "pkg.Svc", "method": "Get"}],
	   "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.015s", "nonFatalStatusCodes": ["UNAVAILABLE", 4, "UNAVAILABLE"]}},
	  {"name": [{"service": "pkg.Svc"}], "hedgingPolicy": {"maxAttempts": 8, "hedgingDelay": "1s"}},
	  {"name": [{"service": "pkg.Other"}], "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0s", "nonFatalStatusCodes": []}}
	]}`
	sc, err := serviceconfig.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := []serviceconfig.Method{
		{Names: []string{"/pkg.Svc/Get"}, Hedging: &grpcbackoff.Hedging{MaxAttempts: 3, Delay: 15 * time.Millisecond, NonFatalCodes: []codes.Code{codes.Unavailable, codes.DeadlineExceeded}}},
		{Names: []string{"/pkg.Svc/"}, Hedging: &grpcbackoff.Hedging{MaxAttempts: 8, Delay: time.Second}},
		{Names: []string{"/pkg.Other/"}, Hedging: &grpcbackoff.Hedging{MaxAttempts: 2}},
	}
	if !reflect.DeepEqual(sc.Methods, want) {
		t.Errorf("Methods =\n%+v\nwant\n%+v", sc.Methods, want)
	}
}

func TestParseHedgingPolicyErrors(t *testing.T) {
	cases := []struct {
		policy string
		want   []string
	}{
		{`{}`, []string{"methodConfig[0].hedgingPolicy.maxAttempts is required", "methodConfig[0].hedgingPolicy.hedgingDelay is required"}},
		{`{"maxAttempts": 1, "hedgingDelay": "0s"}`, []string{"methodConfig[0].hedgingPolicy.maxAttempts: 1 must be at least 2"}},
		{`{"maxAttempts": 2.5, "hedgingDelay": "0s"}`, []string{"maxAttempts: 2.5 is not an integer"}},
		{`{"maxAttempts": 2, "hedgingDelay": "-1s"}`, []string{`methodConfig[0].hedgingPolicy.hedgingDelay: "-1s" must not be negative`}},
		{`{"maxAttempts": 2, "hedgingDelay": "10ms"}`, []string{`hedgingDelay: "10ms" is not a duration like "0.1s"`}},
		{`{"maxAttempts": 2, "hedgingDelay": 1}`, []string{`hedgingDelay: 1 is not a duration`}},
		{`{"maxAttempts": 2, "hedgingDelay": "0s", "nonFatalStatusCodes": ["OK", "unavailable", 99]}`, []string{
			`nonFatalStatusCodes[0]: "OK" is not an error`,
			`nonFatalStatusCodes[1]: "unavailable" is not a status code name: names are upper case`,
			`nonFatalStatusCodes[2]: 99 is not a status code`}},
		{`{"maxAttempts": 2, "hedgingDelay": "0s", "nonFatalStatusCodes": "UNAVAILABLE"}`, []string{`nonFatalStatusCodes: "UNAVAILABLE" is not an array`}},
		{`[]`, []string{`methodConfig[0].hedgingPolicy: [] is not an object`}},
	}
	for _, tc := range cases {
		doc := `{"methodConfig": [{"name": [{"service": "pkg.Svc"}], "hedgingPolicy": ` + tc.policy + `}]}`
		_, err := serviceconfig.Parse([]byte(doc))
		if err == nil {
			t.Errorf("%s: no error", tc.policy)
			continue
		}
		if n := strings.Count(err.Error(), "\n") + 1; n != len(tc.want) {
			t.Errorf("%s: %d errors, want %d: %v", tc.policy, n, len(tc.want), err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", tc.policy, err, w)
			}
		}
	}
}

// TestParseRetryAndHedgingPolicy: an entry with both a retryPolicy and a
// hedgingPolicy is retried, its hedgingPolicy left out, as grpc-go v1.85
// reads it (it accepts the document and does not hedge; see
// TestServiceConfigRetryWinsOverHedging in the interceptor's tests for what
// its calls do). A malformed hedgingPolicy beside it is refused, as alone:
// a documented difference, as grpc-go ignores the field. (Issue 34: Parse
// refused the entry.)
func TestParseRetryAndHedgingPolicy(t *testing.T) {
	const retry = `"retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}`
	doc := `{"methodConfig": [{"name": [{"service": "pkg.Svc"}], ` + retry + `, "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.1s"}}]}`
	sc, err := serviceconfig.Parse([]byte(doc))
	if err != nil || grpcVerdict([]byte(doc)) != nil {
		t.Fatalf("Parse: %v; grpc-go: %v; want both to accept", err, grpcVerdict([]byte(doc)))
	}
	want := []serviceconfig.Method{{Names: []string{"/pkg.Svc/"}, Policy: scPolicy(100*time.Millisecond, time.Second, 2, 4, codes.Unavailable)}}
	if !reflect.DeepEqual(sc.Methods, want) {
		t.Errorf("Methods = %s, want the retryPolicy alone", scString(sc))
	}

	bad := `{"methodConfig": [{"name": [{"service": "pkg.Svc"}], ` + retry + `, "hedgingPolicy": {"maxAttempts": 1, "hedgingDelay": "0.1s"}}]}`
	if _, err := serviceconfig.Parse([]byte(bad)); err == nil || !strings.Contains(err.Error(), "methodConfig[0].hedgingPolicy.maxAttempts: 1 must be at least 2") {
		t.Errorf("a malformed hedgingPolicy beside a retryPolicy: %v, want its error", err)
	}
	if err := grpcVerdict([]byte(bad)); err != nil {
		t.Errorf("grpc-go refuses a malformed hedgingPolicy beside a retryPolicy: %v; the package documents that it ignores the field", err)
	}
}
