package main

import (
	"bytes"
	"context"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/platformkit/grpcbackoff/cmd/internal/simchart"
)

// TestMain lets the test binary serve as the server process of -real.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == serverFlag {
		if err := serveChild(os.Args[2:]); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	if len(os.Args) > 1 && os.Args[1] == clientFlag {
		if err := clientChild(os.Args[2:]); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestSingleRun(t *testing.T) {
	var out bytes.Buffer
	chart := filepath.Join(t.TempDir(), "run.png")
	err := run(context.Background(), []string{"-clients", "1000", "-limit", "30", "-k", "15", "-duration", "40s",
		"-strategies", "fixed,recipe+budget", "-chart", chart, "-per-second"}, &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, re := range []string{
		`fleetsim: 1000 clients \(1000 per process\), offered 100 calls/s = 33% of capacity`,
		`(?m)^ +fixed +no +no `,
		`(?m)^ +recipe\+budget +\+[0-2]s +\+[0-2]s `,
		`(?m)^recipe\+budget, second by second:\n +second +started +OK +failed +attempts +retries at the server +refused +in the server *\n +0 +\d+ `,
		`chart: ` + regexp.QuoteMeta(chart),
	} {
		if !regexp.MustCompile(re).MatchString(got) {
			t.Errorf("output does not match %q:\n%s", re, got)
		}
	}
	b, err := os.ReadFile(chart)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if r := img.Bounds(); r.Dx() != simchart.Width || r.Dy() != 2*simchart.PanelHeight {
		t.Errorf("the chart is %v, want the two panels of a run, %dx%d", r, simchart.Width, 2*simchart.PanelHeight)
	}
}

func TestGridRunWritesChart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "grid.png")
	var out bytes.Buffer
	err := run(context.Background(), []string{"-grid", "-clients", "500", "-per-process", "500",
		"-grid-loads", "50,90", "-grid-outages", "1s,10s", "-after", "15s",
		"-strategies", "fixed,recipe+budget", "-chart", path}, &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{"[  8/8 ", "recipe+budget: seconds from the resume to recovery", "chart: " + path} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("chart: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 400 || b.Dy() < 150 {
		t.Errorf("chart is %v, too small for two panels", b)
	}
}

func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-clients", "0"}, "clients (0) must be between 1"},
		{[]string{"-load", "1.5"}, "-load (1.5) must be in (0, 1]"},
		{[]string{"-backlog", "-3"}, "backlog (-3) must not be negative"},
		{[]string{"-strategies", "recipe,nope"}, `unknown strategy "nope"`},
		{[]string{"-grid", "-grid-loads", "50,120"}, `-grid-loads: "120" is not a percentage in (0, 100]`},
		{[]string{"-grid", "-grid-outages", "1s,soon"}, `-grid-outages: "soon" is not a non-negative duration`},
		{[]string{"-grid", "-parallel", "0"}, "parallel (0) must be at least 1"},
		{[]string{"-grid", "-real"}, "-grid and -real are exclusive"},
		{[]string{"-real", "-real-pause", "50s"}, "-real-pause (50s at 10s) must end within -real-duration (40s)"},
		{[]string{"-chart", "x.jpg"}, `-chart "x.jpg" must end in .png (or .svg, for the single run)`},
		{[]string{"-grid", "-chart", "x.svg"}, `-chart "x.svg" must end in .png`},
		{[]string{"stray"}, `unexpected arguments ["stray"]`},
	} {
		_, err := parse(tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parse(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

// TestReal runs the article's experiment for real, small: a server process
// on 127.0.0.1 stopped with SIGSTOP for 2 s, 100 clients; it checks the
// table and that no server process is left.
func TestReal(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 8 s of real time")
	}
	if sigStop == nil {
		t.Skip("-real runs on Linux only")
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	err := run(ctx, []string{"-real", "-real-clients", "100", "-real-pause-at", "2s", "-real-pause", "2s", "-real-duration", "8s",
		"-strategies", "recipe+budget"}, &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("-real of 8 s took %v", d)
	}
	got := out.String()
	if !regexp.MustCompile(`(?m)^ +recipe\+budget +(\+\ds|no) +(\+\ds|no) +\d+ +[1-9]\d* `).MatchString(got) {
		t.Errorf("no result line for recipe+budget with successful calls:\n%s", got)
	}
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	for _, f := range tasks {
		if b, err := os.ReadFile(f); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			t.Errorf("a child process is left: %s", b)
		}
	}
}
