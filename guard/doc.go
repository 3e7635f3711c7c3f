// Package guard is a retry guard for gRPC servers: interceptors that count,
// per method, the retries that do harm, and, while they would do more than a
// share of the method's traffic allows, pace them with a pushback wait or
// refuse them.
//
//	g, err := guard.New(guard.Options{})
//	srv := grpc.NewServer(append(g.ServerOptions(), grpc.Creds(creds))...)
//
// A retry is an attempt whose request carries grpc-previous-rpc-attempts
// (gRFC A6) with a count of 1 or more: grpc-go's built-in retry sends it,
// and so does this library's interceptor package. The guard reads its first
// value (grpc-go writes its own before any metadata a call forwards), as a
// decimal of any length, one leading "+" allowed (as Go's and Java's integer
// parsers read it); anything else, and no value, is a first try.
//
// # Harm, not count
//
// A retry that is served costs nothing: when a retry is answered OK, or
// with a code that is the server's real answer (NOT_FOUND,
// INVALID_ARGUMENT, PERMISSION_DENIED and the like), while its caller still
// waits, it is refunded, and so are its call's retries before it (its count
// of previous attempts, at most what the guard counted of its client). So
// harm is the retries of calls not served: failed, in flight, or expected
// (each retriable failure let through counts at once as a retry to come,
// until it comes or for half a window, weighted as the arrived retries are).
// At a flaky but healthy server nearly every retry serves its call and the
// guard does nothing; in an outage no retry is served and every one counts,
// as a count of retries would. While the server is past what it serves by
// its own measure (its handler answers RESOURCE_EXHAUSTED to at least
// MinRetries and more than Share of the method's attempts in the window), a
// served retry counts, unless its call is critical (see Criticality).
//
// # Pace before refusing
//
// Each retriable failure (UNAVAILABLE, RESOURCE_EXHAUSTED and
// Options.Codes) takes the next free slot of its method's schedule, which
// hands out slots at Share's rate: Share of the method's attempts per
// Window, each slot weighted by the share of the calls that retried and
// ended that ended failed, so that the calls retries serve cost little. A
// failure whose slot is free now carries nothing, and its client retries
// as its own backoff says; a later slot makes it carry
// grpc-retry-pushback-ms with the wait (gRFC A6: a value ≥ 0 is the wait
// before the next attempt), each failure its own. A slot past the call's
// deadline (its grpc-timeout), or more than a Window away, does not fit:
// the failure then carries −1, "do not retry", unless its method is quiet
// (its harm under MinRetries in the window), whose failures are never
// refused. A client that retries more than it calls (its harm at least
// ClientMinRetries and more than its first tries: it ignores pushback) is
// refused without taking a slot.
//
// grpc-go's retry (with a retryPolicy that retries the code, within its
// throttle and its attempts) obeys a wait only for a Trailers-Only answer
// and a single value, and waits exactly that long, its backoff starting
// over; each paced failure uses one of its attempts. This library's waits
// at least that long (its own backoff if longer). Both stop at −1.
//
// # Criticality
//
// A call says how critical it is in grpcbackoff.CriticalityKey
// ("x-request-criticality"), in the SRE book's tiers, which any gRPC client
// can send. The guard reads them as three ranks, each counted and paced
// apart: SHEDDABLE; SHEDDABLE_PLUS and a call that says nothing; CRITICAL and
// CRITICAL_PLUS. While the server sheds (above), a SHEDDABLE call's
// failure is refused at once (its retry would be shed), a served retry of
// the middle rank counts, and a critical call's served retry is still free.
//
// # Clients and tables
//
// A client is a connection: its peer's IP address and port (peers that
// are not TCP addresses count as one client per method). The counts of each
// (method, client) pair are kept in two cells of two rows of 4096, chosen
// by hash: a pair is judged noisy only if both its cells are, so an honest
// client shares a noisy one's counts only where it shares both cells with
// one, however many pairs there are. Methods are counted apart up to 1000
// names; a new name past that takes the place of the least busy of 8 names
// drawn at random, so a flood of names (behind an unknown-service handler)
// churns among itself and never shares a busy method's counts.
//
// The guard never changes a status or touches a successful response, and
// leaves a failure alone when its status has a RetryInfo detail (the
// handler said when to retry). A pushback trailer the handler sets itself
// cannot be seen from an interceptor: a failure the guard marks then
// carries both values, which gRFC A6, grpc-go and this library read as "do
// not retry". Install it first (outermost), so
// that it counts every attempt and sees what the interceptors after it
// answer. What gRPC answers before any interceptor runs (an unknown method,
// a server shutting down) is neither counted nor changed.
package guard
