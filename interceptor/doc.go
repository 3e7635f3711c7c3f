// Package interceptor carries out a grpcbackoff.Policy as gRPC client
// interceptors: Unary for unary calls, Stream for every kind of stream, and
// DialOptions for both, sharing one retry throttle.
//
//	conn, err := grpc.NewClient(target, append(interceptor.DialOptions(grpcbackoff.DefaultPolicy()), creds)...)
//
// The Google Cloud clients (cloud.google.com/go) retry by themselves, in
// their CallOptions or their own code. One retry layer per method and code,
// never two, never none: for a call of such a client (its x-goog-api-client
// carries a gapic/ or gccl/ token), the Retrier makes one attempt on a code
// the client retries for that method and hands the error back
// (ReasonClientRetries), and retries every other code of its Policy itself;
// Explain says which codes are whose. A client retries a call with one
// context and request, by which the Retrier knows its attempts: its own
// retries of one call stay within MaxAttempts across them. That memory
// never answers for the wire: every call is sent, and an attempt of a call
// its client resends only gets fewer retries of the Retrier's. The gaxretry
// module gives a Retrier's dial options to such clients
// (gaxretry.ClientOptions) and can hand their own retries over to it
// (gaxretry.Adopt). A Retrier installed twice on one connection (the same
// dial options, or two Retriers') retries in one layer: the first one.
//
// A call's retry settings come from, the first that speaks deciding: the
// call's options (NoRetry, CallPolicy; CallMaxAttempts bounds the others);
// the Retrier's options for its method or its service (WithMethod,
// WithoutRetryFor, WithHedging, and WithServiceConfig's entries that hedge
// or have no retryPolicy: choices made before the first attempt); the
// retryPolicy its ClientConn's service config gives it (from the name
// resolver: DNS TXT records, a manual resolver; or
// grpc.WithDefaultServiceConfig), read at the call's first failure;
// WithServiceConfig's retryPolicies; the Policy given to New. Where grpc-go's own
// retry stays on (XDSDialOptions), the failures its control plane retries,
// an xDS route's or the service config's, are grpc-go's first, whatever the
// others say. ExplainOn says which decided, for one ClientConn.
//
// Beyond retries, a Retrier hedges the methods given WithHedging, cuts hung
// attempts (Policy.AttemptTimeout), keeps a retry budget per backend target,
// never retries a method known not to be idempotent after a failure that may
// have been applied, and tells its Observers of every decision.
//
// A call is retried when it fails with one of the Policy's codes, up to
// MaxAttempts attempts, waiting Policy.Backoff between attempts (or longer if
// the server asks for it with RetryInfo or pushback). The interceptors never
// sleep past the caller's deadline: when the next retry could not start before
// it, the last error is returned at once. The error returned after retries is
// a *grpcbackoff.Error that keeps the last status code and details.
//
// # Reading order
//
// This package is the public face: New and its options, Unary, Stream,
// DialOptions, Explain, and the types they name. The engine is internal, in
// packages that import one way, each one's doc saying its place, bottom up:
//
//	internal/attempt       one attempt's facts: Failure, Facts, Timer, HeaderWatch
//	internal/googledata    the generated data: what each generated Google client retries, the pinned methods' safety
//	internal/cloudclients  what the Google Cloud clients retry, the rule, the memory of their calls
//	internal/gate          the admission checks of a target's calls: Gate, Reservation; the budget, adaptive throttling
//	internal/settings      what a Retrier's options say of each method
//	internal/connpolicy    what a ClientConn's control plane says: its service config's retryPolicy, grpc-go's attempts of a call
//	internal/targets       a target's gates, a ClientConn's closing and policies
//	internal/safety        whether a method may be sent again after a failure
//	internal/resume        WithResume's rules, checked against the descriptors; a stream's request and token
//	internal/loop          the retry loop: a call's Plan on its ClientConn, the protocol (Decide, Reserve, Wait, Pay), Record, its end (Fail, End), its Hook
//	internal/googlehook    the Google Cloud clients' rule as the loop's Hook: the engine's one user of internal/cloudclients
//	internal/hedge         a hedged unary call: its race
//	internal/stream        the stream machine: its replay, commit and resume
//	internal/unary         the unary path: its invoker
//
// To add a per-target check (a circuit breaker, a concurrency limit),
// implement gate.Gate in a file of internal/gate and list it in
// targets.Registry's built-in gates; internal/loop's breaker_test.go is one.
//
// To change the stream machine, read Stream's contract (stream.go), then
// internal/stream in the order its package doc gives, state.go first (the
// phases and their rules), then internal/loop's Call (how a failed
// attempt is decided on, reserved, paid for and ended) and internal/attempt
// (what a failure tells). Its tests are here: stream_test.go, stream_timeout_test.go and the
// scenario tests, through the public API; internal/attempt's
// TestGRPCStreamFacts pins what grpc-go reports of a stream.
package interceptor
