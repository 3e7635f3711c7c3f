package googleclients_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/platformkit/grpcbackoff/googleclients"
	"github.com/platformkit/grpcbackoff/internal/offline"
)

// TestMain keeps every test on the machine: offline.Main points
// GCE_METADATA_HOST at a loopback stand-in for the metadata server and
// turns Bigtable's Direct Access off.
func TestMain(m *testing.M) { offline.Main(m) }

// TestGeneratedDataIsCurrent regenerates the library's data on the Google
// clients, from googleapis' service configs and the pinned clients, and
// fails, with the lines that differ, when a committed file no longer
// matches: run go run ./googleclients/cmd/gaxdata -w from the repository's
// root. Without the service configs it skips, saying where it looked.
func TestGeneratedDataIsCurrent(t *testing.T) {
	root := filepath.Join("..")
	dir := googleclients.ConfigsDir(root)
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("SKIPPED: the data is not checked against googleapis' gRPC service configs: %v; set %s to a folder of them (every *_grpc_service_config.json of a googleapis commit and a SOURCE file)", err, googleclients.ConfigsEnv)
	}
	files, err := googleclients.GenerateFiles(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range googleclients.GeneratedFiles {
		want := files[name]
		got, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(got, want) {
			t.Logf("%s: %d bytes, current", name, len(got))
			continue
		}
		gone, added := lineDiff(string(got), string(want))
		t.Errorf("%s no longer matches the service configs and the pinned clients (%d lines to remove, %d to add): run go run ./googleclients/cmd/gaxdata -w from the repository's root", name, len(gone), len(added))
		for i, l := range gone {
			if i == 20 {
				t.Logf("… %d more", len(gone)-i)
				break
			}
			t.Logf("- %s", strings.TrimSpace(l))
		}
		for i, l := range added {
			if i == 20 {
				t.Logf("… %d more", len(added)-i)
				break
			}
			t.Logf("+ %s", strings.TrimSpace(l))
		}
	}
}

// lineDiff returns the lines of a not in b, and of b not in a, counted.
func lineDiff(a, b string) (gone, added []string) {
	count := make(map[string]int)
	for _, l := range strings.Split(b, "\n") {
		count[l]++
	}
	for _, l := range strings.Split(a, "\n") {
		if count[l] > 0 {
			count[l]--
		} else {
			gone = append(gone, l)
		}
	}
	for _, l := range strings.Split(b, "\n") {
		if count[l] > 0 {
			count[l]--
			added = append(added, l)
		}
	}
	return gone, added
}

func TestToken(t *testing.T) {
	for _, c := range []struct{ header, name, want string }{
		{"gl-go/1.26.0 gapic/1.29.0 gax/2.27.0", "gapic", "1.29.0"},
		{"gccl-attempt-count/1 gccl/1.69.0", "gccl", "1.69.0"},
		{"my-wrapper/1.0", "gapic", ""},
	} {
		if got := googleclients.Token(c.header, c.name); got != c.want {
			t.Errorf("Token(%q, %q) = %q, want %q", c.header, c.name, got, c.want)
		}
	}
}

// TestServiceConfigCounts counts what googleapis' service configs name, and
// checks that gaxretry/README.md says it (issue 42: a doc said 6 596
// methods and 948 services, a count by hand 6 593 and 947).
func TestServiceConfigCounts(t *testing.T) {
	dir := googleclients.ConfigsDir("..")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("SKIPPED: %v; set %s to a folder of googleapis' gRPC service configs", err, googleclients.ConfigsEnv)
	}
	sc, err := googleclients.ReadServiceConfigs(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := sc.Count()
	t.Logf("%+v", c)
	readme, err := os.ReadFile(filepath.Join("..", "gaxretry", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	sp := func(n int) string { // 6596 as the README writes it: "6 596"
		s := strconv.Itoa(n)
		if len(s) > 3 {
			s = s[:len(s)-3] + " " + s[len(s)-3:]
		}
		return s
	}
	want := fmt.Sprintf("all %d of them, at googleapis `%s` (%s names of a method, %s distinct service/method pairs; %s names of a whole service, %s services",
		c.Files, sc.Commit[:8], sp(c.MethodNames), sp(c.Methods), sp(c.WholeNames), sp(c.WholeServices))
	if !strings.Contains(strings.Join(strings.Fields(string(readme)), " "), want) {
		t.Errorf("gaxretry/README.md does not say %q", want)
	}
}
