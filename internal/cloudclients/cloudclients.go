// Package cloudclients knows what the Google Cloud Go clients retry by
// themselves, method by method and code by code, so that the interceptors
// retry the other codes and never a code a client retries: one retry layer
// per method and code, never two, never none.
//
// A call is a Google Cloud client's when its x-goog-api-client metadata
// carries a gapic/ token (generated clients) or a gccl/ token (hand-written
// ones). What a generated client retries comes from the googleapis gRPC
// service config its default CallOptions were generated from (table.go
// decodes internal/googledata's retries.txt), what a hand-written retry
// loop does from its code (handwritten.go), and where a pinned client
// differs from its file, from the override that says why (overrides.go).
//
// Above the data, the rule the engine follows for a call (client.go: Learn,
// at a call's first failure, and Leaves, for each failure), and its Memory
// of a client's call across the client's own attempts (memory.go). In the
// engine's layers it sits just above internal/attempt and
// internal/googledata (the generated data): it knows no call, only what a
// call's context, options and request tell.
package cloudclients

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/platformkit/grpcbackoff/internal/googledata"
)

// Header is the metadata key by which the Google Cloud clients name
// themselves.
const Header = "x-goog-api-client"

// HandedOver is the call option by which gaxretry.Adopt marks a call whose
// client handed its retries over to the interceptors: they retry every code
// of their Policy. gRPC ignores it. Adopt makes one for each call: Retries,
// if not nil, reports whether the gax Retryer of the call retries err when
// it is not Adopt's own (a per-call gax.WithRetry replaced it), false when
// it is; the interceptors leave such an error to it.
type HandedOver struct {
	grpc.EmptyCallOption
	Retries func(err error) bool
}

// ClientRetry is the call option by which gaxretry.CallOption marks the
// calls its gax Retryer retries: the client retries Codes (bit 1<<code),
// pausing at most MaxPause between attempts. gRPC ignores it.
type ClientRetry struct {
	grpc.EmptyCallOption
	Codes    uint32
	MaxPause time.Duration
}

// Call is what a lookup knows of one call.
type Call struct {
	Method string // "/pkg.Service/Method"
	Header string // its x-goog-api-client value
	Stream bool   // the call is a stream
	// API is the service of the first call on the call's connection that
	// was not a mixin's (the API its client serves), "" if none yet; APIGapic
	// is that call's gapic/ version, "" if not known.
	API, APIGapic string
}

// API is what the calls on one ClientConn tell of the Google API its
// client serves: the service of its first call that was not a mixin's, and
// that call's gapic/ version. A mixin's call (GetOperation, ListLocations,
// GetIamPolicy) gets what that API's file says.
type API struct {
	Service string
	Gapic   string
}

// Rule is who retries what for one call.
type Rule struct {
	// Google says the call is a Google Cloud client's: its
	// x-goog-api-client has a gapic/ or gccl/ token.
	Google bool
	// Codes are the codes left to the client, bit 1<<code: it retries them,
	// or refuses them on purpose.
	Codes uint32
	// Hinted are the codes the client retries only when the error carries
	// RetryInfo: such an error is left to it too.
	Hinted uint32
	// Opening says the client's retry of a stream covers only its opening.
	Opening bool
	// ExactlyOnce are codes left to the client too, bit 1<<code, when the
	// call's request is for a Pub/Sub subscription with exactly-once
	// delivery (see ExactlyOnce).
	ExactlyOnce uint32
	// Known says the data knows what the client retries for the method.
	Known bool
	// Pause is the longest pause of the client's retry between two attempts
	// of one call (its gax.Backoff's Max: gax draws each pause in (0, cur]).
	Pause time.Duration
	// Source says where the rule comes from; Lookup leaves it empty, Explain
	// fills it.
	Source string
}

func (r rule) export() Rule {
	return Rule{Google: r.client, Codes: r.codes, Hinted: r.hinted, Opening: r.opening, ExactlyOnce: r.once,
		Known: r.known, Pause: r.pause}
}

// Lookup returns the rule of call c (see lookup). It allocates nothing,
// but for decoding the table on its first call.
func Lookup(c Call) Rule {
	return lookup(call{method: c.Method, header: c.Header, stream: c.Stream, api: c.API, apiGapic: c.APIGapic}).export()
}

// IsMixin reports whether method is a method of a mixin
// (google.longrunning.Operations, google.cloud.location.Locations,
// google.iam.v1.IAMPolicy), which the clients of many APIs call.
func IsMixin(method string) bool {
	service, _ := splitMethod(method)
	return isMixin(service)
}

// Explain returns what the calls of method get from each kind of Google
// Cloud client that may make them, with their Source: the generated client
// (for a mixin, the LRO client's polling and a service client's own call),
// a pinned client whose CallOptions differ from its file, the hand-written
// client; or, for a method the data does not know, what the library does.
// stream says the method is a stream.
func Explain(method string, stream bool) []Rule {
	t := loadTable()
	service, name := splitMethod(method)
	var out []Rule
	add := func(r rule, source string) {
		x := r.export()
		x.Source = source
		out = append(out, x)
	}
	if isMixin(service) {
		if service == operations {
			r := lookup(call{method: method, header: "gapic/" + lroVersions[len(lroVersions)-1], stream: stream})
			add(r, "the LRO client's CallOptions (op.Wait's polling; cloud.google.com/go/longrunning), from "+t.cite(r.file))
		}
		naming := 0
		for i, row := range t.rows {
			if row.service == service && (row.method == "" || row.method == name) && (i == 0 || t.rows[i-1].file != row.file || t.rows[i-1].service != service) {
				naming++
			}
		}
		add(rule{client: true}, fmt.Sprintf("a service client's own call: what the file of its API (the service its connection's first call named) says, "+
			"%d of %d files configuring it for their APIs, the others leaving it unretried; while its API is not known, nothing left to the client", naming, len(t.files)))
	} else {
		r := lookup(call{method: method, header: "gapic/0.0.0", stream: stream})
		switch r.kind {
		case fromTable:
			add(r, "the generated client's CallOptions, from "+t.cite(r.file))
		case fromWhole:
			add(r, "the generated client's CallOptions, from the entry for the whole service "+service+" in "+t.cite(r.file))
		case unknownMethod:
			add(r, "unknown method of "+service+" (a client newer than "+t.cite(r.file)+"): nothing left to its client, every code retried here")
		default:
			add(r, "unknown service: no googleapis file names it: nothing left to its client, every code retried here")
		}
	}
	for i := range overrides {
		if o := &overrides[i]; o.method == method {
			add(rule{client: true, known: true, codes: o.codes, opening: stream && o.codes != 0, pause: o.pause}, o.why)
		}
	}
	if i := handIndex(method); i >= 0 {
		add(handRule(&handEntries[i]), handEntries[i].source)
	} else if slices.Contains(handAll[:], service) {
		r := lookup(call{method: method, header: "gccl/0.0.0", stream: stream})
		add(r, "the hand-written client of "+service+", which makes every call through its own loop (handwritten.go)")
	}
	return out
}

// Methods returns the methods the data knows of service
// ("google.pubsub.v1.Publisher"), sorted, whatever the binary links: those
// its files name, the hand-written clients' and the pinned clients'. whole
// says a file names the whole service: its other methods get that entry.
func Methods(service string) (methods []string, whole bool) {
	t := loadTable()
	prefix := "/" + service + "/"
	if lo, ok := t.services[service]; ok {
		for i := lo; i < len(t.rows) && t.rows[i].service == service; i++ {
			if t.rows[i].method == "" {
				whole = true
			} else {
				methods = append(methods, prefix+t.rows[i].method)
			}
		}
	}
	for _, h := range handEntries {
		if strings.HasPrefix(h.method, prefix) {
			methods = append(methods, h.method)
		}
	}
	for _, m := range googledata.PinnedMethods {
		if strings.HasPrefix(m.Method, prefix) {
			methods = append(methods, m.Method)
		}
	}
	slices.Sort(methods)
	return slices.Compact(methods), whole
}

// KnownService reports whether a googleapis file names service.
func KnownService(service string) bool {
	_, ok := loadTable().services[service]
	return ok
}

// HandMethods returns the methods of the hand-written clients' statements
// (handwritten.go), sorted.
func HandMethods() []string {
	out := make([]string, len(handEntries))
	for i, h := range handEntries {
		out[i] = h.method
	}
	return out
}

// Safety returns what the descriptor of method, a method of a pinned
// client or of a hand-written client's statement, tells of its safety, as
// the interceptor package reads it (1 idempotent, 2 not idempotent, 0
// unknown) and why, and whether it is a stream, for a binary that does not
// link the method's generated package; ok is false for a method the data
// does not know.
func Safety(method string) (safety int8, source string, stream, ok bool) {
	m, ok := googledata.Pinned(method)
	return int8(m.Safety), m.Why, m.Stream, ok
}

// TableSource returns the googleapis commit of the table and its number of
// files, or the error that kept it from decoding (a defect of the
// generator).
func TableSource() (commit string, files int, err error) {
	t := loadTable()
	return t.commit, len(t.files), t.err
}
