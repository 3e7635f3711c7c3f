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
	"strings"

	"google.golang.org/grpc"
)

// Header is the metadata key by which the Google Cloud clients name
// themselves.
const Header = "x-goog-api-client"

// Rule is who retries what for the calls of one method by one kind of
// client.
type Rule struct {
	// Client says the call is a Google Cloud client's.
	Client bool
	// Codes are the codes left to the client, bit 1<<code: it retries them,
	// or refuses them on purpose.
	Codes uint32
	// Opening says the client's retry of a stream covers only its opening.
	Opening bool
	// Known says the method is in the data.
	Known bool
	// Source names the client and where its retries are stated.
	Source string
}

// IsClient reports whether header, an x-goog-api-client value, is a Google
// Cloud client's: it has a gapic/ or gccl/ token. It allocates nothing.
func IsClient(header string) bool {
	for f := range strings.FieldsSeq(header) {
		if strings.HasPrefix(f, "gapic/") || strings.HasPrefix(f, "gccl/") {
			return true
		}
	}
	return false
}

// HandedOver is the call option by which gaxretry.Adopt marks a call whose
// client handed its retries over to the interceptors: they retry every code
// of their Policy. gRPC ignores it.
type HandedOver struct{ grpc.EmptyCallOption }

// retryNothing are the services whose Google Cloud Go clients retry none of
// their calls. (Placeholder until the generated data lands.)
var retryNothing = map[string]bool{
	"/google.cloud.redis.v1.CloudRedis/":                     true,
	"/google.cloud.redis.v1beta1.CloudRedis/":                true,
	"/google.cloud.redis.cluster.v1.CloudRedisCluster/":      true,
	"/google.cloud.redis.cluster.v1beta1.CloudRedisCluster/": true,
}

// placeholder is what two clients retry, until the generated data lands.
var placeholder = map[string]Rule{
	"/google.pubsub.v1.Publisher/GetTopic": {Client: true, Known: true, Codes: 1<<2 | 1<<10 | 1<<14,
		Source: "cloud.google.com/go/pubsub/v2/apiv1 v2.8.1 (its CallOptions)"},
	"/google.firestore.v1.Firestore/RunQuery": {Client: true, Known: true, Codes: 1 << 14, Opening: true,
		Source: "cloud.google.com/go/firestore/apiv1 (its CallOptions)"},
}

// Lookup returns the rule of a call of method whose x-goog-api-client value
// is header.
func Lookup(method, header string) Rule {
	if !IsClient(header) {
		return Rule{}
	}
	if rl, ok := placeholder[method]; ok {
		return rl
	}
	if i := strings.LastIndexByte(method, '/'); i > 0 && retryNothing[method[:i+1]] {
		return Rule{Client: true, Known: true, Source: "Cloud Redis's client (retries nothing)"}
	}
	return Rule{Client: true, Codes: 1<<17 - 1, Source: "a Google Cloud client"}
}

// Explain returns the rules of the calls of method by each kind of Google
// Cloud client that makes them.
func Explain(method string) []Rule {
	if !strings.HasPrefix(method, "/google.") {
		return nil
	}
	return []Rule{Lookup(method, "gapic/0")}
}
