// Command gaxdata writes the library's data on the Google Cloud clients:
// what every generated Go client retries, from googleapis' gRPC service
// configs (internal/googledata/retries.txt, in words, and
// retries_gen.go, which carries it deflated), and what the descriptors of
// the methods of the clients the googleclients module pins tell of their
// safety (internal/googledata/safety_gen.go). From the repository's
// root, or by go generate in internal/googledata:
//
//	go run ./googleclients/cmd/gaxdata -w   # rewrites the three files
//	go run ./googleclients/cmd/gaxdata      # prints retries.txt
//
// The configs are read from $GOOGLEAPIS_SERVICE_CONFIGS, or else
// ../shared/data/googleapis-service-configs from the repository's root
// (every *_grpc_service_config.json of a googleapis commit at its path, and
// a SOURCE file naming the commit); without them it fails, saying so. It
// builds each pinned client offline (nothing is dialled).
// googleclients' TestGeneratedDataIsCurrent fails when the committed files
// no longer match.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/platformkit/grpcbackoff/googleclients"
)

func main() {
	write := flag.Bool("w", false, "write the files instead of printing retries.txt")
	flag.Parse()
	if err := run(*write); err != nil {
		fmt.Fprintln(os.Stderr, "gaxdata:", err)
		os.Exit(1)
	}
}

func run(write bool) error {
	root, err := workspaceRoot()
	if err != nil {
		return err
	}
	files, err := googleclients.GenerateFiles(context.Background(), root)
	if err != nil {
		return err
	}
	if !write {
		_, err = os.Stdout.Write(files[googleclients.TableFile])
		return err
	}
	for _, name := range googleclients.GeneratedFiles {
		path := filepath.Join(root, name)
		if err := os.WriteFile(path, files[name], 0o644); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "gaxdata: %s: %d bytes\n", path, len(files[name]))
	}
	return nil
}

// workspaceRoot returns the directory of the go.work file above the
// working directory.
func workspaceRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.work above the working directory: run from the repository")
		}
		dir = parent
	}
}
