// Package offline keeps the tests that build Google Cloud clients on the
// machine.
//
// Google's clients probe the cloud metadata server (169.254.169.254) to learn
// whether they run on Google Cloud, and Bigtable's Direct Access probes
// Google endpoints. Main points GCE_METADATA_HOST at a stand-in on loopback
// that answers nothing, and turns Direct Access off. CI runs the test
// binaries under strace to check that nothing else leaves (.ci/offline).
package offline

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
)

// Main is a TestMain: it runs m with the environment above and exits with
// its code.
func Main(m *testing.M) {
	metadata := httptest.NewServer(http.NotFoundHandler())
	for k, v := range map[string]string{
		"GCE_METADATA_HOST":     metadata.Listener.Addr().String(),
		"CBT_ENABLE_DIRECTPATH": "false",
	} {
		if err := os.Setenv(k, v); err != nil {
			fmt.Fprintln(os.Stderr, "offline:", err)
			os.Exit(2)
		}
	}
	code := m.Run()
	metadata.Close()
	os.Exit(code)
}
