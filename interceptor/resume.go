package interceptor

// The resume rules of server streams (issue 43): the option; the stream
// machine carries them out (internal/stream's resume.go), on the retry loop.

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/platformkit/grpcbackoff/internal/cloudclients"
	"github.com/platformkit/grpcbackoff/internal/resume"
)

// WithResume gives the server streams of the methods that name matches a
// resume rule: such a stream that fails after delivering messages, with a
// failure its Policy retries, is reopened where it stopped, and the caller
// sees one stream, every message once and in order, given a rule that is
// right for the server. name is matched as in WithMethod; a service's rule
// covers those of its server streams that take Req and return Resp, and a
// method's own rule wins.
//
// record makes the resume token (a log's next offset, Bigtable's last row
// key) from each message as the caller receives it, before RecvMsg
// returns, and from the token of the message before (the zero Token at the
// first). It must not keep resp, which the caller may reuse: copy what it
// needs (bytes.Clone). reopen makes the request to reopen with from req, a
// copy of the original request that it may change, and the token. It
// returns io.EOF when the stream is complete (a limit reached): the stream
// ends as at io.EOF; and any other error when it cannot resume it: the
// caller gets the failure as without a rule. A stream that fails before
// its first message reopens with its original request, without reopen.
// Both run on the caller's goroutine, in its RecvMsg; a panic in them is
// raised there, and again by every later operation of the stream, as a
// panic under the stream is (see Stream).
//
// A resume is a retry: the Policy (codes, backoff, AttemptTimeout), the
// retry budget, the deadline rule, pushback and RetryInfo, NoRetry,
// CallPolicy and CallMaxAttempts, the observers and Explain treat it as
// one, and the reopened stream carries PreviousAttemptsKey. After an open
// that delivered a message, the backoff and MaxAttempts start again, as
// gax-java's resumable streams do (a tail lives for hours, and each
// restart it goes through is an incident of its own): MaxAttempts bounds
// the opens in a row that deliver none, while End.Attempts and the error's
// Attempts count all, and the budget pays for every resume. A resume sends the
// method again after the server acted on it, so a call stated
// CallNotIdempotent is not resumed. A failure whose code a Google Cloud
// client retries by itself goes back to it unchanged, as any call's
// (ReasonClientRetries), and New refuses a rule for a method whose client
// resumes its streams itself (Bigtable's ReadRows, Spanner's
// ExecuteStreamingSql, Storage's ReadObject): a rule never resumes a
// stream under the client's own resumption.
//
// The stream's face: Header returns the headers of the open the stream
// committed to (what the caller saw first) and never waits through a
// resume; Trailer, once the stream ended, the last open's. Context does not
// stop resuming: it returns a context of the library's, with the caller's
// values and the peer of the open the stream committed to, done when the
// stream ends (or the caller's context is). CloseSend returns at once, in
// a resume's wait too, and the stream goes on (every open sends the
// request and the half-close); a cancellation, or the ClientConn's
// closing, during the wait ends it at once. The stream keeps its request (by reference: grpc-go's SendMsg
// forbids changing it) and its token, never its messages.
//
// New needs the method's descriptor (registered once its generated package
// is linked in, as Req's is), and refuses, with an error naming the rule,
// a rule for a method that is not a server stream (unary, client streams
// and bidi keep Stream's rules), of other types, or known not to be
// idempotent (see Safety: a resume sends it again). A method nothing else
// marks is taken as safe to open again by its rule, which opens it again
// by design (Explain says so); its .proto should still say it (option
// idempotency_level = NO_SIDE_EFFECTS), for every client. A call whose request
// is not a Req (another Go type of the message) gets INTERNAL from
// SendMsg, nothing sent; one whose responses are not Resp is not resumed.
func WithResume[Req, Resp proto.Message, Token any](name string, record func(tok Token, resp Resp) Token, reopen func(req Req, tok Token) (Req, error)) Option {
	return func(r *Retrier) error {
		if err := checkMethodName(name); err != nil {
			return err
		}
		if record == nil || reopen == nil {
			return fmt.Errorf("interceptor: WithResume(%q): record and reopen must not be nil", name)
		}
		rule := resume.New(name, record, reopen)
		methods, err := resume.Methods(protoregistry.GlobalFiles, name, rule)
		if err != nil {
			return err
		}
		if err := resumedByClient(name, methods); err != nil {
			return err
		}
		r.e.Resume.Set(name, rule, methods)
		return nil
	}
}

// resumedByClient returns an error naming the rule given for name if a
// Google Cloud client retries the streams of one of methods by itself past
// their opening (Bigtable's ReadRows, Spanner's ExecuteStreamingSql,
// Storage's ReadObject: cloudclients' hand-written loops): the rule would
// resume them under the client, whose own state of the stream (a row half
// received, the rows it holds until the next resume token) a resume it
// does not know of breaks. A client that retries only a stream's opening
// (a generated client's) leaves the open stream to the Retrier: no error.
func resumedByClient(name string, methods []string) error {
	for _, m := range methods {
		for _, rl := range cloudclients.Explain(m, true) {
			if rl.Google && rl.Codes|rl.Hinted != 0 && !rl.Opening {
				return fmt.Errorf("interceptor: WithResume(%q): a Google Cloud client retries the streams of %s by itself past their opening (%s): "+
					"a rule would resume them under it, which its own resumption does not expect; call the method through that client, which resumes it",
					name, m, rl.Source)
			}
		}
	}
	return nil
}

// resumeUnsafe reports whether method is treated as a write, which a resume
// must not send again, and whether that is known rather than assumed
// (nothing marks it: see Safety).
func (r *Retrier) resumeUnsafe(method string) (unsafe, known bool) {
	if !r.e.Unsafe(method) {
		return false, false
	}
	return true, !r.e.Safety.Of(method).Assumed
}
