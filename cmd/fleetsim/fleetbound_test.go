package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"
)

// TestFleetBoundRun runs -fleet-bound: each case's retries, bound and
// slack, and how far over the bound and its slack the worst seed went
// (never: a negative figure).
func TestFleetBoundRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-fleet-bound"}, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, re := range []string{`(?m)^ +steady +10 +100 +\d+-\d+ +\d+-\d+ +[\d.]+ +-\d+ *$`, `(?m)^ +steady +40 +100 `,
		`(?m)^ +low traffic +20 +10 +\d+-\d+ +\d+-\d+ +[\d.]+ +-\d+ *$`, `(?m)^ +idle +10 +100 +\d+-\d+ +\d+-\d+ +[\d.]+ +-\d+ *$`} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("output does not match %s:\n%s", re, out.String())
		}
	}
}
