// Package googleclients knows what the Google Cloud Go clients retry by
// themselves, method by method and code by code, so that the interceptors
// retry the other codes and never a code a client retries: one retry layer
// per method and code, never two, never none.
//
// A call is a Google Cloud client's when its x-goog-api-client metadata
// carries a gapic/ token (generated clients) or a gccl/ token (hand-written
// ones). What each client retries comes from the generated clients'
// default CallOptions, read from the pinned clients by a generator in the
// googleclients workspace module, and for the hand-written retry loops
// from their code (handwritten.go).
package googleclients

import (
	"slices"
	"strings"

	"google.golang.org/grpc"
)

// Header is the metadata key by which the Google Cloud clients name
// themselves.
const Header = "x-goog-api-client"

// HandedOver is the call option by which gaxretry.Adopt marks a call whose
// client handed its retries over to the interceptors: they retry every code
// of their Policy. gRPC ignores it.
type HandedOver struct{ grpc.EmptyCallOption }

// Rule is who retries what for the calls of one method by one kind of
// client.
type Rule struct {
	// Client says the call is a Google Cloud client's: its x-goog-api-client
	// has a gapic/ or gccl/ token.
	Client bool
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
	// Known says the method is in the data.
	Known bool
	// Source names the client and where its retries are stated.
	Source string
}

func (r rule) export() Rule {
	return Rule{Client: r.client, Codes: r.codes, Hinted: r.hinted, Opening: r.opening, ExactlyOnce: r.once, Known: r.known, Source: r.source}
}

// Lookup returns the rule of a call of method whose x-goog-api-client value
// is header (see lookup). It allocates nothing.
func Lookup(method, header string) Rule { return lookup(method, header).export() }

// Explain returns what the calls of method get from each kind of Google
// Cloud client that may make them (see explainRules), leaving out the calls
// of no Google client.
func Explain(method string) []Rule {
	var out []Rule
	for _, r := range explainRules(method) {
		if r.client {
			out = append(out, r.export())
		}
	}
	return out
}

// Methods returns the methods the data knows of service
// ("google.pubsub.v1.Publisher"), sorted, whatever the binary links.
func Methods(service string) []string { return methodsOf(service) }

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
// client, tells of its safety, as the interceptor package reads it (1
// idempotent, 2 not idempotent, 0 unknown) and why, for a binary that does
// not link the method's generated package; ok is false for a method the data
// does not know.
func Safety(method string) (safety int8, source string, ok bool) {
	if lo, hi := genRange(method); lo < hi {
		m := &genMethods[lo]
		return m.safety, genWhy[m.why], true
	}
	if i, found := slices.BinarySearchFunc(handSafety[:], method, func(h handMethod, m string) int { return strings.Compare(h.method, m) }); found {
		return handSafety[i].safety, genWhy[handSafety[i].why], true
	}
	return 0, "", false
}

// handMethod is what the descriptor of a method only hand-written clients
// call tells of its safety (see handSafety).
type handMethod struct {
	method string
	safety int8
	why    uint8
}
