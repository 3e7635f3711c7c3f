package googleclients

import (
	"net/http"
	"net/http/httptest"
	"os"
)

// Offline keeps the clients a program builds on the machine, as
// internal/offline does for tests: it points GCE_METADATA_HOST at a
// stand-in on loopback that answers nothing and turns Bigtable's Direct
// Access off. Call the returned function to stop the stand-in.
func Offline() (stop func(), err error) {
	metadata := httptest.NewServer(http.NotFoundHandler())
	for k, v := range map[string]string{
		"GCE_METADATA_HOST":     metadata.Listener.Addr().String(),
		"CBT_ENABLE_DIRECTPATH": "false",
	} {
		if err := os.Setenv(k, v); err != nil {
			metadata.Close()
			return nil, err
		}
	}
	return metadata.Close, nil
}
