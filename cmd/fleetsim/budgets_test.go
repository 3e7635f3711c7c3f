package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestBudgets(t *testing.T) {
	var out bytes.Buffer
	chart := filepath.Join(t.TempDir(), "budgets.png")
	err := run(context.Background(), []string{"-budgets", "-clients", "10000", "-backlog", "1000", "-limit", "300", "-k", "150",
		"-processes", "10,1000", "-chart", chart}, &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, re := range []string{`(?m)^ +UNAVAILABLE +1000 +fleet +\d{4} `, `(?m)^ +pause +1000 +per process +\d{5} `,
		`(?m)^ +storm +1000 +per process( +[-\d]+){8} +no *$`, `(?m)^ +storm +1000 +fleet( +[-\d]+){8} +\+\d+s *$`,
		`(?m)^ +UNAVAILABLE +1000 +guard +\d+ +\d+ +- +\d+ +\d+ +[1-9]\d* `, `(?m)^ +storm +1000 +grpc\+guard( +[-\d]+){8} +\+\d+s *$`} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("output does not match %s:\n%s", re, out.String())
		}
	}
	if _, err := os.Stat(chart); err != nil {
		t.Error(err)
	}
}

// TestBudgetsReal runs -budgets-real small (5 processes of each fleet,
// 25 s): only with FLEETSIM_BUDGETS_REAL=1 and a redis-server, real time.
func TestBudgetsReal(t *testing.T) {
	if os.Getenv("FLEETSIM_BUDGETS_REAL") != "1" {
		t.Skip("set FLEETSIM_BUDGETS_REAL=1 to run real processes for 25 s")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("no redis-server")
	}
	var out bytes.Buffer
	err := run(context.Background(), []string{"-budgets-real", "-real-processes", "5", "-real-pause-at", "4s", "-real-pause", "5s",
		"-real-redis-kill-at", "12s", "-real-redis-down", "5s", "-real-duration", "22s", "-chart", ""}, &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, re := range []string{`5 of 5 processes fell back`, `all 5 joined again`, `5 of 5 processes logged the fallback exactly once`,
		`(?m)^ +fleet budget \(Redis\) +\d+ +\d+ +\d+ +\d+ +0 *$`} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("output does not match %s:\n%s", re, out.String())
		}
	}
}

// TestBudgetsFlags: with -budgets, -pause sets the outage and keeps the
// minute after it, and -strategies replaces the experiment's six.
func TestBudgetsFlags(t *testing.T) {
	cfg, err := parse([]string{"-budgets", "-pause", "28s", "-strategies", "grpc+guard,recipe+guard", "-processes", "10"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b := cfg.budgets
	if b.Base.Pause != 28*time.Second || b.Base.Duration != 108*time.Second {
		t.Errorf("-pause 28s: outage %v, run %v; want 28s and 1m48s", b.Base.Pause, b.Base.Duration)
	}
	var names []string
	for _, st := range b.Strategies {
		names = append(names, st.Name)
	}
	if strings.Join(names, ",") != "grpc+guard,recipe+guard" {
		t.Errorf("-strategies: %v", names)
	}
	if cfg, err = parse([]string{"-budgets"}, io.Discard); err != nil || len(cfg.budgets.Strategies) != 6 || cfg.budgets.Base.Pause != 30*time.Second {
		t.Errorf("-budgets alone: %d strategies, outage %v, %v; want 6, 30s", len(cfg.budgets.Strategies), cfg.budgets.Base.Pause, err)
	}
}
