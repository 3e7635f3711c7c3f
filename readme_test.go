package grpcbackoff_test

import (
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/guard"
	"github.com/platformkit/grpcbackoff/interceptor"
)

// The README's Go snippets, compiled here or, where they need a module of
// their own, in that module's readme_test.go; TestReadmeSnippetsCompile
// checks that each snippet of README.md stands in one of them, line for line.
var _ = []any{readmeFirst, readmeUsage, readmeGuard}

func readmeFirst(target string, creds credentials.TransportCredentials) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient(target,
		append(interceptor.DialOptions(grpcbackoff.DefaultPolicy()),
			grpc.WithTransportCredentials(creds))...)
	return conn, err
}

func readmeUsage(target string, reads grpcbackoff.Policy, creds credentials.TransportCredentials) (*grpc.ClientConn, error) {
	r, err := interceptor.New(grpcbackoff.DefaultPolicy(),
		interceptor.WithMethod("/google.cloud.redis.v1.CloudRedis/GetInstance", reads), // a Policy of its own
		interceptor.WithHedging("/google.cloud.redis.v1.CloudRedis/ListInstances",
			grpcbackoff.Hedging{MaxAttempts: 2, Delay: 50 * time.Millisecond}),
		interceptor.WithLogger(slog.Default()))
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(target, append(r.DialOptions(), grpc.WithTransportCredentials(creds))...)
	return conn, err
}

func readmeGuard(creds credentials.TransportCredentials) (*grpc.Server, error) {
	g, err := guard.New(guard.Options{})
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer(append(g.ServerOptions(), grpc.Creds(creds))...)
	return srv, nil
}

// lines returns the non-empty lines of s, without indentation.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func TestReadmeSnippetsCompile(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var here strings.Builder
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "readme_test.go" {
			b, err := os.ReadFile(path)
			here.WriteString("\n" + strings.Join(lines(string(b)), "\n") + "\n")
			return err
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) == 0 {
		t.Fatal("README.md has no Go snippet")
	}
	for _, b := range blocks {
		if snippet := strings.Join(lines(b[1]), "\n"); !strings.Contains(here.String(), "\n"+snippet+"\n") {
			t.Errorf("this README snippet is not compiled in any readme_test.go:\n%s", b[1])
		}
	}
}

// TestReadmeNamesRealTests checks that every test, example and fuzz target
// the README, its Guarantees table (GUARANTEES.md) and gaxretry's README
// name exists in the repository.
func TestReadmeNamesRealTests(t *testing.T) {
	var readme []byte
	for _, doc := range []string{"README.md", "GUARANTEES.md", "gaxretry/README.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		readme = append(readme, b...)
	}
	var sources strings.Builder
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, "_test.go") {
			b, err := os.ReadFile(path)
			sources.Write(b)
			return err
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile("`((?:Test|Fuzz|Example)[A-Za-z0-9_]+)`").FindAllStringSubmatch(string(readme), -1)
	if len(names) < 50 {
		t.Fatalf("the docs name %d tests, want the Guarantees table's (at least 50)", len(names))
	}
	for _, name := range names {
		if !strings.Contains(sources.String(), "func "+name[1]+"(") {
			t.Errorf("README names %s, which no test file defines", name[1])
		}
	}
}
