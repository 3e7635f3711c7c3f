// Command gaxdata writes what the generated gRPC clients pinned by the
// googleclients module retry, method by method and code by code, as the
// data of the library (internal/googleclients/data_gen.go). From the
// repository's root:
//
//	go run ./googleclients/cmd/gaxdata -w   # rewrites internal/googleclients/data_gen.go
//	go run ./googleclients/cmd/gaxdata      # prints it
//
// It builds each client offline (nothing is dialled) and reads its default
// CallOptions; googleclients' TestGeneratedDataIsCurrent fails when the
// committed file no longer matches.
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
	write := flag.Bool("w", false, "write the file instead of printing it")
	out := flag.String("o", "", "the file to write (default: internal/googleclients/data_gen.go of the workspace)")
	pkg := flag.String("pkg", "googleclients", "the package of the file")
	flag.Parse()
	if err := run(*write, *out, *pkg); err != nil {
		fmt.Fprintln(os.Stderr, "gaxdata:", err)
		os.Exit(1)
	}
}

func run(write bool, out, pkg string) error {
	stop, err := googleclients.Offline()
	if err != nil {
		return err
	}
	defer stop()
	d, err := googleclients.Generate(context.Background())
	if err != nil {
		return err
	}
	src, err := googleclients.Render(d, pkg)
	if err != nil {
		return err
	}
	if !write {
		_, err = os.Stdout.Write(src)
		return err
	}
	if out == "" {
		root, err := workspaceRoot()
		if err != nil {
			return err
		}
		out = filepath.Join(root, googleclients.DataFile)
	}
	if err := os.WriteFile(out, src, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "gaxdata: %s: %d clients, %d methods, %d bytes\n", out, len(d.Clients), len(d.Methods), len(src))
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
			return "", fmt.Errorf("no go.work above the working directory: run from the repository, or give -o")
		}
		dir = parent
	}
}
