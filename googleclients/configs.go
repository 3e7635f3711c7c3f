package googleclients

import (
	"bytes"
	"cmp"
	"compress/flate"
	"context"
	"encoding/json"
	"fmt"
	"go/format"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	gc "github.com/platformkit/grpcbackoff/internal/cloudclients"
)

// ConfigsEnv is the environment variable that names the folder of
// googleapis' gRPC service configs (every *_grpc_service_config.json of a
// googleapis commit at its path, and a SOURCE file naming the commit).
const ConfigsEnv = "GOOGLEAPIS_SERVICE_CONFIGS"

// DefaultConfigs is the folder of the service configs when ConfigsEnv is not
// set, from the repository's root.
const DefaultConfigs = "../shared/data/googleapis-service-configs"

// ConfigsDir returns the folder of the service configs: $ConfigsEnv, or
// DefaultConfigs from root, the repository's root.
func ConfigsDir(root string) string {
	if d := os.Getenv(ConfigsEnv); d != "" {
		return d
	}
	return filepath.Join(root, DefaultConfigs)
}

// ServiceConfigs is what the gRPC service configs of one googleapis commit
// say each generated client retries.
type ServiceConfigs struct {
	Source string // the SOURCE file's source line: "https://github.com/googleapis/googleapis"
	Commit string // the googleapis commit
	Files  []ConfigFile
}

// Counts are what the configs name. A file names a method or a service
// once (a name it repeats, as three files repeat one, counts once); names
// of one method or service in several files (the mixins'
// google.longrunning.Operations names, in 10 to 13 files each) count once
// in the distinct counts.
type Counts struct {
	Files         int
	MethodNames   int // names of a method, by file
	Methods       int // distinct service/method pairs
	WholeNames    int // names of a whole service, by file
	WholeServices int // distinct services named whole
}

// Count returns what sc names.
func (sc *ServiceConfigs) Count() Counts {
	c := Counts{Files: len(sc.Files)}
	methods, whole := map[[2]string]bool{}, map[string]bool{}
	for _, f := range sc.Files {
		for _, n := range f.Names {
			if n.Method == "" {
				c.WholeNames++
				whole[n.Service] = true
			} else {
				c.MethodNames++
				methods[[2]string{n.Service, n.Method}] = true
			}
		}
	}
	c.Methods, c.WholeServices = len(methods), len(whole)
	return c
}

// ConfigFile is one *_grpc_service_config.json.
type ConfigFile struct {
	Path  string // from googleapis' root: "google/cloud/tasks/v2/cloudtasks_grpc_service_config.json"
	Names []ConfigName
}

// ConfigName is one name of a file's methodConfig entries, with its
// entry's retryPolicy.
type ConfigName struct {
	Service string // "google.cloud.tasks.v2.CloudTasks"
	Method  string // "GetQueue"; "" for the whole service
	Retry   *RetryPolicy
}

// RetryPolicy is what a generated Go client takes of a retryPolicy.
type RetryPolicy struct {
	Codes      uint32 // bit 1<<code
	Initial    time.Duration
	Max        time.Duration
	Multiplier float64
}

// jsonConfig is the part of a gRPC service config the table reads.
type jsonConfig struct {
	MethodConfig []struct {
		Name []struct {
			Service string `json:"service"`
			Method  string `json:"method"`
		} `json:"name"`
		RetryPolicy *struct {
			InitialBackoff       string   `json:"initialBackoff"`
			MaxBackoff           string   `json:"maxBackoff"`
			BackoffMultiplier    float64  `json:"backoffMultiplier"`
			RetryableStatusCodes []string `json:"retryableStatusCodes"`
		} `json:"retryPolicy"`
	} `json:"methodConfig"`
}

// ReadServiceConfigs reads every *_grpc_service_config.json under dir, and
// its SOURCE file. It fails with an error naming the folder and ConfigsEnv
// when dir does not exist, and naming the file and the field for a file it
// cannot read, or whose names disagree with each other.
func ReadServiceConfigs(dir string) (*ServiceConfigs, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("googleclients: googleapis' gRPC service configs: %w (set %s to the folder of a googleapis checkout's *_grpc_service_config.json, or place them at %s from the repository's root)", err, ConfigsEnv, DefaultConfigs)
	}
	sc := &ServiceConfigs{}
	src, err := os.ReadFile(filepath.Join(dir, "SOURCE"))
	if err != nil {
		return nil, fmt.Errorf("googleclients: %w: the SOURCE file names the googleapis commit of the configs", err)
	}
	for line := range strings.Lines(string(src)) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ": ")
		switch k {
		case "source":
			sc.Source = v
		case "commit":
			sc.Commit, _, _ = strings.Cut(v, " ")
		}
	}
	if sc.Commit == "" || sc.Source == "" {
		return nil, fmt.Errorf("googleclients: %s: no source: and commit: lines", filepath.Join(dir, "SOURCE"))
	}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_grpc_service_config.json") {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		f, err := readConfig(path, filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		sc.Files = append(sc.Files, f)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(sc.Files) == 0 {
		return nil, fmt.Errorf("googleclients: no *_grpc_service_config.json under %s", dir)
	}
	slices.SortFunc(sc.Files, func(a, b ConfigFile) int { return strings.Compare(a.Path, b.Path) })
	return sc, nil
}

// readConfig reads one file: its names sorted, one per name. A name given
// twice must have the same retryPolicy both times (it has in every file
// so far): which one the client generator keeps is not known.
func readConfig(path, rel string) (ConfigFile, error) {
	f := ConfigFile{Path: rel}
	b, err := os.ReadFile(path)
	if err != nil {
		return f, err
	}
	var jc jsonConfig
	if err := json.Unmarshal(b, &jc); err != nil {
		return f, fmt.Errorf("googleclients: %s: %w", rel, err)
	}
	for i, mc := range jc.MethodConfig {
		var p *RetryPolicy
		if rp := mc.RetryPolicy; rp != nil {
			p = &RetryPolicy{Multiplier: rp.BackoffMultiplier}
			for _, c := range rp.RetryableStatusCodes {
				code, ok := codeByName(c)
				if !ok {
					return f, fmt.Errorf("googleclients: %s: methodConfig[%d].retryPolicy.retryableStatusCodes: unknown code %q", rel, i, c)
				}
				p.Codes |= 1 << code
			}
			if p.Initial, err = protoDuration(rp.InitialBackoff); err != nil {
				return f, fmt.Errorf("googleclients: %s: methodConfig[%d].retryPolicy.initialBackoff: %w", rel, i, err)
			}
			if p.Max, err = protoDuration(rp.MaxBackoff); err != nil {
				return f, fmt.Errorf("googleclients: %s: methodConfig[%d].retryPolicy.maxBackoff: %w", rel, i, err)
			}
		}
		for j, n := range mc.Name {
			if n.Service == "" {
				return f, fmt.Errorf("googleclients: %s: methodConfig[%d].name[%d]: no service", rel, i, j)
			}
			f.Names = append(f.Names, ConfigName{Service: n.Service, Method: n.Method, Retry: p})
		}
	}
	slices.SortStableFunc(f.Names, func(a, b ConfigName) int {
		return cmp.Or(strings.Compare(a.Service, b.Service), strings.Compare(a.Method, b.Method))
	})
	out := f.Names[:0]
	for _, n := range f.Names {
		if len(out) > 0 && out[len(out)-1].Service == n.Service && out[len(out)-1].Method == n.Method {
			if policyText(out[len(out)-1].Retry) != policyText(n.Retry) {
				return f, fmt.Errorf("googleclients: %s: %s/%s is named twice, with different retryPolicies", rel, n.Service, n.Method)
			}
			continue
		}
		out = append(out, n)
	}
	f.Names = out
	return f, nil
}

// protoDuration parses a google.protobuf.Duration in JSON: "0.100s".
func protoDuration(s string) (time.Duration, error) {
	v, ok := strings.CutSuffix(s, "s")
	f, err := strconv.ParseFloat(v, 64)
	if !ok || err != nil || f < 0 {
		return 0, fmt.Errorf("%q is not a duration in seconds", s)
	}
	return time.Duration(f * float64(time.Second)).Round(time.Millisecond), nil
}

// codeByName returns the code the service configs name name.
func codeByName(name string) (int, bool) {
	for c := range 17 {
		if n := gc.CodeNames(1 << c); len(n) == 1 && n[0] == name {
			return c, true
		}
	}
	return 0, false
}

// policyText writes p as retries.txt does: "none", or the codes, initial,
// max and multiplier.
func policyText(p *RetryPolicy) string {
	if p == nil || p.Codes == 0 {
		return "none"
	}
	return strings.Join(gc.CodeNames(p.Codes), ",") + " " + seconds(p.Initial) + " " + seconds(p.Max) + " " +
		strconv.FormatFloat(p.Multiplier, 'g', -1, 64)
}

// seconds writes d in seconds, as the service configs do: "0.1s", "60s".
func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
}

// nameText writes a method's name, quoted if it is not a plain word (a
// file may name " IngestEvents", which no method on the wire is).
func nameText(m string) string {
	if m == "" {
		return "*"
	}
	if strings.ContainsFunc(m, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '_')
	}) {
		return strconv.Quote(m)
	}
	return m
}

// TableFile and TableGoFile are the generated table, in words and deflated,
// from the repository's root.
const (
	TableFile   = "internal/googledata/retries.txt"
	TableGoFile = "internal/googledata/retries_gen.go"
)

// RenderTable writes sc as retries.txt: a header, then each file by path,
// in it each service, and in it each name, one line each.
func RenderTable(sc *ServiceConfigs) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `# Code generated by "go run ./googleclients/cmd/gaxdata -w"; DO NOT EDIT.
#
# What each generated Go client of cloud.google.com/go retries by itself, as
# gapic-generator-go writes its default CallOptions from googleapis' gRPC
# service configs: for each file, by path; in it each service; in it each
# name, a method or "*" (the whole service; a name that is no plain word is
# quoted, as the file spells it), and its entry's retryPolicy:
# the codes (gax.OnCodes), then gax.Backoff's Initial, Max and Multiplier;
# "none" for an entry without one (the client retries nothing). %d files.
# source %s
# commit %s
`, len(sc.Files), sc.Source, sc.Commit)
	for _, f := range sc.Files {
		b.WriteString(f.Path + "\n")
		service := ""
		for _, n := range f.Names {
			if n.Service != service {
				service = n.Service
				b.WriteString("\t" + service + "\n")
			}
			b.WriteString("\t\t" + nameText(n.Method) + " " + policyText(n.Retry) + "\n")
		}
	}
	return b.Bytes()
}

// RenderTableGo writes the Go source that carries text, retries.txt,
// deflated.
func RenderTableGo(sc *ServiceConfigs, text []byte) ([]byte, error) {
	var z bytes.Buffer
	w, err := flate.NewWriter(&z, flate.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(text); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `// Code generated by "go run ./googleclients/cmd/gaxdata -w"; DO NOT EDIT.

package googledata

// RetriesDeflated is retries.txt (%d bytes, %d lines), deflated: what the
// generated Go clients retry, from the %d gRPC service configs of
// googleapis at commit %s. Read retries.txt, not this.
const RetriesDeflated = "`, len(text), bytes.Count(text, []byte("\n")), len(sc.Files), sc.Commit)
	// Byte by byte, printable ASCII as it is, any other byte as \xNN, in
	// lines of about 100 characters.
	line := 0
	for _, c := range z.Bytes() {
		if line >= 100 {
			b.WriteString("\" +\n\t\"")
			line = 0
		}
		if c >= ' ' && c <= '~' && c != '"' && c != '\\' {
			b.WriteByte(c)
			line++
		} else {
			fmt.Fprintf(&b, "\\x%02x", c)
			line += 4
		}
	}
	b.WriteString("\"\n")
	return format.Source(b.Bytes())
}

// GeneratedFiles are the files GenerateFiles writes, from the repository's
// root.
var GeneratedFiles = []string{TableFile, TableGoFile, SafetyFile}

// GenerateFiles returns the contents of GeneratedFiles, by name: the table
// from the service configs (ConfigsDir(root)), and the safety of the
// pinned clients' methods, which it builds offline.
func GenerateFiles(ctx context.Context, root string) (map[string][]byte, error) {
	sc, err := ReadServiceConfigs(ConfigsDir(root))
	if err != nil {
		return nil, err
	}
	text := RenderTable(sc)
	goSrc, err := RenderTableGo(sc, text)
	if err != nil {
		return nil, err
	}
	stop, err := Offline()
	if err != nil {
		return nil, err
	}
	defer stop()
	d, err := Generate(ctx)
	if err != nil {
		return nil, err
	}
	safety, err := RenderSafety(d, "googledata")
	if err != nil {
		return nil, err
	}
	return map[string][]byte{TableFile: text, TableGoFile: goSrc, SafetyFile: safety}, nil
}
