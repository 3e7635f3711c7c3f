package interceptor

import (
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff/internal/cloudclients"
)

// The Google Cloud clients retry their calls by themselves: in their
// CallOptions (per method and code) or in their own code. One retry layer
// per method and code, never two, never none: internal/cloudclients holds
// what each client retries and the rule the engine follows. This file holds
// what Explain tells of it.

// ClientRetries is what a Google Cloud client retries by itself for a
// method, as Explain tells it.
type ClientRetries struct {
	// Client names the client and where its retries are stated, such as
	// "cloud.google.com/go/pubsub/v2/apiv1 v2.8.1 (its CallOptions)".
	Client string
	// Codes are the codes the client retries by itself, or refuses to retry
	// on purpose: for them the Retrier makes one attempt and returns the
	// error to the client. Empty: the client retries nothing, and the
	// Retrier retries every code of its Policy.
	Codes []codes.Code
	// OpeningOnly says, for a stream, that the client retries only its
	// opening: once open, the stream is the Retrier's to retry, on every
	// code of its Policy, until it commits.
	OpeningOnly bool
	// Hinted are the codes the client retries only when the error carries
	// RetryInfo (the server's delay): such an error is left to it; without
	// RetryInfo the code is the Retrier's.
	Hinted []codes.Code
	// ExactlyOnce are the codes the client also retries for a Pub/Sub
	// subscription with exactly-once delivery (the subscriber's acks and
	// modacks): the Retrier learns which subscriptions have it from their
	// StreamingPull's responses, as the subscriber does.
	ExactlyOnce []codes.Code
}

// clientRetries returns what the Google Cloud clients that call method
// retry by themselves, for Explain; stream says the method is a stream.
func clientRetries(method string, stream bool) []ClientRetries {
	var out []ClientRetries
	for _, rl := range cloudclients.Explain(method, stream) {
		if rl.Known || strings.HasPrefix(method, "/google.") {
			out = append(out, ClientRetries{Client: rl.Source, Codes: cloudclients.CodeSet(rl.Codes).List(), OpeningOnly: rl.Opening,
				Hinted: cloudclients.CodeSet(rl.Hinted &^ rl.Codes).List(), ExactlyOnce: cloudclients.CodeSet(rl.ExactlyOnce).List()})
		}
	}
	return out
}
