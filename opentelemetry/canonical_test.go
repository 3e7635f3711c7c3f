package opentelemetry

import (
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestCanonicalTargetGuess checks the guess made for the gauges' targets,
// before a call brings the ClientConn, against grpc-go's own canonical
// target for targets of the forms in use.
func TestCanonicalTargetGuess(t *testing.T) {
	for _, raw := range []string{
		"example.com:443", "example.com", "dns:///example.com:443", "dns://8.8.8.8/example.com",
		"passthrough:///bufnet", "unix:///tmp/grpc.sock", "unix:relative.sock", "127.0.0.1:50051",
		"[::1]:50051", "localhost", "xyz:///x", "redis.googleapis.com:443",
	} {
		cc, err := grpc.NewClient(raw, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Errorf("grpc.NewClient(%q): %v", raw, err)
			continue
		}
		if got, want := canonicalTarget(raw), cc.CanonicalTarget(); got != want {
			t.Errorf("canonicalTarget(%q) = %q, want %q", raw, got, want)
		}
		cc.Close()
	}
	if got := canonicalTarget(""); got != "" {
		t.Errorf(`canonicalTarget("") = %q, want ""`, got)
	}
}
