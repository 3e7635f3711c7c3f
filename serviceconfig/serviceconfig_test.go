package serviceconfig_test

import (
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/budget"
	"github.com/platformkit/grpcbackoff/serviceconfig"
)

// scGRPCDoc is a service config in the style of grpc's documentation
// (grpc/doc/service_config.md and the retry examples of grpc-go), with the
// fields grpcbackoff does not read left in.
const scGRPCDoc = `{
  "loadBalancingConfig": [{"round_robin": {}}],
  "methodConfig": [
    {
      "name": [
        {"service": "google.cloud.redis.v1.CloudRedis", "method": "GetInstance"},
        {"service": "google.cloud.redis.v1.CloudRedis", "method": "ListInstances"}
      ],
      "waitForReady": true,
      "timeout": "30s",
      "retryPolicy": {
        "maxAttempts": 4,
        "initialBackoff": "0.1s",
        "maxBackoff": "1s",
        "backoffMultiplier": 2,
        "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]
      }
    },
    {
      "name": [{"service": "google.cloud.redis.v1.CloudRedis", "method": "CreateInstance"}],
      "timeout": "600s"
    },
    {
      "name": [{"service": "google.longrunning.Operations"}],
      "retryPolicy": {
        "maxAttempts": 8,
        "initialBackoff": "2s",
        "maxBackoff": "64s",
        "backoffMultiplier": 2,
        "retryableStatusCodes": [14]
      }
    },
    {
      "name": [{}],
      "retryPolicy": {
        "maxAttempts": 3,
        "initialBackoff": "1.5s",
        "maxBackoff": "10s",
        "backoffMultiplier": 1.5,
        "retryableStatusCodes": ["UNAVAILABLE", 10, "UNAVAILABLE"]
      }
    }
  ],
  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
}`

// scPolicy builds the Policy ParseServiceConfig should make of an A6
// retryPolicy, spelled out.
func scPolicy(initial, maxDelay time.Duration, mult float64, attempts int, cs ...codes.Code) *grpcbackoff.Policy {
	return &grpcbackoff.Policy{Initial: initial, Multiplier: mult, Max: maxDelay, JitterFactor: 0.2, MaxAttempts: attempts, Codes: cs}
}

// scString prints a ServiceConfig without pointers, for messages.
func scString(sc serviceconfig.Config) string {
	var b strings.Builder
	for _, m := range sc.Methods {
		fmt.Fprintf(&b, "%q:", m.Names)
		if m.Policy == nil {
			b.WriteString("no retry")
		} else {
			fmt.Fprintf(&b, "%+v", *m.Policy)
		}
		if m.Timeout != 0 {
			fmt.Fprintf(&b, " timeout %v", m.Timeout)
		}
		b.WriteString("; ")
	}
	if sc.Throttle != nil {
		fmt.Fprintf(&b, "throttle %+v", *sc.Throttle)
	}
	return "{" + strings.TrimSuffix(b.String(), "; ") + "}"
}

// scCase is a service config document and what ParseServiceConfig makes
// of it.
type scCase struct {
	name string
	doc  string
	want serviceconfig.Config
}

// scValidCases are documents that both grpcbackoff and grpc-go accept.
func scValidCases() []scCase {
	const redis = "/google.cloud.redis.v1.CloudRedis/"
	type mc = serviceconfig.Method
	un, re := codes.Unavailable, codes.ResourceExhausted
	// rp is a retryPolicy with every field valid, for cases that vary one.
	rp := func(fields string) string {
		return `{"methodConfig": [{"name": [{"service": "s.S"}], "retryPolicy": {` + fields + `}}]}`
	}
	return []scCase{
		{"grpc docs style", scGRPCDoc, serviceconfig.Config{
			Methods: []mc{
				{Names: []string{redis + "GetInstance", redis + "ListInstances"},
					Policy: scPolicy(100*time.Millisecond, time.Second, 2, 4, un, re), Timeout: 30 * time.Second},
				{Names: []string{redis + "CreateInstance"}, Timeout: 600 * time.Second},
				{Names: []string{"/google.longrunning.Operations/"},
					Policy: scPolicy(2*time.Second, 64*time.Second, 2, 8, un)},
				{Names: []string{""},
					Policy: scPolicy(1500*time.Millisecond, 10*time.Second, 1.5, 3, un, codes.Aborted)},
			},
			Throttle: &grpcbackoff.Throttle{Ratio: 0.1, PerSecond: 0, Burst: 5, Reserve: 0.1, Window: 10 * time.Second},
		}},
		{"empty object", `{}`, serviceconfig.Config{}},
		{"nulls are absent", `{"methodConfig": null, "retryThrottling": null}`, serviceconfig.Config{}},
		{"only load balancing", `{"loadBalancingPolicy": "round_robin"}`, serviceconfig.Config{}},
		{"entries without names are skipped", `{"methodConfig": [{"retryPolicy": null}, {"name": []}, {"name": [{"service": "s.S"}]}]}`,
			serviceconfig.Config{Methods: []mc{{Names: []string{"/s.S/"}}}}},
		{"null and empty method name the service", `{"methodConfig": [{"name": [{"service": "a.A", "method": null}, {"service": "b.B", "method": ""}, {"service": null}]}]}`,
			serviceconfig.Config{Methods: []mc{{Names: []string{"/a.A/", "/b.B/", ""}}}}},
		{"field names match case-insensitively, as in grpc-go", `{"MethodConfig": [{"Name": [{"Service": "s.S", "METHOD": "M"}], "RetryPolicy": {"MaxAttempts": 2, "InitialBackoff": "1s", "MaxBackoff": "2s", "BackoffMultiplier": 1, "RetryableStatusCodes": ["ABORTED"]}}]}`,
			serviceconfig.Config{Methods: []mc{{Names: []string{"/s.S/M"}, Policy: scPolicy(time.Second, 2*time.Second, 1, 2, codes.Aborted)}}}},
		{"maxAttempts above grpc-go's cap of 5 is kept", rp(`"maxAttempts": 10, "initialBackoff": "1s", "maxBackoff": "2s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]`),
			serviceconfig.Config{Methods: []mc{{Names: []string{"/s.S/"}, Policy: scPolicy(time.Second, 2*time.Second, 2, 10, un)}}}},
		{"maxBackoff below initialBackoff caps every delay", rp(`"maxAttempts": 2, "initialBackoff": "4s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]`),
			serviceconfig.Config{Methods: []mc{{Names: []string{"/s.S/"}, Policy: scPolicy(time.Second, time.Second, 2, 2, un)}}}},
		{"duration forms", rp(`"maxAttempts": 2, "initialBackoff": ".000000003s", "maxBackoff": "1.000000001s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]`),
			serviceconfig.Config{Methods: []mc{{Names: []string{"/s.S/"}, Policy: scPolicy(3, 1000000001, 2, 2, un)}}}},
		{"perAttemptRecvTimeout is the AttemptTimeout", rp(`"maxAttempts": 3, "initialBackoff": "1s", "maxBackoff": "2s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"], "perAttemptRecvTimeout": "10s"`),
			serviceconfig.Config{Methods: []mc{{Names: []string{"/s.S/"}, Policy: func() *grpcbackoff.Policy {
				p := scPolicy(time.Second, 2*time.Second, 2, 3, un)
				p.AttemptTimeout = 10 * time.Second
				return p
			}()}}}},
		{"every code name and number", rp(`"maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 1, "retryableStatusCodes": ["CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED", 1, 16]`),
			serviceconfig.Config{Methods: []mc{{Names: []string{"/s.S/"}, Policy: scPolicy(time.Second, time.Second, 1, 2,
				1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)}}}},
		{"throttling with a small bucket and a large ratio", `{"retryThrottling": {"maxTokens": 1, "tokenRatio": 2.5}}`,
			serviceconfig.Config{Throttle: &grpcbackoff.Throttle{Ratio: 1, Burst: 1, Reserve: 1, Window: 10 * time.Second}}},
		{"throttling at the limits", `{"retryThrottling": {"maxTokens": 1000, "tokenRatio": 0.001}}`,
			serviceconfig.Config{Throttle: &grpcbackoff.Throttle{Ratio: 0.001, Burst: 500, Reserve: 0.001, Window: 10 * time.Second}}},
		// grpc-go's reading of null, which Parse refused before issue 20.
		{"a null document is no configuration", `null`, serviceconfig.Config{}},
		{"a null entry is skipped", `{"methodConfig": [null, {"name": [{"service": "s.S"}]}]}`,
			serviceconfig.Config{Methods: []mc{{Names: []string{"/s.S/"}}}}},
		{"a null name is the default", `{"methodConfig": [{"name": [null]}]}`,
			serviceconfig.Config{Methods: []mc{{Names: []string{""}}}}},
		{"a null code is none", rp(`"maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE", null]`),
			serviceconfig.Config{Methods: []mc{{Names: []string{"/s.S/"}, Policy: scPolicy(time.Second, time.Second, 1, 2, un)}}}},
		{"timeout", `{"methodConfig": [{"name": [{"service": "a.A"}], "timeout": "1.5s"}, {"name": [{"service": "b.B"}], "timeout": "-1s"}, {"name": [{"service": "c.C"}], "timeout": null}]}`,
			serviceconfig.Config{Methods: []mc{{Names: []string{"/a.A/"}, Timeout: 1500 * time.Millisecond}, {Names: []string{"/b.B/"}}, {Names: []string{"/c.C/"}}}}},
	}
}

func TestParse(t *testing.T) {
	for _, tc := range scValidCases() {
		t.Run(tc.name, func(t *testing.T) {
			got, err := serviceconfig.Parse([]byte(tc.doc))
			if err != nil {
				t.Fatalf("Parse(%s): err = %v, want nil", tc.doc, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Parse(%s) = %s, want %s", tc.doc, scString(got), scString(tc.want))
			}
			for i, m := range got.Methods {
				if m.Policy != nil {
					if err := m.Policy.Validate(); err != nil {
						t.Errorf("Parse(%s): Methods[%d].Policy.Validate() = %v, want nil", tc.doc, i, err)
					}
				}
			}
			if got.Throttle != nil {
				if err := got.Throttle.Validate(); err != nil {
					t.Errorf("Parse(%s): Throttle.Validate() = %v, want nil", tc.doc, err)
				}
			}
		})
	}
}

// scBadCase is a document ParseServiceConfig refuses, and the errors it
// returns.
type scBadCase struct {
	name string
	doc  string
	want []string // one per error, each the start of its line
}

func scInvalidCases() []scBadCase {
	// rp is a document whose one retryPolicy has the given fields; ok is a
	// valid set of fields to vary.
	rp := func(fields string) string {
		return `{"methodConfig": [{"name": [{"service": "s.S"}], "retryPolicy": {` + fields + `}}]}`
	}
	ok := map[string]string{
		"maxAttempts":          `3`,
		"initialBackoff":       `"0.1s"`,
		"maxBackoff":           `"1s"`,
		"backoffMultiplier":    `2`,
		"retryableStatusCodes": `["UNAVAILABLE"]`,
	}
	with := func(field, value string) string {
		var fs []string
		for _, f := range []string{"maxAttempts", "initialBackoff", "maxBackoff", "backoffMultiplier", "retryableStatusCodes"} {
			v := ok[f]
			if f == field {
				v = value
			}
			if v != "" {
				fs = append(fs, fmt.Sprintf("%q: %s", f, v))
			}
		}
		return rp(strings.Join(fs, ", "))
	}
	const path = "serviceconfig: methodConfig[0].retryPolicy."
	return []scBadCase{
		// Refused by grpc-go too; Parse accepted the last three before
		// issue 20.
		{"timeout not a duration", `{"methodConfig": [{"name": [{}], "timeout": "x"}]}`,
			[]string{`serviceconfig: methodConfig[0].timeout: "x" is not a duration like "0.1s"`}},
		{"timeout a number", `{"methodConfig": [{"name": [{}], "timeout": 5}]}`,
			[]string{`serviceconfig: methodConfig[0].timeout: 5 is not a duration like "0.1s"`}},
		{"a key twice, the first copy of the wrong type", `{"methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": "x"}, "retryPolicy": {` + strings.Join([]string{`"maxAttempts": 2`, `"initialBackoff": "0.1s"`, `"maxBackoff": "1s"`, `"backoffMultiplier": 2`, `"retryableStatusCodes": ["UNAVAILABLE"]`}, ", ") + `}}]}`,
			[]string{"serviceconfig: service config: json: cannot unmarshal string into Go struct field"}},
		{"waitForReady not a bool", `{"methodConfig": [{"name": [{}], "waitForReady": "yes"}]}`,
			[]string{"serviceconfig: service config: json: cannot unmarshal string into Go struct field"}},
		{"a field Parse does not read, of the wrong type", `{"loadBalancingPolicy": 3}`,
			[]string{"serviceconfig: service config: json: cannot unmarshal number into Go struct field"}},
		// Documented differences (see the package documentation).
		{"duration with a negative fraction", with("initialBackoff", `"1.-5s"`), []string{path + `initialBackoff: "1.-5s" is not a duration like "0.1s"`}},
		{"perAttemptRecvTimeout zero", rp(`"maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "2s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"], "perAttemptRecvTimeout": "0s"`),
			[]string{path + `perAttemptRecvTimeout: "0s" must be positive`}},
		{"perAttemptRecvTimeout not a duration", rp(`"maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "2s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"], "perAttemptRecvTimeout": 10`),
			[]string{path + `perAttemptRecvTimeout: 10 is not a duration like "0.1s"`}},
		{"syntax error", `{"methodConfig": [}`, []string{"serviceconfig: service config is not valid JSON: invalid character '}' looking for beginning of value (at offset 19)"}},
		{"truncated", `{"methodConfig": [`, []string{"serviceconfig: service config is not valid JSON: unexpected end of JSON input (at offset 18)"}},
		{"empty", ``, []string{"serviceconfig: service config is not valid JSON: unexpected end of JSON input (at offset 0)"}},
		{"not an object", `[]`, []string{"serviceconfig: service config: [] is not an object"}},
		{"methodConfig not an array", `{"methodConfig": {"name": []}}`, []string{`serviceconfig: methodConfig: {"name":[]} is not an array`}},
		{"entry not an object", `{"methodConfig": [3]}`, []string{"serviceconfig: methodConfig[0]: 3 is not an object"}},
		{"name not an array", `{"methodConfig": [{"name": {"service": "s.S"}}]}`, []string{`serviceconfig: methodConfig[0].name: {"service":"s.S"} is not an array`}},
		{"name without service", `{"methodConfig": [{"name": [{"method": "Get"}]}]}`, []string{`serviceconfig: methodConfig[0].name[0]: method "Get" needs a service`}},
		{"service not a string", `{"methodConfig": [{"name": [{"service": 5}]}]}`, []string{"serviceconfig: methodConfig[0].name[0].service: 5 is not a string"}},
		{"service with a slash", `{"methodConfig": [{"name": [{"service": "a/b"}]}]}`, []string{`serviceconfig: methodConfig[0].name[0].service: "a/b" contains "/"`}},
		{"name twice", `{"methodConfig": [{"name": [{"service": "s.S", "method": "M"}]}, {"name": [{"service": "t.T"}, {"service": "s.S", "method": "M"}]}]}`,
			[]string{`serviceconfig: methodConfig[1].name[1]: "/s.S/M" is already named by methodConfig[0]`}},
		{"two defaults", `{"methodConfig": [{"name": [{}]}, {"name": [{"service": ""}]}]}`,
			[]string{"serviceconfig: methodConfig[1].name[0]: the default name {} is already named by methodConfig[0]"}},
		{"retryPolicy not an object", `{"methodConfig": [{"name": [{}], "retryPolicy": "yes"}]}`, []string{`serviceconfig: methodConfig[0].retryPolicy: "yes" is not an object`}},
		{"retryPolicy empty", rp(``), []string{
			path + "maxAttempts is required", path + "initialBackoff is required", path + "maxBackoff is required",
			path + "backoffMultiplier is required", path + "retryableStatusCodes is required"}},

		{"maxAttempts 1", with("maxAttempts", `1`), []string{path + "maxAttempts: 1 must be at least 2"}},
		{"maxAttempts negative", with("maxAttempts", `-3`), []string{path + "maxAttempts: -3 must be at least 2"}},
		{"maxAttempts a string", with("maxAttempts", `"3"`), []string{path + `maxAttempts: "3" is not a number`}},
		{"maxAttempts a fraction", with("maxAttempts", `2.5`), []string{path + "maxAttempts: 2.5 is not an integer"}},
		{"maxAttempts huge", with("maxAttempts", `99999999999999999999`), []string{path + "maxAttempts: 99999999999999999999 is out of range"}},

		{"milliseconds", with("initialBackoff", `"100ms"`), []string{path + `initialBackoff: "100ms" is not a duration like "0.1s"`}},
		{"duration a number", with("initialBackoff", `0.1`), []string{path + `initialBackoff: 0.1 is not a duration like "0.1s"`}},
		{"duration without unit", with("maxBackoff", `"1"`), []string{path + `maxBackoff: "1" is not a duration like "0.1s"`}},
		{"duration only a unit", with("maxBackoff", `"s"`), []string{path + `maxBackoff: "s" is not a duration like "0.1s"`}},
		{"duration with a sign", with("maxBackoff", `"+1s"`), []string{path + `maxBackoff: "+1s" is not a duration like "0.1s"`}},
		{"duration in Go syntax", with("maxBackoff", `"1m30s"`), []string{path + `maxBackoff: "1m30s" is not a duration like "0.1s"`}},
		{"duration negative", with("initialBackoff", `"-1s"`), []string{path + `initialBackoff: "-1s" must be positive`}},
		{"duration zero", with("initialBackoff", `"0s"`), []string{path + `initialBackoff: "0s" must be positive`}},
		{"duration too precise", with("initialBackoff", `"0.0000000001s"`), []string{path + `initialBackoff: "0.0000000001s" has more than 9 fractional digits`}},
		{"duration out of range", with("maxBackoff", `"315576000001s"`), []string{path + `maxBackoff: "315576000001s" is out of range`}},

		{"multiplier below 1", with("backoffMultiplier", `0.5`), []string{path + "backoffMultiplier: 0.5 is less than 1: grpcbackoff cannot make delays shrink"}},
		{"multiplier zero", with("backoffMultiplier", `0`), []string{path + "backoffMultiplier: 0 must be positive"}},
		{"multiplier negative", with("backoffMultiplier", `-2`), []string{path + "backoffMultiplier: -2 must be positive"}},
		{"multiplier a string", with("backoffMultiplier", `"2"`), []string{path + `backoffMultiplier: "2" is not a number`}},

		{"codes empty", with("retryableStatusCodes", `[]`), []string{path + "retryableStatusCodes is empty: no code would be retried"}},
		{"codes not a list", with("retryableStatusCodes", `"UNAVAILABLE"`), []string{path + `retryableStatusCodes: "UNAVAILABLE" is not an array`}},
		{"unknown code name", with("retryableStatusCodes", `["UNAVAILABLE", "UNAVAILABLEX"]`), []string{path + `retryableStatusCodes[1]: "UNAVAILABLEX" is not a status code name like "UNAVAILABLE"`}},
		{"lower-case code name", with("retryableStatusCodes", `["unavailable"]`), []string{path + `retryableStatusCodes[0]: "unavailable" is not a status code name: names are upper case, like "UNAVAILABLE"`}},
		{"Go code name", with("retryableStatusCodes", `["Canceled"]`), []string{path + `retryableStatusCodes[0]: "Canceled" is not a status code name like "UNAVAILABLE"`}},
		{"code 17", with("retryableStatusCodes", `[17]`), []string{path + "retryableStatusCodes[0]: 17 is not a status code (1 to 16)"}},
		{"code negative", with("retryableStatusCodes", `[-1]`), []string{path + "retryableStatusCodes[0]: -1 is not a status code (1 to 16)"}},
		{"code as a numeric string", with("retryableStatusCodes", `["14"]`), []string{path + `retryableStatusCodes[0]: "14" is not a status code name like "UNAVAILABLE"`}},
		{"code OK", with("retryableStatusCodes", `["OK", 0]`), []string{path + `retryableStatusCodes[0]: "OK" is not an error`, path + "retryableStatusCodes[1]: 0 (OK) is not an error"}},
		{"code of a wrong type", with("retryableStatusCodes", `[true]`), []string{path + "retryableStatusCodes[0]: true is not a status code name or number"}},

		// (grpc-go checks retryThrottling only when there is a methodConfig.)
		{"throttling not an object", `{"methodConfig": [], "retryThrottling": 10}`, []string{"serviceconfig: retryThrottling: 10 is not an object"}},
		{"throttling empty", `{"methodConfig": [], "retryThrottling": {}}`, []string{"serviceconfig: retryThrottling.maxTokens is required", "serviceconfig: retryThrottling.tokenRatio is required"}},
		{"maxTokens 0", `{"methodConfig": [], "retryThrottling": {"maxTokens": 0, "tokenRatio": 0.1}}`, []string{"serviceconfig: retryThrottling.maxTokens: 0 is not in (0, 1000]"}},
		{"maxTokens 2000", `{"methodConfig": [], "retryThrottling": {"maxTokens": 2000, "tokenRatio": 0.1}}`, []string{"serviceconfig: retryThrottling.maxTokens: 2000 is not in (0, 1000]"}},
		{"tokenRatio 0", `{"methodConfig": [], "retryThrottling": {"maxTokens": 10, "tokenRatio": 0}}`, []string{"serviceconfig: retryThrottling.tokenRatio: 0 must be positive"}},
		{"tokenRatio a string", `{"methodConfig": [], "retryThrottling": {"maxTokens": 10, "tokenRatio": "0.1"}}`, []string{`serviceconfig: retryThrottling.tokenRatio: "0.1" is not a number`}},

		{"every problem at once", `{
			"methodConfig": [
				{"name": [{"method": "Get"}], "retryPolicy": {"maxAttempts": 1, "initialBackoff": "100ms", "maxBackoff": "1s", "backoffMultiplier": 0.5, "retryableStatusCodes": []}},
				{"name": [{"service": "s.S"}], "retryPolicy": {"maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLEX", 17]}}
			],
			"retryThrottling": {"maxTokens": 2000, "tokenRatio": 0}}`, []string{
			`serviceconfig: methodConfig[0].name[0]: method "Get" needs a service`,
			"serviceconfig: methodConfig[0].retryPolicy.maxAttempts: 1 must be at least 2",
			`serviceconfig: methodConfig[0].retryPolicy.initialBackoff: "100ms" is not a duration like "0.1s"`,
			"serviceconfig: methodConfig[0].retryPolicy.backoffMultiplier: 0.5 is less than 1",
			"serviceconfig: methodConfig[0].retryPolicy.retryableStatusCodes is empty",
			`serviceconfig: methodConfig[1].retryPolicy.retryableStatusCodes[0]: "UNAVAILABLEX" is not a status code name`,
			"serviceconfig: methodConfig[1].retryPolicy.retryableStatusCodes[1]: 17 is not a status code",
			"serviceconfig: retryThrottling.maxTokens: 2000 is not in (0, 1000]",
			"serviceconfig: retryThrottling.tokenRatio: 0 must be positive",
		}},
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range scInvalidCases() {
		t.Run(tc.name, func(t *testing.T) {
			got, err := serviceconfig.Parse([]byte(tc.doc))
			if err == nil {
				t.Fatalf("Parse(%s) = %s, want errors %q", tc.doc, scString(got), tc.want)
			}
			if !reflect.DeepEqual(got, serviceconfig.Config{}) {
				t.Errorf("Parse(%s) = %s with an error, want the zero ServiceConfig", tc.doc, scString(got))
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.want) {
				t.Fatalf("Parse(%s): err = %v (%d errors), want %d errors: %q", tc.doc, err, len(lines), len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(lines[i], w) {
					t.Errorf("Parse(%s): error %d = %q, want it to start with %q", tc.doc, i, lines[i], w)
				}
			}
		})
	}
}

// TestServiceConfigAgreesWithGRPC checks that grpc-go (building a client
// with grpc.WithDefaultServiceConfig, which parses without connecting)
// accepts every document ParseServiceConfig accepts, and refuses every one
// it refuses, except for the differences ParseServiceConfig documents.
func TestServiceConfigAgreesWithGRPC(t *testing.T) {
	grpcAccepts := map[string]bool{
		"service with a slash":              true, // grpc-go makes "/a/b/" of it, which names no method
		"duration with a negative fraction": true, // grpc-go reads "1.-5s" as 0.5 s
		"duration with a sign":              true, // strconv.ParseInt takes "+1"; protobuf JSON does not
		"multiplier below 1":                true, // documented: a Policy cannot shrink delays
		"code OK":                           true, // documented: OK is never an error
		// grpc-go reads perAttemptRecvTimeout only from xDS.
		"perAttemptRecvTimeout zero":           true,
		"perAttemptRecvTimeout not a duration": true,
	}
	accepts := func(doc string) error {
		cc, err := grpc.NewClient("passthrough:///sc.test",
			grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultServiceConfig(doc))
		if err == nil {
			cc.Close()
		}
		return err
	}
	for _, tc := range scValidCases() {
		if err := accepts(tc.doc); err != nil {
			t.Errorf("%s: grpc-go refuses %s: %v; ParseServiceConfig accepts it", tc.name, tc.doc, err)
		}
	}
	for _, tc := range scInvalidCases() {
		err := accepts(tc.doc)
		if got := err == nil; got != grpcAccepts[tc.name] {
			t.Errorf("%s: grpc-go accepts %s: %v (err %v), want %v", tc.name, tc.doc, got, err, grpcAccepts[tc.name])
		}
	}
}

// TestServiceConfigJitterMapping checks what Parse documents: each delay of
// the Policy is grpc-go's, b·U[0.8, 1.2] with b = min(initialBackoff·
// backoffMultiplier^n, maxBackoff): within that range, uniform (mean b, a
// quarter of the draws in each outer tenth), and reaching 1.2·maxBackoff at
// the cap.
func TestServiceConfigJitterMapping(t *testing.T) {
	cases := []struct {
		initial, maxBackoff string
		mult                float64
	}{
		{"0.1s", "1s", 2},
		{"1s", "120s", 1.6},
		{"0.5s", "0.5s", 1},
		{"4s", "1s", 3}, // maxBackoff below initialBackoff
		{"0.000001s", "0.000003s", 2},
	}
	for _, tc := range cases {
		doc := fmt.Sprintf(`{"methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": 10, "initialBackoff": %q, "maxBackoff": %q, "backoffMultiplier": %v, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`,
			tc.initial, tc.maxBackoff, tc.mult)
		sc, err := serviceconfig.Parse([]byte(doc))
		if err != nil {
			t.Fatalf("Parse(%s): err = %v", doc, err)
		}
		p := *sc.Methods[0].Policy
		initial, _ := time.ParseDuration(tc.initial)
		maxBackoff, _ := time.ParseDuration(tc.maxBackoff)
		if got, want := p.MaxBackoff(), maxBackoff*12/10; got != want {
			t.Errorf("%s/%s×%v: MaxBackoff() = %v, want 1.2·maxBackoff = %v", tc.initial, tc.maxBackoff, tc.mult, got, want)
		}
		for retry := range 9 {
			b := math.Min(float64(initial)*math.Pow(tc.mult, float64(retry)), float64(maxBackoff))
			const n = 4000
			var sum float64
			outer := 0
			for range n {
				f := float64(p.Backoff(retry)) / b
				// Durations truncate to 1 ns: allow that much below.
				if f < 0.8-1/b || f > 1.2 {
					t.Fatalf("%s/%s×%v: Backoff(%d) = %v·b, want in [0.8, 1.2]·b (b = %v)", tc.initial, tc.maxBackoff, tc.mult, retry, f, time.Duration(b))
				}
				sum += f
				if f < 0.9 || f > 1.1 {
					outer++
				}
			}
			if mean := sum / n; math.Abs(mean-1) > 0.01 {
				t.Errorf("%s/%s×%v: mean of Backoff(%d) = %.4f·b, want 1 ± 0.01", tc.initial, tc.maxBackoff, tc.mult, retry, mean)
			}
			if f := float64(outer) / n; math.Abs(f-0.5) > 0.04 {
				t.Errorf("%s/%s×%v: Backoff(%d): %.3f of the draws beyond ±10%%, want 0.5", tc.initial, tc.maxBackoff, tc.mult, retry, f)
			}
		}
	}
}

// TestServiceConfigThrottleMapping compares, for a lone call retrying during
// a total outage, the retries gRFC A6's token bucket lets through with those
// of the budget retryThrottling is mapped to: about maxTokens/2 for both.
func TestServiceConfigThrottleMapping(t *testing.T) {
	for _, maxTokens := range []float64{1, 3, 10, 11, 100, 1000} {
		doc := fmt.Sprintf(`{"retryThrottling": {"maxTokens": %v, "tokenRatio": 0.1}}`, maxTokens)
		sc, err := serviceconfig.Parse([]byte(doc))
		if err != nil {
			t.Fatalf("Parse(%s): err = %v", doc, err)
		}
		// A6: every failed attempt takes a token; the retry is sent only
		// if more than maxTokens/2 remain.
		a6, tokens := 0, maxTokens
		for {
			tokens--
			if tokens <= maxTokens/2 {
				break
			}
			a6++
		}
		now := time.Unix(0, 0)
		b, err := budget.New(*sc.Throttle, now)
		if err != nil {
			t.Fatalf("budget.New(%+v) = %v", *sc.Throttle, err)
		}
		b.Started()
		ours := 0
		for b.Allow(now) {
			ours++
			now = now.Add(time.Hour) // PerSecond 0: time earns nothing
			if ours > 1000 {
				t.Fatalf("Parse(%s): the budget never runs out", doc)
			}
		}
		if diff := ours - a6; diff < 0 || diff > 1 {
			t.Errorf("Parse(%s): a lone call in an outage gets %d retries, want A6's %d (+1 at most)", doc, ours, a6)
		}
	}
}

// TestServiceConfigFreshPolicies checks that each entry gets its own Policy:
// changing one changes neither the others nor a later parse.
func TestServiceConfigFreshPolicies(t *testing.T) {
	sc, err := serviceconfig.Parse([]byte(scGRPCDoc))
	if err != nil {
		t.Fatal(err)
	}
	sc.Methods[0].Policy.Codes[0] = codes.Internal
	sc.Methods[0].Policy.MaxAttempts = 99
	again, _ := serviceconfig.Parse([]byte(scGRPCDoc))
	if got := again.Methods[0].Policy; got.MaxAttempts != 4 || got.Codes[0] != codes.Unavailable {
		t.Errorf("Parse(scGRPCDoc) after changing an earlier result: Methods[0].Policy = %+v, want MaxAttempts 4, Codes[0] Unavailable", *got)
	}
	if sc.Methods[2].Policy.Codes[0] != codes.Unavailable {
		t.Errorf("changing Methods[0].Policy changed Methods[2].Policy.Codes to %v", sc.Methods[2].Policy.Codes)
	}
}

func ExampleParse() {
	sc, err := serviceconfig.Parse([]byte(`{
	  "loadBalancingConfig": [{"round_robin": {}}],
	  "methodConfig": [{
	    "name": [{"service": "google.cloud.redis.v1.CloudRedis", "method": "GetInstance"},
	             {"service": "google.longrunning.Operations"}],
	    "retryPolicy": {
	      "maxAttempts": 5,
	      "initialBackoff": "0.2s",
	      "maxBackoff": "10s",
	      "backoffMultiplier": 2,
	      "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]
	    }
	  }, {
	    "name": [{"service": "google.cloud.redis.v1.CloudRedis", "method": "CreateInstance"}],
	    "timeout": "600s"
	  }],
	  "retryThrottling": {"maxTokens": 20, "tokenRatio": 0.1}
	}`))
	if err != nil {
		panic(err)
	}
	for _, m := range sc.Methods {
		fmt.Println(m.Names)
		if m.Policy == nil {
			fmt.Println("  no retry")
			continue
		}
		p := m.Policy
		fmt.Printf("  %d attempts on %v\n", p.MaxAttempts, p.Codes)
		fmt.Printf("  delay min(%v·%v^n, %v)·U[%v, %v]\n", p.Initial, p.Multiplier, p.Max, 1-p.JitterFactor, 1+p.JitterFactor)
	}
	fmt.Printf("throttle %+v\n", *sc.Throttle)

	_, err = serviceconfig.Parse([]byte(`{"methodConfig": [{"name": [{}],
	  "retryPolicy": {"maxAttempts": 1, "initialBackoff": "100ms", "maxBackoff": "1s",
	    "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLEX"]}}]}`))
	fmt.Println(err)
	// Output:
	// [/google.cloud.redis.v1.CloudRedis/GetInstance /google.longrunning.Operations/]
	//   5 attempts on [Unavailable ResourceExhausted]
	//   delay min(200ms·2^n, 10s)·U[0.8, 1.2]
	// [/google.cloud.redis.v1.CloudRedis/CreateInstance]
	//   no retry
	// throttle {Ratio:0.1 PerSecond:0 Burst:10 Reserve:0.1 MinReserve:0 Window:10s}
	// serviceconfig: methodConfig[0].retryPolicy.maxAttempts: 1 must be at least 2
	// serviceconfig: methodConfig[0].retryPolicy.initialBackoff: "100ms" is not a duration like "0.1s"
	// serviceconfig: methodConfig[0].retryPolicy.retryableStatusCodes[0]: "UNAVAILABLEX" is not a status code name like "UNAVAILABLE"
}

// googleConfigs returns the paths of Google's published service configs
// (googleapis' *_grpc_service_config.json), read from the directory
// $GOOGLEAPIS_SERVICE_CONFIGS or ../../shared/data/googleapis-service-configs;
// the test is skipped without them. No copy of them is kept here.
func googleConfigs(t *testing.T) []string {
	t.Helper()
	dir := os.Getenv("GOOGLEAPIS_SERVICE_CONFIGS")
	if dir == "" {
		dir = filepath.Join("..", "..", "shared", "data", "googleapis-service-configs")
	}
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".json") {
			paths = append(paths, p)
		}
		return err
	})
	if err != nil || len(paths) == 0 {
		t.Skipf("no service configs in %s (set GOOGLEAPIS_SERVICE_CONFIGS): %v", dir, err)
	}
	return paths
}

// grpcVerdict is grpc-go's verdict on a service config document: nil if a
// client accepts it (grpc.WithDefaultServiceConfig parses without
// connecting).
func grpcVerdict(doc []byte) error {
	cc, err := grpc.NewClient("passthrough:///sc.test",
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultServiceConfig(string(doc)))
	if err == nil {
		cc.Close()
	}
	return err
}

// TestGoogleServiceConfigs: Parse gives every one of Google's published
// service configs grpc-go's verdict (of 467, both accept 350 and refuse 117,
// whose retryPolicy has no maxAttempts), and reads their timeouts.
func TestGoogleServiceConfigs(t *testing.T) {
	accepted, refused, withTimeout := 0, 0, 0
	for _, p := range googleConfigs(t) {
		doc, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		sc, ours := serviceconfig.Parse(doc)
		theirs := grpcVerdict(doc)
		if (ours == nil) != (theirs == nil) {
			t.Errorf("%s: Parse: %v; grpc-go: %v", p, ours, theirs)
		}
		if ours == nil {
			accepted++
		} else {
			refused++
		}
		for _, m := range sc.Methods {
			if m.Timeout > 0 {
				withTimeout++
				break
			}
		}
	}
	t.Logf("%d service configs accepted by both, %d refused by both; %d give a timeout", accepted, refused, withTimeout)
	if accepted == 0 || withTimeout == 0 {
		t.Errorf("%d accepted, %d with a timeout: the configs are not what this test expects", accepted, withTimeout)
	}
}

// TestFuzzCorpusAgreesWithGRPC: on the seed corpus of FuzzParse, Parse
// accepts exactly the documents grpc-go accepts, but where the package
// documentation lists a difference.
func TestFuzzCorpusAgreesWithGRPC(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzParse", "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus: %v", err)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		doc, ok := corpusBytes(raw)
		if !ok {
			t.Fatalf("%s: not a corpus file of one []byte", f)
		}
		_, ours := serviceconfig.Parse(doc)
		theirs := grpcVerdict(doc)
		if (ours == nil) != (theirs == nil) && !documentedDifference(ours) {
			t.Errorf("%s (%.80q): Parse: %v; grpc-go: %v", filepath.Base(f), doc, ours, theirs)
		}
	}
}

// documentedDifference reports whether err, Parse's refusal of a document
// grpc-go accepts, is one of the differences the package documentation
// lists.
func documentedDifference(err error) bool {
	if err == nil {
		return false
	}
	for _, d := range []string{"must be at least 2", "is less than 1", "is not an error", `contains "/"`, "is not a duration", "perAttemptRecvTimeout", "more than 9 fractional digits", "is out of range", "retryThrottling", "hedgingPolicy", "holds only null"} {
		if strings.Contains(err.Error(), d) {
			return true
		}
	}
	return false
}

// corpusBytes reads a "go test fuzz v1" file of one []byte value.
func corpusBytes(raw []byte) ([]byte, bool) {
	lines := strings.SplitN(string(raw), "\n", 3)
	if len(lines) < 2 || lines[0] != "go test fuzz v1" {
		return nil, false
	}
	lit, ok := strings.CutPrefix(strings.TrimSpace(lines[1]), "[]byte(")
	if !ok {
		return nil, false
	}
	s, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
	return []byte(s), err == nil
}

// TestParseKeyTwiceAsGRPC: a key given twice in one object is read as
// grpc-go reads it (encoding/json decoding both copies into one struct):
// every copy is decoded (a malformed duration in any is refused), and the
// copies of an object merge field by field, the later winning, before the
// values are checked: a first copy's bad multiplier the second replaces is
// accepted, one it leaves is refused, and a partial second copy completes
// the first. (Issue 27: Parse read the last copy alone, accepting the first
// document and refusing the fourth, where grpc-go did the opposite.)
func TestParseKeyTwiceAsGRPC(t *testing.T) {
	full := `"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]`
	doc := func(first, second string) string {
		return `{"methodConfig": [{"name": [{"service": "s.S"}], "retryPolicy": {` + first + `}, "retryPolicy": {` + second + `}}]}`
	}
	for _, tc := range []struct {
		name        string
		doc         string
		ok          bool
		maxAttempts int
	}{
		{"the first copy's malformed duration", doc(`"initialBackoff": "x"`, full), false, 0},
		{"the second copy replaces the first's bad multiplier", doc(`"backoffMultiplier": -1`, full), true, 3},
		{"the first copy's bad multiplier stays", doc(`"backoffMultiplier": -1`, `"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s", "retryableStatusCodes": ["UNAVAILABLE"]`), false, 0},
		{"a partial second copy completes the first", doc(full, `"maxAttempts": 4`), true, 4},
		{"no key twice", `{"methodConfig": [{"name": [{"service": "s.S"}], "retryPolicy": {` + full + `}}]}`, true, 3},
	} {
		sc, err := serviceconfig.Parse([]byte(tc.doc))
		if grpcErr := grpcVerdict([]byte(tc.doc)); (grpcErr == nil) != tc.ok {
			t.Errorf("%s: grpc-go's verdict %v, want accepted %v", tc.name, grpcErr, tc.ok)
		}
		if (err == nil) != tc.ok {
			t.Errorf("%s: Parse error %v, want accepted %v", tc.name, err, tc.ok)
			continue
		}
		if tc.ok && sc.Methods[0].Policy.MaxAttempts != tc.maxAttempts {
			t.Errorf("%s: MaxAttempts %d, want %d", tc.name, sc.Methods[0].Policy.MaxAttempts, tc.maxAttempts)
		}
	}
}

// TestDifferencesFromGRPCAreDocumented: each document grpc-go v1.85 accepts
// and Parse refuses is one of the differences the package documentation
// names, side by side with grpc-go's verdict. (Issue 34: an entry with both
// a retryPolicy and a hedgingPolicy was refused, and the list did not say
// so; nor that a hedgingPolicy, which grpc-go ignores, is checked.)
func TestDifferencesFromGRPCAreDocumented(t *testing.T) {
	src, err := os.ReadFile("serviceconfig.go")
	if err != nil {
		t.Fatal(err)
	}
	pkgDoc, _, _ := strings.Cut(string(src), "\npackage serviceconfig")
	pkgDoc = strings.Join(strings.Fields(strings.ReplaceAll(pkgDoc, "//", "")), " ")
	const rp = `"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2`
	entry := func(fields string) string {
		return `{"methodConfig": [{"name": [{"service": "s.S"}], ` + fields + `}]}`
	}
	retryPolicy := `"retryPolicy": {` + rp + `, "retryableStatusCodes": ["UNAVAILABLE"]}`
	for _, tc := range []struct{ documented, doc string }{
		{"A backoffMultiplier below 1 is refused", entry(`"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 0.5, "retryableStatusCodes": ["UNAVAILABLE"]}`)},
		{`"OK" among retryableStatusCodes or nonFatalStatusCodes is refused`, entry(`"retryPolicy": {` + rp + `, "retryableStatusCodes": ["OK", "UNAVAILABLE"]}`)},
		{"retryableStatusCodes of nulls alone", entry(`"retryPolicy": {` + rp + `, "retryableStatusCodes": [null]}`)},
		{`A service or method containing "/" is refused`, `{"methodConfig": [{"name": [{"service": "a/b"}]}]}`},
		{`grpc-go also takes "+1s", and "1.-5s"`, entry(`"retryPolicy": {"maxAttempts": 3, "initialBackoff": "+1s", "maxBackoff": "2s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}`)},
		{`grpc-go also takes "+1s", and "1.-5s"`, entry(`"retryPolicy": {"maxAttempts": 3, "initialBackoff": "1.-5s", "maxBackoff": "2s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}`)},
		{"perAttemptRecvTimeout is read", entry(`"retryPolicy": {` + rp + `, "retryableStatusCodes": ["UNAVAILABLE"], "perAttemptRecvTimeout": "0s"}`)},
		{"hedgingPolicy is read, and a malformed one refused", entry(`"hedgingPolicy": {"maxAttempts": 1, "hedgingDelay": "0.1s"}`)},
		{"hedgingPolicy is read, and a malformed one refused", entry(`"hedgingPolicy": 5`)},
		{"hedgingPolicy is read, and a malformed one refused", entry(retryPolicy + `, "hedgingPolicy": {"hedgingDelay": "0.1s"}`)},
		{"The retryPolicy and hedgingPolicy of an entry without a name are checked too", `{"methodConfig": [{"retryPolicy": {"maxAttempts": 1}}]}`},
		{"The retryPolicy and hedgingPolicy of an entry without a name are checked too", `{"methodConfig": [{"hedgingPolicy": {"maxAttempts": 1}}]}`},
		{"retryThrottling without a methodConfig", `{"retryThrottling": {"maxTokens": 0, "tokenRatio": 0.1}}`},
	} {
		_, ours := serviceconfig.Parse([]byte(tc.doc))
		theirs := grpcVerdict([]byte(tc.doc))
		if ours == nil || theirs != nil {
			t.Errorf("%s: Parse: %v; grpc-go: %v; want only Parse to refuse it", tc.doc, ours, theirs)
		}
		if !strings.Contains(pkgDoc, tc.documented) {
			t.Errorf("%s: the package documentation does not say %q", tc.doc, tc.documented)
		}
	}
}
