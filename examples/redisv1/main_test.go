package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/offline"
	"github.com/platformkit/grpcbackoff/redistest"
)

// TestMain keeps every test on the machine: offline.Main points
// GCE_METADATA_HOST at a loopback stand-in for the metadata server
// (169.254.169.254) and turns Bigtable's Direct Access off.
func TestMain(m *testing.M) { offline.Main(m) }

// TestStory runs the story against the fake inside a synctest bubble, so its
// waits take no real time and the times it prints are exact. Jitter stays
// random: the test checks patterns and bounds, and exact values only where
// the story makes them exact (the RetryInfo wait).
func TestStory(t *testing.T) {
	for _, scale := range []float64{0.1, 1} {
		t.Run(fmt.Sprintf("scale=%v", scale), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := redistest.NewServer()
				defer srv.Close()
				var out bytes.Buffer
				start := time.Now()
				err := story(t.Context(), srv, scale, &out)
				took := time.Since(start)
				if err != nil {
					t.Fatalf("story: %v\noutput:\n%s", err, &out)
				}
				checkStory(t, out.String(), scale, took, srv.Attempts())
				if t.Failed() {
					t.Logf("output:\n%s", &out)
				}
			})
		})
	}
}

func checkStory(t *testing.T, out string, scale float64, took time.Duration, attempts []redistest.Attempt) {
	t.Helper()
	sc := func(d time.Duration) time.Duration { return scaled(d, scale) }

	// The waits of the story, with the jitter at 0 and at its maximum:
	// 3 s (RetryInfo), 1–2 s, 1+2+4 to 2+3+5 s (down), 1–2 s (list),
	// 1+2 to 2+3 s (exhausted), 1–2 s (deadline).
	if lo, hi := sc(16*time.Second), sc(24*time.Second); took < lo || took > hi {
		t.Errorf("story took %v of (fake) time, want between %v and %v", took, lo, hi)
	}

	// 1. The RetryInfo is honoured exactly: it is longer than any wait the
	// policy would choose for a first retry.
	s1 := section(t, out, 1)
	wantLine(t, s1, fmt.Sprintf(`retry  CreateInstance  RESOURCE_EXHAUSTED  attempt 1 failed  waiting %s  (RetryInfo asked for %s: honoured)`,
		secs(sc(3*time.Second)), secs(sc(3*time.Second))))
	wantLine(t, s1, `   -> created cache-a: READY, BASIC 1 GB at 10.0.0.1:6379, after `+secs(sc(3*time.Second)))

	// 2. Without RetryInfo, the policy's own first wait: Initial + jitter.
	s2 := section(t, out, 2)
	m := match(t, s2, `(?m)^retry  CreateInstance  RESOURCE_EXHAUSTED  attempt 1 failed  waiting (\S+)s$`)
	checkBetween(t, "step 2 wait", m[1], sc(time.Second), sc(2*time.Second))

	// 3. Down for 6 s: exactly three retries, then OK.
	s3 := section(t, out, 3)
	for i := 1; i <= 3; i++ {
		match(t, s3, fmt.Sprintf(`(?m)^retry  GetInstance     UNAVAILABLE         attempt %d failed  waiting \S+s$`, i))
	}
	if n := strings.Count(s3, "retry  "); n != 3 {
		t.Errorf("step 3 printed %d retries, want 3:\n%s", n, s3)
	}
	match(t, s3, `server answered: (GetInstance UNAVAILABLE at \S+, ){3}GetInstance OK at \S+\n`)

	// 4. One retry of page 2; both instances listed.
	s4 := section(t, out, 4)
	match(t, s4, `(?m)^retry  ListInstances   UNAVAILABLE         attempt 1 failed  waiting \S+s$`)
	match(t, s4, `server answered: ListInstances OK at \S+, ListInstances UNAVAILABLE at \S+, ListInstances OK at \S+\n`)
	match(t, s4, `listed cache-a, cache-b in 2 pages`)

	// 5. NOT_FOUND: one attempt, no retry, the server's own error.
	s5 := section(t, out, 5)
	if strings.Contains(s5, "retry  ") {
		t.Errorf("step 5 (NOT_FOUND) printed a retry:\n%s", s5)
	}
	wantLine(t, s5, "   server answered: GetInstance NOT_FOUND at 0.00s")
	wantLine(t, s5, "   -> NOT_FOUND after 0.00s, not retried: the policy does not retry NOT_FOUND; the error is the server's own, not a *grpcbackoff.Error")

	// 6. Exhausted: UNAVAILABLE after 3 attempts, 2 retries.
	s6 := section(t, out, 6)
	if n := strings.Count(s6, "retry  GetInstance     UNAVAILABLE "); n != exhaustAttempts-1 {
		t.Errorf("step 6 printed %d retries, want %d:\n%s", n, exhaustAttempts-1, s6)
	}
	m = match(t, s6, `gave up after (\S+)s with status.Code\(err\) = UNAVAILABLE; \*grpcbackoff.Error: Attempts 3, Elapsed (\S+)s, Reason "attempts exhausted"`)
	checkBetween(t, "step 6 time", m[1], sc(3*time.Second), sc(5*time.Second))
	if m[1] != m[2] {
		t.Errorf("step 6: the call took %ss but Error.Elapsed is %ss", m[1], m[2])
	}
	match(t, s6, `err: rpc error: code = Unavailable desc = .*\(grpcbackoff: 3 attempts over \S+: attempts exhausted\)`)

	// 7. The deadline: back before it with the last real error.
	s7 := section(t, out, 7)
	m = match(t, s7, `returned after (\S+)s, (\S+)s before the (\S+)s deadline, with UNAVAILABLE \(not DEADLINE_EXCEEDED\)`)
	if m[3]+"s" != secs(sc(shortDeadline)) {
		t.Errorf("step 7 deadline %ss, want %s", m[3], secs(sc(shortDeadline)))
	}
	checkBetween(t, "step 7 return time", m[1], sc(time.Second), sc(2*time.Second))
	wantLine(t, s7, `   -> 2 attempts, Reason "next retry would pass the deadline"`)
	if strings.Contains(s7, "DEADLINE_EXCEEDED at") {
		t.Errorf("step 7: an attempt ran into the deadline:\n%s", s7)
	}

	// 8. A write that may have applied is not resent: one attempt, the
	// server's error, Explain's reason.
	s8 := section(t, out, 8)
	if n := strings.Count(s8, "retry  "); n != 0 {
		t.Errorf("step 8 (FailoverInstance, UNAVAILABLE) printed a retry:\n%s", s8)
	}
	match(t, s8, `(?m)^   server answered: FailoverInstance UNAVAILABLE at \S+s$`)
	match(t, s8, `(?m)^   -> UNAVAILABLE after 1 attempt, not resent: a write the server may have applied; the error is the server's own$`)
	match(t, s8, `(?m)^   -> Explain: not idempotent \(google.api.http POST .*:failover: FailoverInstance neither reads nor sets a state\)$`)

	// 9. Both deleted.
	match(t, section(t, out, 9), `deleted both; ListInstances now finds 0 instances`)

	// The summary agrees with what the fake recorded, method by method.
	want := make(map[string][2]int) // calls, attempts
	for _, a := range attempts {
		w := want[path.Base(a.Method)]
		if len(a.Metadata.Get(interceptor.PreviousAttemptsKey)) == 0 {
			w[0]++
		}
		w[1]++
		want[path.Base(a.Method)] = w
	}
	totalCalls := 0
	for _, w := range want {
		totalCalls += w[0]
	}
	want["TOTAL"] = [2]int{totalCalls, len(attempts)}
	rows := summaryRows(t, out)
	for name, w := range want {
		r, ok := rows[name]
		if !ok {
			t.Errorf("summary has no row for %s", name)
			continue
		}
		if r[0] != w[0] || r[1] != w[1] {
			t.Errorf("summary %s: %d calls, %d attempts; the fake recorded %d, %d", name, r[0], r[1], w[0], w[1])
		}
		if r[1] != r[0]+r[2] {
			t.Errorf("summary %s: %d attempts ≠ %d calls + %d retries", name, r[1], r[0], r[2])
		}
	}
	if len(rows) != len(want) {
		t.Errorf("summary has %d rows, want %d (%v)", len(rows), len(want), want)
	}
	retries := strings.Count(out, "\nretry  ")
	if rows["TOTAL"][2] != retries {
		t.Errorf("summary counts %d retries, the output shows %d", rows["TOTAL"][2], retries)
	}
	if wantRetries := 1 + 1 + 3 + 1 + (exhaustAttempts - 1) + 1; retries != wantRetries {
		t.Errorf("%d retries, want %d", retries, wantRetries)
	}
	match(t, out, fmt.Sprintf(`summary: %d calls, %d attempts seen by the server, %d retries, `, totalCalls, len(attempts), retries))
	for _, bad := range []string{"MISMATCH", "throttle", "NOT honoured"} {
		if strings.Contains(out, bad) {
			t.Errorf("output contains %q", bad)
		}
	}
}

// TestRun runs the command as `go run ./examples/redisv1` does, with no
// flags, in real time (its Pub/Sub fake listens on loopback TCP, which a
// synctest bubble cannot wait on), and checks that it says which policy it
// uses and tells both parts of the story.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), nil, &out); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, &out)
	}
	o := out.String()
	wantLine(t, o, "policy: the Memorystore recipe (grpcbackoff.DefaultPolicy()) at 1/10 time scale (-scale 0.1; -scale 1 for real time):")
	wantLine(t, o, "        wait min(100ms·2^n + U[0, 100ms], 3.2s) before retry n+1, at most 8 attempts, on UNAVAILABLE, RESOURCE_EXHAUSTED")
	match(t, o, `(?m)^TOTAL `)
	match(t, o, `(?m)^Beyond the recipe:`)
}

func TestDescribeRealTime(t *testing.T) {
	p, err := scaledPolicy(1)
	if err != nil {
		t.Fatal(err)
	}
	got := describe(p, 1)
	want := "policy: grpcbackoff.DefaultPolicy(), the Memorystore recipe at real time:\n" +
		"        wait min(1s·2^n + U[0, 1s], 32s) before retry n+1, at most 8 attempts, on UNAVAILABLE, RESOURCE_EXHAUSTED\n"
	if got != want {
		t.Errorf("describe(DefaultPolicy, 1) =\n%s\nwant\n%s", got, want)
	}
}

func TestBadFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-scale", "0"}, "redisv1: invalid -scale 0: must be greater than 0 and at most 1"},
		{[]string{"-scale", "-1"}, "redisv1: invalid -scale -1: must be greater than 0 and at most 1"},
		{[]string{"-scale", "2"}, "redisv1: invalid -scale 2: must be greater than 0 and at most 1"},
		{[]string{"-scale", "NaN"}, "redisv1: invalid -scale NaN: must be greater than 0 and at most 1"},
		{[]string{"-scale", "abc"}, `redisv1: invalid value "abc" for flag -scale: parse error`},
		{[]string{"-scale", "1e-10"}, "redisv1: invalid -scale 1e-10: grpcbackoff: Initial (0s) must be positive"},
		{[]string{"-nope"}, "redisv1: flag provided but not defined: -nope"},
		{[]string{"story"}, `redisv1: unexpected argument "story": all options are flags`},
		{[]string{"-project", "p"}, "redisv1: -project p is only used with -real"},
		{[]string{"-location", "europe-west1"}, "redisv1: -location europe-west1 is only used with -real"},
		{[]string{"-create"}, "redisv1: -create true is only used with -real"},
		{[]string{"-real"}, "redisv1: -real needs -project"},
		{[]string{"-real", "-project", "a/b"}, `redisv1: invalid -project "a/b": must be a project id`},
		{[]string{"-real", "-project", "p", "-location", ""}, `redisv1: invalid -location "": must be a region such as us-central1, or -`},
		{[]string{"-real", "-project", "p", "-scale", "1"}, "redisv1: -scale 1 is for the fake: the real API always gets grpcbackoff.DefaultPolicy()"},
		{[]string{"-real", "-project", "p", "-create"}, `redisv1: -create needs a region in -location, not "-"`},
		{[]string{"-real", "-project", "p", "-instance", "x"}, `redisv1: -instance "x" is only used with -create`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out bytes.Buffer
			err := run(t.Context(), tt.args, &out)
			if err == nil || err.Error() != tt.want {
				t.Errorf("run(%q) = %v, want %s", tt.args, err, tt.want)
			}
			var ue *usageError
			if !errors.As(err, &ue) || !strings.Contains(ue.usage, "-scale float") {
				t.Errorf("run(%q) = %#v, want a *usageError with the usage", tt.args, err)
			}
			if out.Len() > 0 {
				t.Errorf("run(%q) printed %q before failing", tt.args, &out)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	err := run(t.Context(), []string{"-h"}, new(bytes.Buffer))
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run(-h) = %v, want flag.ErrHelp", err)
	}
	for _, f := range []string{"-real", "-project", "-location", "-create", "-instance", "-scale"} {
		if !strings.Contains(usage(err), "  "+f+" ") && !strings.Contains(usage(err), "  "+f+"\n") {
			t.Errorf("usage does not mention %s:\n%s", f, usage(err))
		}
	}
}

func TestGoodFlags(t *testing.T) {
	tests := []struct {
		args []string
		want config
	}{
		{nil, config{location: "-", instance: "grpcbackoff-example", scale: 0.1}},
		{[]string{"-scale", "1"}, config{location: "-", instance: "grpcbackoff-example", scale: 1}},
		{[]string{"-real", "-project", "p"}, config{real: true, project: "p", location: "-", instance: "grpcbackoff-example", scale: 0.1}},
		{[]string{"-real", "-project", "p", "-location", "us-east1", "-create", "-instance", "c1"},
			config{real: true, project: "p", location: "us-east1", create: true, instance: "c1", scale: 0.1}},
	}
	for _, tt := range tests {
		got, err := parseFlags(tt.args)
		if err != nil || got != tt.want {
			t.Errorf("parseFlags(%q) = %+v, %v; want %+v, nil", tt.args, got, err, tt.want)
		}
	}
}

func TestFraction(t *testing.T) {
	for _, tt := range []struct {
		scale float64
		want  string
	}{{0.1, "1/10"}, {0.5, "1/2"}, {0.01, "1/100"}, {0.25, "1/4"}, {0.3, "0.3×"}, {0.37, "0.37×"}} {
		if got := fraction(tt.scale); got != tt.want {
			t.Errorf("fraction(%v) = %q, want %q", tt.scale, got, tt.want)
		}
	}
}

// section returns step n of the story: from its "n. " line to the blank line
// after it.
func section(t *testing.T, out string, n int) string {
	t.Helper()
	head := fmt.Sprintf("\n%d. ", n)
	i := strings.Index(out, head)
	if i < 0 {
		t.Fatalf("no step %d in the output:\n%s", n, out)
	}
	s := out[i+1:]
	if j := strings.Index(s, "\n\n"); j >= 0 {
		s = s[:j+1]
	}
	return s
}

func wantLine(t *testing.T, s, line string) {
	t.Helper()
	if !strings.Contains("\n"+s, "\n"+line+"\n") && !strings.HasPrefix(s, line) {
		t.Errorf("no line %q in:\n%s", line, s)
	}
}

func match(t *testing.T, s, re string) []string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("no match for %s in:\n%s", re, s)
	}
	return m
}

// checkBetween checks that the seconds printed in got (two decimals) are
// between lo and hi, rounded as secs rounds.
func checkBetween(t *testing.T, what, got string, lo, hi time.Duration) {
	t.Helper()
	f, err := strconv.ParseFloat(strings.TrimSuffix(got, "s"), 64)
	if err != nil {
		t.Errorf("%s: %q is not a number of seconds", what, got)
		return
	}
	const half = 0.005 // secs rounds to hundredths
	if f < lo.Seconds()-half || f > hi.Seconds()+half {
		t.Errorf("%s = %ss, want between %s and %s", what, got, secs(lo), secs(hi))
	}
}

// summaryRows reads the summary table: calls, attempts, retries by method.
func summaryRows(t *testing.T, out string) map[string][3]int {
	t.Helper()
	i := strings.Index(out, "\nMETHOD ")
	if i < 0 {
		t.Fatalf("no summary table in:\n%s", out)
	}
	rows := make(map[string][3]int)
	for _, line := range strings.Split(strings.TrimSpace(out[i:]), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 4 {
			t.Fatalf("short summary row %q", line)
		}
		var r [3]int
		for k := range r {
			n, err := strconv.Atoi(f[k+1])
			if err != nil {
				t.Fatalf("summary row %q: column %d: %v", line, k+2, err)
			}
			r[k] = n
		}
		rows[f[0]] = r
	}
	return rows
}

// TestBeyond runs the part of the story past the recipe in real time (its
// Pub/Sub fake listens on loopback TCP, which a synctest bubble cannot wait
// on): the hedge answers, and GetTopic makes the Policy's attempts only.
func TestBeyond(t *testing.T) {
	p, err := scaledPolicy(0.01)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := beyond(t.Context(), p, 0.01, &out); err != nil {
		t.Fatalf("beyond: %v\noutput:\n%s", err, &out)
	}
	match(t, out.String(), `(?m)^   -> got cache-h \(READY\) after 0\.0[0-9]s, from the hedge(?s:.*)the hedge with grpc-previous-rpc-attempts "1"`)
	match(t, out.String(), `(?m)^   -> GetTopic: 4 attempts over [0-9.]+s, "attempts exhausted", code UNAVAILABLE`)
}
