// Command modpack packs modules of this repository, as committed, into a
// module proxy directory, as the Go module proxy would serve them once
// tagged, so that a release can be rehearsed before its tags exist
// (GOPROXY=file://DIR).
//
//	go run ./cmd/internal/modpack -version v0.1.0 -out DIR [-rev HEAD] MODULE_DIR...
//
// Each MODULE_DIR, relative to the repository's root, is zipped from the
// commit as golang.org/x/mod/zip does for the go command (nested modules
// left out), with its go.mod and an .info file.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

func main() {
	version := flag.String("version", "", "the version to pack the modules at, e.g. v0.1.0")
	out := flag.String("out", "", "the module proxy directory to write")
	rev := flag.String("rev", "HEAD", "the commit to pack")
	flag.Parse()
	if err := run(*version, *out, *rev, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "modpack:", err)
		os.Exit(1)
	}
}

func run(version, out, rev string, dirs []string) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("-version %q: want a canonical semantic version such as v0.1.0", version)
	}
	if out == "" {
		return errors.New("-out is empty: want the module proxy directory to write")
	}
	if len(dirs) == 0 {
		return errors.New("no module directory given")
	}
	for _, dir := range dirs {
		if err := pack(version, out, rev, dir); err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
	}
	return nil
}

// pack writes the module in dir, as of commit rev, at version into the proxy
// directory out.
func pack(version, out, rev, dir string) error {
	dir = filepath.ToSlash(filepath.Clean(dir))
	gomod, err := exec.Command("git", "show", rev+":"+strings.TrimPrefix(dir+"/go.mod", "./")).Output()
	if err != nil {
		return fmt.Errorf("reading go.mod at %s: %w", rev, err)
	}
	path := modfile.ModulePath(gomod)
	if path == "" {
		return errors.New("go.mod names no module")
	}
	mv := module.Version{Path: path, Version: version}
	escaped, err := module.EscapePath(path)
	if err != nil {
		return err
	}
	at := filepath.Join(out, escaped, "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		return err
	}
	z, err := os.Create(filepath.Join(at, version+".zip"))
	if err != nil {
		return err
	}
	subdir := dir
	if subdir == "." {
		subdir = ""
	}
	if err := modzip.CreateFromVCS(z, mv, ".", rev, subdir); err != nil {
		z.Close()
		return err
	}
	if err := z.Close(); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{version + ".mod": gomod, version + ".info": info, "list": []byte(version + "\n")} {
		if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("%s@%s\n", path, version)
	return nil
}
