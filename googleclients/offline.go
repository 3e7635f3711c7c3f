package googleclients

import (
	"net/http"
	"net/http/httptest"
	"os"
)

// Offline keeps the clients a program builds on the machine, as
// internal/offline does for tests: it points GCE_METADATA_HOST at a
// stand-in on loopback that answers nothing and turns Bigtable's Direct
// Access off. Call the returned function to stop the stand-in; it gives
// both variables back the values they had, so that clients built after it
// (a test's, under internal/offline's stand-in) do not probe a stand-in
// gone, which the metadata client retries for many seconds.
func Offline() (stop func(), err error) {
	metadata := httptest.NewServer(http.NotFoundHandler())
	vars := map[string]string{
		"GCE_METADATA_HOST":     metadata.Listener.Addr().String(),
		"CBT_ENABLE_DIRECTPATH": "false",
	}
	type was struct {
		value string
		set   bool
	}
	before := make(map[string]was, len(vars))
	restore := func() {
		for k, w := range before {
			if w.set {
				os.Setenv(k, w.value)
			} else {
				os.Unsetenv(k)
			}
		}
	}
	for k, v := range vars {
		value, set := os.LookupEnv(k)
		before[k] = was{value, set}
		if err := os.Setenv(k, v); err != nil {
			restore()
			metadata.Close()
			return nil, err
		}
	}
	return func() {
		restore()
		metadata.Close()
	}, nil
}
