// Command apilist lists the exported API of the published modules, one line
// per exported identifier, field and method, as the Go project's api/*.txt
// files do, so that every API change is deliberate and shows in review.
//
//	go run ./cmd/internal/apilist        compare with api/*.txt; fail and print the differences
//	go run ./cmd/internal/apilist -w     write api/*.txt
//
// Run it from the repository's root. Packages under internal/ and commands
// are not API.
package main

import (
	"flag"
	"fmt"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/tools/go/packages"
)

// modules are the published modules: the directory of each, and its file in
// api/.
var modules = []struct{ dir, file string }{
	{".", "grpcbackoff.txt"},
	{"gaxretry", "gaxretry.txt"},
	{"opentelemetry", "opentelemetry.txt"},
	{"redistest", "redistest.txt"},
	{"fleetbudget", "fleetbudget.txt"},
}

func main() {
	write := flag.Bool("w", false, "write api/*.txt instead of comparing with them")
	flag.Parse()
	failed := false
	for _, m := range modules {
		lines, err := list(m.dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "apilist:", err)
			os.Exit(1)
		}
		got := strings.Join(lines, "\n") + "\n"
		path := filepath.Join("api", m.file)
		if *write {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				fmt.Fprintln(os.Stderr, "apilist:", err)
				os.Exit(1)
			}
			continue
		}
		old, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "apilist:", err)
			os.Exit(1)
		}
		if added, removed := diff(strings.Split(strings.TrimSuffix(string(old), "\n"), "\n"), lines); len(added)+len(removed) > 0 {
			failed = true
			fmt.Printf("%s: the API differs from %s (update it with go run ./cmd/internal/apilist -w if the change is meant):\n", m.dir, path)
			for _, l := range removed {
				fmt.Println("  -", l)
			}
			for _, l := range added {
				fmt.Println("  +", l)
			}
		}
	}
	if failed {
		os.Exit(1)
	}
}

// diff returns the lines of b not in a, and of a not in b.
func diff(a, b []string) (added, removed []string) {
	for _, l := range b {
		if !slices.Contains(a, l) {
			added = append(added, l)
		}
	}
	for _, l := range a {
		if !slices.Contains(b, l) {
			removed = append(removed, l)
		}
	}
	return added, removed
}

// list returns the API of the module in dir, sorted.
func list(dir string) ([]string, error) {
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedTypes, Dir: dir}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, p := range pkgs {
		if len(p.Errors) > 0 {
			return nil, fmt.Errorf("%s: %v", p.PkgPath, p.Errors[0])
		}
		if p.Name == "main" || strings.Contains(p.PkgPath+"/", "/internal/") {
			continue
		}
		lines = append(lines, api(p.Types)...)
	}
	slices.Sort(lines)
	return slices.Compact(lines), nil
}

// api returns the lines of package p's exported API.
func api(p *types.Package) []string {
	qual := func(other *types.Package) string {
		if other == p {
			return ""
		}
		return other.Name()
	}
	str := func(t types.Type) string { return types.TypeString(t, qual) }
	prefix := "pkg " + p.Path() + ", "
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, prefix+fmt.Sprintf(format, args...)) }
	scope := p.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch obj := obj.(type) {
		case *types.Func:
			add("func %s%s", name, strings.TrimPrefix(types.TypeString(obj.Type(), qual), "func"))
		case *types.Const:
			add("const %s %s", name, str(obj.Type()))
		case *types.Var:
			add("var %s %s", name, str(obj.Type()))
		case *types.TypeName:
			if obj.IsAlias() {
				add("type %s = %s", name, str(obj.Type()))
				continue
			}
			typeLines(add, name, obj.Type().(*types.Named), str)
		}
	}
	return lines
}

// typeLines adds the lines of the named type t: its kind, its exported
// fields or interface methods, and its exported methods.
func typeLines(add func(string, ...any), name string, t *types.Named, str func(types.Type) string) {
	switch u := t.Underlying().(type) {
	case *types.Struct:
		add("type %s struct", name)
		for i := range u.NumFields() {
			f := u.Field(i)
			switch {
			case f.Embedded() && f.Exported():
				add("type %s struct, embedded %s", name, str(f.Type()))
			case f.Exported():
				add("type %s struct, %s %s", name, f.Name(), str(f.Type()))
			}
		}
	case *types.Interface:
		add("type %s interface, unexported methods %t", name, hasUnexported(u))
		for i := range u.NumMethods() {
			if m := u.Method(i); m.Exported() {
				add("type %s interface, %s%s", name, m.Name(), strings.TrimPrefix(str(m.Type()), "func"))
			}
		}
	default:
		add("type %s %s", name, str(u))
	}
	for i := range t.NumMethods() {
		m := t.Method(i)
		if !m.Exported() {
			continue
		}
		sig := m.Type().(*types.Signature)
		recv := name
		if _, ptr := sig.Recv().Type().(*types.Pointer); ptr {
			recv = "*" + name
		}
		add("method (%s) %s%s", recv, m.Name(), strings.TrimPrefix(str(sig), "func"))
	}
}

func hasUnexported(u *types.Interface) bool {
	for i := range u.NumMethods() {
		if !u.Method(i).Exported() {
			return true
		}
	}
	return false
}
