package interceptor

import (
	"fmt"

	"google.golang.org/grpc"

	"github.com/platformkit/grpcbackoff/internal/loop"
	"github.com/platformkit/grpcbackoff/internal/safety"
)

// Safety says whether a method may be sent again after a failure that the
// server may have applied: whether it is idempotent.
//
// A NotIdempotent method is not resent after a failure that may have been
// applied: UNAVAILABLE, DEADLINE_EXCEEDED, UNKNOWN, INTERNAL or DATA_LOSS
// once the request reached a transport. It is still retried after one that
// proves it was not: RESOURCE_EXHAUSTED and ABORTED, and any failure of an
// attempt that made no transport stream (no connection to send on, a name
// that did not resolve), as gRPC reports it, whatever its message says.
// Where gRPC does not tell, the request counts as sent. An Idempotent
// method is retried on every code of its Policy.
//
// What is known of a method comes from, the first that knows winning: the
// call's options (CallIdempotent, CallNotIdempotent); the Retrier's options
// for the method (WithSafety, then a service config's retryPolicy naming it:
// WithServiceConfig's, or, for a call that follows it, the one its
// ClientConn's service config gives it); WithSafety for its service; its
// descriptor, once its generated package is linked in: idempotency_level
// NO_SIDE_EFFECTS and IDEMPOTENT, and the google.api.http verbs GET, PUT
// and DELETE, and PATCH in a Google API (AIP-134's Update; elsewhere a
// PATCH may apply twice), are Idempotent, and a POST is when its name is a
// standard read's (below) or, in a Google API (a google.* package),
// designed to its guide, when its name starts with a verb that sets a state
// (SetIamPolicy, Acknowledge, CancelOperation) or reads with no word of
// change (ReadRows, GetIamPolicy; not ReadModifyWriteRow), any other POST
// being NotIdempotent (Publish, FailoverInstance, another API's custom
// methods); for a method of a Google API with neither, the same words of
// its name (StreamingPull, ReadObject); the name of a standard method that
// reads (Get, List, BatchGet, Search: AIP-131, 132, 231, 136), the verb then
// a resource's nouns, with no conjunction and no verb of change
// (GetIamPolicy reads, GetOrCreateCart and GetAndResetCounter do not); where
// nothing else knows, a resume rule covering it (WithResume: it opens the
// method again by design), the method's own hedging entry (WithHedging
// naming it, or a service config's hedgingPolicy: it sends the method twice
// by design) or a service config's retryPolicy for its service
// (WithServiceConfig's, or the ClientConn's a call follows). What none of these
// establishes is treated as a write, NotIdempotent. A write that no option
// stated (CallNotIdempotent, WithSafety) is resent, call by call, when its
// request carries a non-empty string field request_id (AIP-155: the server
// applies a request ID once) or, for a Google API's create with an ID of
// the caller's choosing (AIP-133: CreateInstance's instance_id), sets that
// ID: the server makes one resource of an ID, so a resend never makes a
// second; one that had not applied creates it, and the resend of one that
// had answers ALREADY_EXISTS, as a *grpcbackoff.Error of 2 attempts or
// more, which tells the caller the resource may be its own (bare, the
// caller gets UNAVAILABLE, and its own retry the same ALREADY_EXISTS). An
// empty ID lets the server choose one, and is not resent; nor is another
// API's create but by its request_id. A field counts when the request sets
// it (proto presence) and not empty, never by a default value, which is
// not on the wire. The request is read after a failure only.
// A Policy of the library's own (WithMethod, CallPolicy) changes delays and
// attempts, never Safety. Explain says which rule decided.
//
// A service's hedging entry (WithHedging of "/pkg.Service/", or the
// default's) hedges only its methods established safe to send twice: a
// method treated as a write is not hedged, its failures following its
// Policy. WithNonIdempotentRetries turns the protection off.
type Safety int8

const (
	// SafetyUnknown: nothing is known, and the method is treated as a
	// write, as NotIdempotent (Explain then reports NotIdempotent). Before
	// issue 42, the Policy's codes applied.
	SafetyUnknown Safety = iota
	// Idempotent: the method may be sent again after any failure.
	Idempotent
	// NotIdempotent: the method is not sent again after a failure that may
	// have been applied.
	NotIdempotent
)

func (s Safety) String() string {
	switch s {
	case SafetyUnknown:
		return "safety unknown"
	case Idempotent:
		return "idempotent"
	case NotIdempotent:
		return "not idempotent"
	}
	return fmt.Sprintf("Safety(%d)", int(s))
}

// The call options of CallIdempotent and CallNotIdempotent; gRPC ignores
// them (grpc.EmptyCallOption).
var (
	idempotentOption    = &loop.SafetyOption{Level: safety.Idempotent}
	notIdempotentOption = &loop.SafetyOption{Level: safety.NotIdempotent}
)

// CallIdempotent states that one call may be sent again after any failure
// of its Policy's codes, whatever is known of its method. It allocates
// nothing. For cloud.google.com/go clients, pass it with
// gax.WithGRPCOptions.
func CallIdempotent() grpc.CallOption { return idempotentOption }

// CallNotIdempotent states that one call must not be sent again after a
// failure that may have been applied (see Safety). It allocates nothing.
func CallNotIdempotent() grpc.CallOption { return notIdempotentOption }

// WithSafety states the Safety of the methods that name matches (matched as
// in WithMethod: "/pkg.Service/Method" or "/pkg.Service/"), over what their
// descriptors and names say. SafetyUnknown makes the Retrier ignore them:
// the methods are treated as writes.
func WithSafety(name string, s Safety) Option {
	return func(r *Retrier) error {
		if err := checkMethodName(name); err != nil {
			return err
		}
		if s < SafetyUnknown || s > NotIdempotent {
			return fmt.Errorf("interceptor: WithSafety(%q, %d): unknown Safety", name, int(s))
		}
		r.e.Safety.State(name, safety.Level(s))
		return nil
	}
}

// WithNonIdempotentRetries retries every method on every code of its
// Policy, even a NotIdempotent one (a write, or a method nothing knows)
// after a failure the server may have applied: a write may then be applied
// twice. It is the behaviour of versions before Safety; use it only for
// services whose writes are all idempotent in fact.
func WithNonIdempotentRetries() Option {
	return func(r *Retrier) error { r.e.UnsafeRetries = true; return nil }
}
