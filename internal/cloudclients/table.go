package cloudclients

import (
	"compress/flate"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/platformkit/grpcbackoff/internal/googledata"
)

// The table is what googleapis' gRPC service configs say each generated Go
// client retries: the generator of the Go clients (gapic-generator-go)
// writes a method's default CallOptions from its config file's
// retryPolicy: retryableStatusCodes become gax.OnCodes, initialBackoff,
// maxBackoff and backoffMultiplier its gax.Backoff (maxAttempts is not
// carried over: gax retries until the call's timeout). internal/googledata's
// retries.txt holds it in words, one line per name of a file (generated);
// the binary carries it deflated (googledata.RetriesDeflated) and decodes
// it on the first lookup of a Google client's call.
//
// A name is resolved as the generator does, in each file on its own: an
// entry naming the method wins over one naming its whole service, whether
// or not it has a retryPolicy (an entry without one: the client retries
// nothing). A method a file does not name, in a service it does not name
// whole, gets nothing from that file. Every file that names a service
// gives the same answer for it (the generator of the table checks), except
// for the mixins, which each API's file configures for its own clients.

// retryPolicy is what a generated client retries for a method: the codes,
// bit 1<<code, and gax's backoff. Its pause before a retry is a uniform draw
// in (0, cur], cur growing from initial by multiplier up to max: max is the
// longest pause.
type retryPolicy struct {
	codes      uint32
	initial    time.Duration
	max        time.Duration
	multiplier float64
}

// tableRow is one name of one file: a method, or a whole service (method
// "").
type tableRow struct {
	service string // "google.cloud.tasks.v2.CloudTasks"
	method  string // "GetQueue"; "" for the whole service
	file    uint16 // index in table.files
	policy  uint16 // index in table.policies; 0: no retryPolicy
}

// table is retries.txt, decoded.
type table struct {
	commit   string         // the googleapis commit of the files
	files    []string       // paths, as in googleapis: "google/cloud/tasks/v2/cloudtasks_grpc_service_config.json"
	policies []retryPolicy  // policies[0] is the zero policy: no retry
	rows     []tableRow     // sorted by service, method, file
	err      error          // the text did not decode (a defect of the generator)
	services map[string]int // service -> index of its first row
}

var (
	tableOnce sync.Once
	theTable  table
)

// loadTable returns the table, decoding it on the first call.
func loadTable() *table {
	tableOnce.Do(func() {
		text, err := inflate(googledata.RetriesDeflated)
		if err == nil {
			err = theTable.parse(text)
		}
		if err != nil {
			theTable = table{err: err}
		}
	})
	return &theTable
}

// inflate returns the text that data deflates.
func inflate(data string) (string, error) {
	b, err := io.ReadAll(flate.NewReader(strings.NewReader(data)))
	return string(b), err
}

// parse decodes text, in retries.txt's format, into t.
func (t *table) parse(text string) error {
	t.policies = []retryPolicy{{}}
	index := map[retryPolicy]uint16{{}: 0}
	service := ""
	n := 0
	for line := range strings.Lines(text) {
		line = strings.TrimSuffix(line, "\n")
		n++
		bad := func(why string) error {
			return fmt.Errorf("cloudclients: retries.txt:%d: %s: %q", n, why, line)
		}
		switch {
		case line == "":
		case strings.HasPrefix(line, "# commit "):
			t.commit = strings.TrimPrefix(line, "# commit ")
		case line[0] == '#':
		case line[0] != '\t':
			if len(t.files) == 1<<16-1 {
				return bad("too many files")
			}
			t.files = append(t.files, line)
			service = ""
		case !strings.HasPrefix(line, "\t\t"):
			service = line[1:]
			if len(t.files) == 0 || service == "" {
				return bad("a service outside a file")
			}
		default:
			name, rest, _ := strings.Cut(line[2:], " ")
			if q, err := strconv.QuotedPrefix(line[2:]); err == nil {
				name, _ = strconv.Unquote(q)
				rest = strings.TrimPrefix(line[2+len(q):], " ")
			}
			if service == "" || name == "" {
				return bad("a method outside a service")
			}
			if name == "*" {
				name = ""
			}
			p, err := parsePolicy(rest)
			if err != nil {
				return bad(err.Error())
			}
			i, ok := index[p]
			if !ok {
				i = uint16(len(t.policies))
				index[p] = i
				t.policies = append(t.policies, p)
			}
			t.rows = append(t.rows, tableRow{service: service, method: name, file: uint16(len(t.files) - 1), policy: i})
		}
	}
	slices.SortFunc(t.rows, func(a, b tableRow) int {
		if c := strings.Compare(a.service, b.service); c != 0 {
			return c
		}
		if c := strings.Compare(a.method, b.method); c != 0 {
			return c
		}
		return int(a.file) - int(b.file)
	})
	t.services = make(map[string]int)
	for i := len(t.rows) - 1; i >= 0; i-- {
		t.services[t.rows[i].service] = i
	}
	return nil
}

// parsePolicy parses "none", or "CODE,CODE initial max multiplier".
func parsePolicy(s string) (retryPolicy, error) {
	if s == "none" {
		return retryPolicy{}, nil
	}
	f := strings.Fields(s)
	if len(f) != 4 {
		return retryPolicy{}, fmt.Errorf("want none, or codes, initial, max and multiplier")
	}
	var p retryPolicy
	for c := range strings.SplitSeq(f[0], ",") {
		code, ok := codeOf(c)
		if !ok {
			return p, fmt.Errorf("unknown code %s", c)
		}
		p.codes |= 1 << code
	}
	var err1, err2, err3 error
	p.initial, err1 = time.ParseDuration(f[1])
	p.max, err2 = time.ParseDuration(f[2])
	p.multiplier, err3 = strconv.ParseFloat(f[3], 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return p, fmt.Errorf("bad backoff %s %s %s", f[1], f[2], f[3])
	}
	return p, nil
}

// codeNames are the names of the codes in the service configs, by code.
var codeNames = [...]string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
	"UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}

func codeOf(name string) (uint32, bool) {
	i := slices.Index(codeNames[:], name)
	return uint32(i), i > 0
}

// CodeNames returns the names of the codes of mask, bit 1<<code, as the
// service configs write them, in the order of the codes.
func CodeNames(mask uint32) []string {
	var out []string
	for c, name := range codeNames {
		if mask&(1<<c) != 0 {
			out = append(out, name)
		}
	}
	return out
}

// resolved is what the files say of one method.
type resolved struct {
	known   bool   // a file names the method, or its whole service
	whole   bool   // by an entry naming the whole service
	codes   uint32 // what the client retries (the union over the files, which agree but for mixins)
	pause   time.Duration
	file    uint16 // the first file that names it
	service bool   // a file names the service, if not this method
}

// resolve returns what the files, those for which in returns true (nil: all),
// say of method name of service.
func (t *table) resolve(service, name string, in func(file uint16) bool) resolved {
	var r resolved
	lo, ok := t.services[service]
	if !ok {
		return r
	}
	hi := lo
	for hi < len(t.rows) && t.rows[hi].service == service {
		hi++
	}
	rows := t.rows[lo:hi]
	// The whole-service rows sort first (method ""), then the methods.
	whole := 0
	for whole < len(rows) && rows[whole].method == "" {
		whole++
	}
	m, found := slices.BinarySearchFunc(rows[whole:], name, func(row tableRow, name string) int { return strings.Compare(row.method, name) })
	m += whole
	add := func(row tableRow, isWhole bool) {
		p := t.policies[row.policy]
		if !r.known {
			r.file, r.whole = row.file, isWhole
		}
		r.known = true
		r.codes |= p.codes
		if p.codes != 0 {
			r.pause = max(r.pause, p.max)
		}
	}
	for i := m; found && i < len(rows) && rows[i].method == name; i++ {
		if in == nil || in(rows[i].file) {
			add(rows[i], false)
		}
	}
	for _, row := range rows[:whole] {
		if (in == nil || in(row.file)) && !t.names(rows[m:], name, row.file) {
			add(row, true)
		}
	}
	for _, row := range rows {
		if in == nil || in(row.file) {
			r.service = true
			break
		}
	}
	return r
}

// names reports whether rows, from the first row of name on, name it in
// file.
func (t *table) names(rows []tableRow, name string, file uint16) bool {
	for _, row := range rows {
		if row.method != name {
			return false
		}
		if row.file == file {
			return true
		}
	}
	return false
}

// filesOf calls yield with each file that names service, or, if none does,
// each file in the folder of its proto package (google.cloud.alloydb.v1:
// google/cloud/alloydb/v1/), from which its client was generated too.
func (t *table) filesOf(service string, yield func(file uint16)) {
	if lo, ok := t.services[service]; ok {
		for i := lo; i < len(t.rows) && t.rows[i].service == service; i++ {
			yield(t.rows[i].file)
		}
		return
	}
	i := strings.LastIndexByte(service, '.')
	if i < 0 {
		return
	}
	pkg := service[:i]
	for f, path := range t.files {
		if len(path) > len(pkg)+1 && path[len(pkg)] == '/' && !strings.Contains(path[len(pkg)+1:], "/") && samePath(path[:len(pkg)], pkg) {
			yield(uint16(f))
		}
	}
}

// samePath reports whether path is pkg with its dots as slashes.
func samePath(path, pkg string) bool {
	for i := range len(pkg) {
		if c := pkg[i]; path[i] != c && !(c == '.' && path[i] == '/') {
			return false
		}
	}
	return true
}

// longestPause returns the longest maxBackoff of the retry policies of
// service's entries, or of every entry for service "".
func (t *table) longestPause(service string) time.Duration {
	var d time.Duration
	if service == "" {
		for _, p := range t.policies {
			if p.codes != 0 {
				d = max(d, p.max)
			}
		}
		return d
	}
	lo, ok := t.services[service]
	for i := lo; ok && i < len(t.rows) && t.rows[i].service == service; i++ {
		if p := t.policies[t.rows[i].policy]; p.codes != 0 {
			d = max(d, p.max)
		}
	}
	return d
}

// cite names file i of t and the commit.
func (t *table) cite(i int) string {
	if i < 0 || i >= len(t.files) {
		return "no file"
	}
	c := t.commit
	if len(c) > 12 {
		c = c[:12]
	}
	return "googleapis " + t.files[i] + " at " + c
}
