package cloudclients

import (
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// rule is who retries what for the calls of one method made by one kind of
// client: the codes left to the client, which the library gives one
// attempt, and so retries every other code of its Policy itself.
type rule struct {
	client  bool          // the header is a Google client's: it has a gapic/ or gccl/ token
	codes   uint32        // codes left to the client (it retries them, or refuses them on purpose): bit 1<<code
	hinted  uint32        // codes the client retries only when the error carries RetryInfo
	opening bool          // a stream whose client retry covers only its opening
	once    uint32        // codes left to the client too on a subscription with exactly-once delivery (pubsub.go)
	known   bool          // the data knows what the client retries for the method
	pause   time.Duration // the longest pause of the client's retry between two attempts of one call
	kind    kind          // where the rule comes from
	hand    *handEntry    // the hand-written client's entry, for kind fromHand
	file    int           // the table's file, for kinds fromTable, fromWhole and fromMixin; -1: none
	over    *override     // the override, for kind fromOverride
}

// kind is where a rule comes from.
type kind uint8

const (
	notClient      kind = iota // no gapic/ or gccl/ token: not a Google client's call
	fromTable                  // the table: an entry naming the method
	fromWhole                  // the table: an entry naming the method's whole service
	fromMixin                  // a mixin: the calling API's files (none names it: the client retries nothing)
	fromLRO                    // the LRO client's own (op.Wait's polling): google/longrunning's file
	fromHand                   // a hand-written client's loop (handwritten.go)
	fromHandAll                // a hand-written client that makes every call of its service through its loop
	fromOverride               // a pinned client that differs from its file (overrides.go)
	unknownMixin               // a mixin whose calling API is not known
	unknownMethod              // a method of a service the table knows, but not the method
	unknownService             // a service the table does not know
)

// Mixin services: the generated clients of many APIs expose their methods,
// each API's client configured by its own API's file (which most leave
// out: the client then retries nothing).
const (
	operations = "google.longrunning.Operations"
	locations  = "google.cloud.location.Locations"
	iamPolicy  = "google.iam.v1.IAMPolicy"
)

func isMixin(service string) bool {
	return service == operations || service == locations || service == iamPolicy
}

// lroFile is the folder of the file of the LRO client
// (cloud.google.com/go/longrunning/autogen), by which op.Wait polls.
const lroFile = "google/longrunning/"

// lroVersions are the versions of cloud.google.com/go/longrunning, whose
// OperationsClient sends its version as its gapic/ token: a GetOperation
// at one of them is op.Wait's polling, not a service client's own mixin
// (the module's versions as the Go module proxy listed them on 2026-11-27).
var lroVersions = [...]string{"0.1.1", "0.3.0", "0.4.0", "0.4.1", "0.4.2", "0.5.0", "0.5.1", "0.5.2", "0.5.3",
	"0.5.4", "0.5.5", "0.5.6", "0.5.7", "0.5.9", "0.5.10", "0.5.11", "0.5.12", "0.6.0", "0.6.1", "0.6.2", "0.6.3",
	"0.6.4", "0.6.5", "0.6.6", "0.6.7", "0.7.0", "0.8.0", "0.9.0", "0.10.0", "0.11.0", "0.12.0", "0.13.0",
	"1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0", "1.4.1", "1.5.0"}

// handPause bounds the pauses of the hand-written clients' loops: Pub/Sub's
// 64 s (service.go), Firestore's watch stream 60 s, Spanner's 32 s, Storage's
// gax default 30 s, Bigtable's 2 s.
const handPause = 64 * time.Second

// call is what a lookup knows of one call.
type call struct {
	method   string // "/pkg.Service/Method"
	header   string // its x-goog-api-client value
	stream   bool   // a stream
	api      string // the service of the first call of another service than a mixin on its connection; "": none yet
	apiGapic string // that call's gapic/ version; "": not known
}

// splitMethod returns the service and the name of method,
// "/pkg.Service/Method".
func splitMethod(method string) (service, name string) {
	i := strings.LastIndexByte(method, '/')
	if i < 0 {
		return "", method
	}
	return strings.TrimPrefix(method[:i], "/"), method[i+1:]
}

// clientTokens returns the version of the gapic/ token of an
// x-goog-api-client value, whether it has one, and whether it has a gccl/
// token: only Google's clients send them. A token is a space-separated
// name/version pair; gccl-attempt-count/1 and the like are not gccl/.
func clientTokens(header string) (gapic string, hasGapic, hasGccl bool) {
	for header != "" {
		tok := header
		if i := strings.IndexByte(header, ' '); i >= 0 {
			tok, header = header[:i], header[i+1:]
		} else {
			header = ""
		}
		if v, ok := strings.CutPrefix(tok, "gapic/"); ok && !hasGapic {
			gapic, hasGapic = v, true
		} else if strings.HasPrefix(tok, "gccl/") {
			hasGccl = true
		}
	}
	return gapic, hasGapic, hasGccl
}

// lookup returns the rule of call c. A header without a gapic/ or gccl/
// token is not a Google client's (the zero rule). With a gccl/ token, a
// hand-written client's entry for the method wins, and for Bigtable's and
// Storage's data APIs, whose hand-written clients make every call through
// their own loop, so do the codes of their service's entries. Then a pinned
// client's override at its gapic/ version; then, for a mixin, the file of
// the API whose client calls it (see mixinRule); then the table. A method
// the table does not know gets no code left to its client: the library
// retries every code of its Policy (RESOURCE_EXHAUSTED, the recipe's 429,
// is never left to nobody; UNAVAILABLE may then have two layers, which the
// memory of a client's call bounds: see the interceptor package). It
// allocates nothing once the table is decoded.
func lookup(c call) rule {
	gapic, hasGapic, hasGccl := clientTokens(c.header)
	if !hasGapic && !hasGccl {
		return rule{file: -1}
	}
	service, name := splitMethod(c.method)
	if hasGccl {
		if i := handIndex(c.method); i >= 0 {
			return handRule(&handEntries[i])
		}
		if slices.Contains(handAll[:], service) {
			r := rule{client: true, known: true, kind: fromHandAll, file: -1, pause: handPause}
			for i := range handEntries {
				if h := &handEntries[i]; strings.HasPrefix(h.method, "/"+service+"/") {
					r.codes |= h.codes
					r.hinted |= h.hinted
				}
			}
			return r
		}
	}
	if o := overrideFor(c.method, gapic); o != nil {
		return rule{client: true, known: true, codes: o.codes, opening: c.stream && o.codes != 0, pause: o.pause,
			kind: fromOverride, over: o, file: -1}
	}
	t := loadTable()
	if isMixin(service) {
		return mixinRule(t, c, service, name, gapic)
	}
	if h := hidden.Load(); h != nil && slices.Contains(*h, c.method) {
		return rule{client: true, kind: unknownMethod, pause: t.longestPause(service), file: -1}
	}
	r := t.resolve(service, name, nil)
	switch {
	case r.known:
		k := fromTable
		if r.whole {
			k = fromWhole
		}
		return rule{client: true, known: true, codes: r.codes, opening: c.stream && r.codes != 0, pause: r.pause,
			kind: k, file: int(r.file)}
	case r.service:
		return rule{client: true, kind: unknownMethod, pause: t.longestPause(service), file: int(r.file)}
	}
	return rule{client: true, kind: unknownService, pause: t.longestPause(""), file: -1}
}

// mixinRule returns the rule of call c of a mixin's method: what the file
// of the API whose client makes it says. A GetOperation (any method of
// google.longrunning.Operations) at a gapic/ version of the LRO client, or
// at another than the API's calls on the same connection, is the LRO
// client's (op.Wait's polling, an Operation's Cancel or Delete), whose own
// file configures it. Otherwise the API is the one whose calls the
// connection carried first: its files' entries for the mixin, or, when
// they have none, nothing retried by the client (as the client generator
// does). An API not known yet leaves nothing to the client.
func mixinRule(t *table, c call, service, name, gapic string) rule {
	if service == operations && (slices.Contains(lroVersions[:], gapic) || c.apiGapic != "" && gapic != c.apiGapic) {
		r := t.resolve(service, name, func(f uint16) bool { return strings.HasPrefix(t.files[f], lroFile) })
		return rule{client: true, known: r.known, codes: r.codes, opening: c.stream && r.codes != 0, pause: r.pause,
			kind: fromLRO, file: int(r.file)}
	}
	if c.api == "" {
		return rule{client: true, kind: unknownMixin, pause: t.longestPause(""), file: -1}
	}
	var files [8]uint16
	n := 0
	t.filesOf(c.api, func(f uint16) {
		if n < len(files) && !slices.Contains(files[:n], f) {
			files[n], n = f, n+1
		}
	})
	if n == 0 {
		return rule{client: true, kind: unknownMixin, pause: t.longestPause(""), file: -1}
	}
	r := t.resolve(service, name, func(f uint16) bool { return slices.Contains(files[:n], f) })
	file := int(files[0])
	if r.known {
		file = int(r.file)
	}
	return rule{client: true, known: true, codes: r.codes, opening: c.stream && r.codes != 0, pause: r.pause,
		kind: fromMixin, file: file}
}

func handRule(h *handEntry) rule {
	return rule{client: true, known: true, codes: h.codes, hinted: h.hinted, opening: h.opening,
		once: h.exactlyOnce, kind: fromHand, hand: h, pause: handPause, file: -1}
}

// handAll are the services whose hand-written clients make every call
// through their own loop, the generated retry off: Bigtable's data API
// (no generated client) and Storage's (gax.WithRetry(nil), grpc_client.go).
var handAll = [...]string{"google.bigtable.v2.Bigtable", "google.storage.v2.Storage"}

// handIndex returns the index of method's entry in handEntries, or -1.
func handIndex(method string) int {
	if i, found := slices.BinarySearchFunc(handEntries[:], method, func(h handEntry, m string) int { return strings.Compare(h.method, m) }); found {
		return i
	}
	return -1
}

// hidden are methods the table is made not to know (HideForTest).
var hidden atomic.Pointer[[]string]

// HideForTest makes the table not know methods, as if their clients were
// newer than its files, until restore is called: for the tests of the
// googleclients module that measure what the library does with such
// clients. Not for concurrent use with itself.
func HideForTest(methods []string) (restore func()) {
	m := slices.Clone(methods)
	hidden.Store(&m)
	return func() { hidden.Store(nil) }
}
