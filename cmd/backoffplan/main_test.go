package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// runPlan runs the command with args and returns its exit status and output.
func runPlan(t *testing.T, args ...string) (status int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	status = run(args, &out, &errOut)
	return status, out.String(), errOut.String()
}

// rows returns the table rows of out by retry number, each as its fields.
func rows(out string) map[string][]string {
	m := map[string][]string{}
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) > 1 && strings.Trim(f[0], "0123456789") == "" {
			m[f[0]] = f
		}
	}
	return m
}

// checkRows checks that the table in out has the given rows.
func checkRows(t *testing.T, args []string, out string, want [][]string) {
	t.Helper()
	got := rows(out)
	for _, w := range want {
		if g := got[w[0]]; !slices.Equal(g, w) {
			t.Errorf("run(%q): row %s = %q, want %q\n%s", args, w[0], g, w, out)
		}
	}
}

func TestBackoffPlanDefault(t *testing.T) {
	status, out, errOut := runPlan(t)
	if status != 0 || errOut != "" {
		t.Fatalf("run() = %d, stderr %q, want 0 and nothing", status, errOut)
	}
	if want := "policy: initial 1s, multiplier 2, max 32s, jitter 1s, attempts 8\n"; !strings.HasPrefix(out, want) {
		t.Errorf("run() starts %q, want %q", strings.SplitN(out, "\n", 2)[0], want)
	}
	if !strings.Contains(out, "retry   delay    with jitter  elapsed  worst elapsed\n") {
		t.Errorf("run() has no table header:\n%s", out)
	}
	checkRows(t, nil, out, [][]string{
		{"0", "-", "-", "0.000", "0.000"},
		{"1", "1.000", "1.000–2.000", "1.000", "2.000"},
		{"5", "16.000", "16.000–17.000", "31.000", "36.000"},
		{"6", "32.000", "32.000", "63.000", "68.000"},
		{"7", "32.000", "32.000", "95.000", "100.000"},
	})
	if r := rows(out); len(r) != 8 {
		t.Errorf("run() has %d rows, want 8 (the first attempt and 7 retries):\n%s", len(r), out)
	}
	for line := range strings.Lines(out) {
		if strings.TrimRight(line, " \n") != strings.TrimSuffix(line, "\n") {
			t.Errorf("run(): line %q ends in spaces", line)
		}
	}
}

func TestBackoffPlanDocumentTables(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want [][]string
	}{
		{
			[]string{"-initial", "1s", "-multiplier", "2", "-max", "1h", "-jitter", "0", "-attempts", "12"},
			[][]string{
				{"1", "1.000", "1.000"},
				{"2", "2.000", "3.000"},
				{"3", "4.000", "7.000"},
				{"10", "512.000", "1023.000"},
				{"11", "1024.000", "2047.000"},
			},
		},
		{
			[]string{"-initial", "1s", "-multiplier", "1.1", "-max", "1h", "-jitter", "0", "-rows", "49"},
			[][]string{
				{"0", "-", "0.000"},
				{"1", "1.000", "1.000"},
				{"2", "1.100", "2.100"},
				{"3", "1.210", "3.310"},
				{"7", "1.772", "9.487"},
				{"8", "1.949", "11.436", "*"}, // beyond -attempts 8
				{"48", "88.197", "960.172", "*"},
				{"49", "97.017", "1057.190", "*"},
			},
		},
	} {
		status, out, errOut := runPlan(t, tc.args...)
		if status != 0 || errOut != "" {
			t.Fatalf("run(%q) = %d, stderr %q, want 0 and nothing", tc.args, status, errOut)
		}
		checkRows(t, tc.args, out, tc.want)
	}
}

// TestRunAnswers checks the lines after the table.
func TestBackoffPlanAnswers(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		status int
		want   []string // lines of stdout
	}{
		{
			[]string{"-ratio", "0.1"},
			0,
			[]string{
				"policy: initial 1s, multiplier 1.1, max 32s, jitter 1s, attempts 8",
				"ratio 0.1: r = 1.1: after a long time T, each wait is about 0.1·T",
				"retries: about 7.27 times as many as with r = 2 over the same time (log 2 / log 1.1)",
			},
		},
		{
			[]string{"-ratio", "0.1", "-multiplier", "1"}, // -ratio wins; no count ratio from r = 1
			0,
			[]string{"ratio 0.1: r = 1.1: after a long time T, each wait is about 0.1·T"},
		},
		{
			[]string{"-ratio", "0.1", "-max", "1h", "-jitter", "0", "-attempts", "50", "-at", "1000s"},
			0,
			[]string{
				"at 1000s: 48 retries made, the last at 960.172s; next is retry 49 after 97.017s, at 1057.19s (without jitter)",
				"t(T) = min(a + (r-1)·T, max) = 101s",
			},
		},
		{
			[]string{"-multiplier", "2", "-max", "1h", "-jitter", "0", "-attempts", "12", "-at", "1023s"},
			0,
			[]string{
				"at 1023s: 10 retries made, the last at 1023s; next is retry 11 after 1024s, at 2047s (without jitter)",
				"t(T) = min(a + (r-1)·T, max) = 1024s",
			},
		},
		{
			[]string{"-at", "1000s"},
			0,
			[]string{
				"at 1000s: 35 retries made, the last at 991s; next is retry 36 after 32s, at 1023s (without jitter)",
				"t(T) = min(a + (r-1)·T, max) = 32s",
				"but -attempts 8 gives up after retry 7, at 95s to 100s",
			},
		},
		{
			[]string{"-at", "0s", "-attempts", "1"},
			0,
			[]string{
				"at 0s: no retry yet; next is retry 1 after 1s, at 1s (without jitter)",
				"but -attempts 1 makes no retry",
			},
		},
		{
			[]string{"-deadline", "600s"},
			0,
			[]string{
				"deadline 600s: 8 of 8 attempts start in time; the last is due at 95s to 100s",
				"ok: the policy uses all its attempts and at least a tenth of the deadline",
			},
		},
		{
			[]string{"-deadline", "30s"},
			1,
			[]string{
				"deadline 30s: 5 of 8 attempts start in time; the last is due at 95s to 100s",
				"warning: MaxAttempts (8) needs up to 100s of delays but the deadline is 30s: only 5 attempts start in time",
			},
		},
		{
			[]string{"-deadline", "10s"},
			1,
			[]string{"deadline 10s: 3 (with the most jitter) to 4 of 8 attempts start in time; the last is due at 95s to 100s"},
		},
		{
			[]string{"-deadline", "1h"},
			1,
			[]string{"warning: gives up after at most 100s of delays, less than a tenth of the 3600s deadline: MaxAttempts up to 117 would still fit"},
		},
		{
			[]string{"-attempts", "1000"},
			0,
			[]string{"(the first 100 of 999 retries; -rows shows more)"},
		},
		{
			[]string{"-initial", "1500us", "-max", "10ms", "-jitter", "0", "-rows", "2"},
			0,
			[]string{"      1  0.001500  0.001500", "      2  0.003000  0.004500"},
		},
	} {
		status, out, errOut := runPlan(t, tc.args...)
		if status != tc.status || errOut != "" {
			t.Errorf("run(%q) = %d, stderr %q, want %d and nothing", tc.args, status, errOut, tc.status)
		}
		lines := strings.Split(out, "\n")
		for _, w := range tc.want {
			if !slices.Contains(lines, w) {
				t.Errorf("run(%q) has no line %q:\n%s", tc.args, w, out)
			}
		}
	}
}

func TestBackoffPlanRowsLimit(t *testing.T) {
	args := []string{"-attempts", "1000000000"}
	status, out, _ := runPlan(t, args...)
	if n := len(rows(out)); status != 0 || n != 101 {
		t.Errorf("run(%q) = %d with %d rows, want 0 with 101", args, status, n)
	}
	args = []string{"-attempts", "3", "-rows", "0"}
	status, out, _ = runPlan(t, args...)
	if n := len(rows(out)); status != 0 || n != 1 {
		t.Errorf("run(%q) = %d with %d rows, want 0 with 1", args, status, n)
	}
}

func TestBackoffPlanBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"-initial", "0s"}, "backoffplan: -initial 0s: must be positive"},
		{[]string{"-initial", "-1s"}, "backoffplan: -initial -1s: must be positive"},
		{[]string{"-multiplier", "0.5"}, "backoffplan: -multiplier 0.5: must be a finite number of at least 1"},
		{[]string{"-multiplier", "NaN"}, "backoffplan: -multiplier NaN: must be a finite number of at least 1"},
		{[]string{"-multiplier", "+Inf"}, "backoffplan: -multiplier +Inf: must be a finite number of at least 1"},
		{[]string{"-max", "1s", "-initial", "2s"}, "backoffplan: -max 1s: must not be less than -initial 2s"},
		{[]string{"-jitter", "-1ms"}, "backoffplan: -jitter -1ms: must not be negative"},
		{[]string{"-attempts", "0"}, "backoffplan: -attempts 0: must be at least 1"},
		{[]string{"-ratio", "0"}, "backoffplan: -ratio 0: grpcbackoff: ratio (0) must be positive"},
		{[]string{"-ratio", "-0.1"}, "backoffplan: -ratio -0.1: grpcbackoff: ratio (-0.1) must be positive"},
		{[]string{"-ratio", "NaN"}, "backoffplan: -ratio NaN: grpcbackoff: ratio (NaN) must be a finite number"},
		{[]string{"-rows", "-1"}, "backoffplan: -rows -1: must be between 0 and 9223372036854775806"},
		{[]string{"-at", "-1s"}, "backoffplan: -at -1s: must not be negative"},
		{[]string{"-deadline", "0s"}, "backoffplan: -deadline 0s: must be positive"},
		{[]string{"-max", "abc"}, `invalid value "abc" for flag -max`},
		{[]string{"-ratio", "1e400"}, `invalid value "1e400" for flag -ratio`},
		{[]string{"-attempts", "1.5"}, `invalid value "1.5" for flag -attempts`},
		{[]string{"-bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"600s"}, `backoffplan: unexpected argument "600s"`},
	} {
		status, out, errOut := runPlan(t, tc.args...)
		if status != 2 || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("run(%q) = %d, stdout %q, stderr %q; want 2, nothing, and %q", tc.args, status, out, errOut, tc.want)
		}
	}
}

func TestBackoffPlanHelp(t *testing.T) {
	status, out, errOut := runPlan(t, "-h")
	if status != 0 || out != "" || !strings.Contains(errOut, "usage: backoffplan [flags]") || !strings.Contains(errOut, "-ratio") {
		t.Errorf("run(-h) = %d, stdout %q, stderr %q; want 0 and the usage on stderr", status, out, errOut)
	}
}

// TestBackoffPlanJitterFactor: a policy as a service config makes it
// (multiplicative jitter, no additive one) shows each wait's range.
func TestBackoffPlanJitterFactor(t *testing.T) {
	args := []string{"-initial", "100ms", "-max", "1s", "-jitter", "0", "-jitter-factor", "0.2", "-attempts", "6"}
	status, out, errOut := runPlan(t, args...)
	if status != 0 || errOut != "" {
		t.Fatalf("run(%q) = %d, stderr %q, want 0 and nothing", args, status, errOut)
	}
	if !strings.Contains(out, "jitter factor 0.2: each wait times U[0.8, 1.2]\n") {
		t.Errorf("run(%q) does not state the jitter factor:\n%s", args, out)
	}
	checkRows(t, args, out, [][]string{
		{"1", "0.100", "0.080–0.120", "0.100", "0.120"},
		{"4", "0.800", "0.640–0.960", "1.500", "1.800"},
		{"5", "1.000", "0.800–1.200", "2.500", "3.000"},
	})
	if status, _, errOut := runPlan(t, "-jitter-factor", "1"); status != 2 || !strings.Contains(errOut, "-jitter-factor 1: must be a number in [0, 1)") {
		t.Errorf("run(-jitter-factor 1) = %d, %q; want 2 and an error naming the flag", status, errOut)
	}
}
