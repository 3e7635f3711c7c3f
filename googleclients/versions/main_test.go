package versions

import (
	"testing"

	"github.com/platformkit/grpcbackoff/internal/offline"
)

// TestMain keeps every test on the machine, as in every package whose tests
// build Google clients: offline.Main points GCE_METADATA_HOST at a loopback
// stand-in for the metadata server (169.254.169.254) and turns Bigtable's
// Direct Access off.
func TestMain(m *testing.M) { offline.Main(m) }
