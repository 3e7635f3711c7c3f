package main

import (
	"bytes"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/platformkit/grpcbackoff/cmd/internal/simchart"
)

// TestRun runs a tiny experiment in real time scale 1 inside a bubble, so
// that its model time costs nothing, and checks the output and the charts.
func TestRun(t *testing.T) {
	for _, ext := range []string{"svg", "png"} {
		t.Run(ext, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "storm."+ext)
				var out bytes.Buffer
				err := run(t.Context(), []string{
					"-clients", "60", "-duration", "8s", "-pause-at", "2s", "-pause", "2s",
					"-limit", "3", "-k", "1", "-scale", "1",
					"-strategies", "fixed,recipe+budget", "-chart", path,
				}, &out)
				if err != nil {
					t.Fatalf("run: %v\n%s", err, out.String())
				}
				got := out.String()
				for _, want := range []string{"strategy  recovered  settled  peak conc.", "chart: " + path} {
					if !strings.Contains(got, want) {
						t.Errorf("output lacks %q:\n%s", want, got)
					}
				}
				// One line per second and strategy, in order.
				line := regexp.MustCompile(`(?m)^t=(\d+)s +(\S+) +OK +\d+/s +errors +\d+/s +timedout +\d+/s +attempts +\d+/s +concurrency \d+$`)
				var seq []string
				for _, m := range line.FindAllStringSubmatch(got, -1) {
					seq = append(seq, m[1]+" "+m[2])
				}
				var want []string
				for i := 1; i <= 8; i++ {
					want = append(want, fmt.Sprintf("%d fixed", i), fmt.Sprintf("%d recipe+budget", i))
				}
				if !slices.Equal(seq, want) {
					t.Errorf("per-second lines %q, want %q:\n%s", seq, want, got)
				}
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				switch ext {
				case "svg":
					if !bytes.HasPrefix(b, []byte("<svg")) || bytes.Count(b, []byte("<svg")) != 3 || !bytes.Contains(b, []byte("recipe+budget")) {
						t.Errorf("%s is not two SVG panels in one naming the strategies", path)
					}
				case "png":
					img, err := png.Decode(bytes.NewReader(b))
					if err != nil {
						t.Fatal(err)
					}
					if r := img.Bounds(); r.Dx() != simchart.Width || r.Dy() != 2*simchart.PanelHeight {
						t.Errorf("%s is %v, want %dx%d", path, r, simchart.Width, 2*simchart.PanelHeight)
					}
				}
			})
		})
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-clients", "0"}, "clients (0)"},
		{[]string{"-latency", "later"}, `latency rule "later"`},
		{[]string{"-strategies", "fixed,linear"}, `unknown strategy "linear"`},
		{[]string{"-chart", "storm.jpg"}, "must end in .png or .svg"},
		{[]string{"-pause-at", "55s"}, "must lie within the run"},
		{[]string{"extra"}, "unexpected arguments"},
	}
	for _, tc := range cases {
		var out bytes.Buffer
		err := run(t.Context(), tc.args, &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}
