package gaxretry_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
)

// TestMain keeps every test on the machine. Google's clients probe the
// cloud metadata server (169.254.169.254) to learn whether they run on
// Google Cloud: GCE_METADATA_HOST points them at a stand-in on loopback that
// answers nothing. Bigtable's Direct Access, which probes Google endpoints,
// is turned off.
func TestMain(m *testing.M) {
	metadata := httptest.NewServer(http.NotFoundHandler())
	for k, v := range map[string]string{
		"GCE_METADATA_HOST":     metadata.Listener.Addr().String(),
		"CBT_ENABLE_DIRECTPATH": "false",
	} {
		if err := os.Setenv(k, v); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	code := m.Run()
	metadata.Close()
	os.Exit(code)
}
