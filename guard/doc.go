// Package guard is a retry guard for gRPC servers: interceptors that count,
// per method, the retries that do harm, and pace them with a pushback wait
// at the rate a share of the method's traffic allows, refusing only those
// that could not wait.
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
// of previous attempts, at most what the guard counted of its rank and
// client). So harm is the retries of calls not served: failed, in flight,
// or expected (each retriable failure let through counts at once as a retry
// to come, until it comes or for half a window). At a flaky but healthy
// server nearly every retry serves its call and the guard does nothing; in
// an outage no retry is served and every one counts, as a count of
// retries would. While the server is past what it serves by its own
// measure (its handler answers RESOURCE_EXHAUSTED to at least MinRetries
// and more than Share of the method's attempts in the window), a served
// retry counts, unless its call is critical (see Criticality).
//
// # Pace before refusing
//
// Each retriable failure (UNAVAILABLE, RESOURCE_EXHAUSTED and
// Options.Codes) takes a time of its method's schedule, the times at least
// a spacing apart: one retry per Share of the method's attempts per
// Window, each weighted by the harm a retry does there (the share of the
// calls that retried and ended that ended failed, or of the arrived
// retries not refunded, the lesser), so that the retries a server serves
// cost little. It takes the earliest free time from now; for a call with a
// deadline (its grpc-timeout), once retries have arrived, from half its
// time left shared among the attempts it may have left (as many as 5
// allow), weighted the same, so that in an outage a patient call's
// retries spread over its time. A failure whose time is now carries
// nothing, and its client retries as its own backoff says; a later time
// makes it carry grpc-retry-pushback-ms with the wait, in milliseconds
// (gRFC A6: a value ≥ 0 is the wait before the next attempt), each failure
// its own. A time past half the call's time left (a retry must come with
// as much time left as it waited), or more than a Window away, does not
// fit: the failure then carries −1, "do not retry", unless the method is
// quiet (its harm under MinRetries in the window, or its counts begun in
// this tenth of the window: nothing to judge by), whose failures are only
// paced. A client that retries far past its fair part of the method's
// harm (ClientMinRetries past 4 times it: one that ignores pushback) is
// refused without taking a time, so that it cannot crowd others out.
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
// A method's first tries and successful retries read the key only once a
// failure of the method said one (until then they count in the middle
// rank): the success path of calls that say none reads no more metadata.
//
// # Clients and tables
//
// A client is a connection: its peer's IP address and port (peers that
// are not TCP addresses count as one client per method). The counts of each
// (method, client) pair are kept in two cells of two rows of 4096, chosen
// by hash: a pair is judged noisy only if both its cells are, so an honest
// client is judged by a noisy one's counts only where it shares both cells
// with noisy ones, (k/4096)² of the time for k noisy clients, however many
// pairs there are. Methods are counted apart up to 1000 names; a new name
// past that takes the place of the least busy of 8 names drawn at random,
// so a flood of names (behind an unknown-service handler) churns among
// itself and never shares a busy method's counts. A name longer than
// 1 KiB (only a client's can be) is counted by its SHA-256 digest and kept
// as its first 1 KiB for logs and marks, so the table holds at most about
// 1 MiB of names whatever the clients send.
//
// The guard never changes a status or touches a successful response, and
// leaves a failure alone when its status has a RetryInfo detail (the
// handler said when to retry). A pushback trailer the handler sets itself
// cannot be seen from an interceptor: a failure the guard paces or refuses
// then carries both values, which gRFC A6, grpc-go and this library read as
// "do not retry". Install it first (outermost), so that it counts every
// attempt and sees what the interceptors after it answer; or register
// services through Registrar, which costs no allocation but sees only what
// handlers answer. What gRPC answers before any interceptor runs (an
// unknown method, a server shutting down) is neither counted nor changed.
package guard
