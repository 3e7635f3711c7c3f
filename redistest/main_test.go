package redistest_test

import (
	"testing"

	"github.com/platformkit/grpcbackoff/internal/offline"
)

// TestMain keeps every test on the machine: see package offline.
func TestMain(m *testing.M) { offline.Main(m) }
