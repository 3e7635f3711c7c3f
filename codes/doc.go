// Package codes relates HTTP status codes to gRPC status codes, so that
// advice phrased in HTTP terms ("retry 5xx and 429") can be read in gRPC
// terms ("retry UNAVAILABLE and RESOURCE_EXHAUSTED").
//
// # Importing
//
// The package name is codes, the same as [google.golang.org/grpc/codes].
// Code that needs both must rename one of them; this documentation and the
// examples import this package as httpcodes:
//
//	import (
//		"google.golang.org/grpc/codes"
//
//		httpcodes "github.com/platformkit/grpcbackoff/codes"
//	)
//
//	code := httpcodes.FromHTTP(resp.StatusCode) // a codes.Code
//
// # Two mappings
//
// There are two published HTTP-to-gRPC mappings, and they disagree:
//
//   - Google's API mapping, from the "HTTP Mapping" comments in
//     google/rpc/code.proto (also tabulated at
//     https://cloud.google.com/apis/design/errors). It says which HTTP status
//     a Google API returns for each code. [ToHTTP] implements it. [FromHTTP]
//     implements the reverse direction, the way Google's client libraries
//     turn HTTP/JSON error responses into codes.
//   - gRPC's transport mapping, from grpc/doc/http-grpc-status-mapping.md as
//     implemented by grpc-go. It decides which code a gRPC client reports
//     when a non-gRPC HTTP response arrives (for example an error page from a
//     proxy or load balancer, with no grpc-status). [FromTransportHTTP]
//     implements it.
//
// The difference matters for retries. Under Google's mapping an HTTP 429 is
// RESOURCE_EXHAUSTED; when a proxy in front of a gRPC server answers 429,
// grpc-go reports UNAVAILABLE. An HTTP 502 is INTERNAL for Google but
// UNAVAILABLE in gRPC, and an HTTP 500 is INTERNAL for Google but UNKNOWN in
// gRPC.
//
// # "Retry 5xx and 429"
//
// Google Cloud guidance (for example Memorystore's) says clients must retry
// HTTP 5xx and 429 responses with exponential backoff. For a gRPC client,
// [ForHTTPStatuses](Class5xx, 429) shows which codes that means: the seven
// codes that Google's mapping sends to a 5xx status or to 429.
//
//	Code                 HTTP  Retried by default?
//	UNKNOWN              500   no
//	DEADLINE_EXCEEDED    504   no
//	RESOURCE_EXHAUSTED   429   yes
//	UNIMPLEMENTED        501   no
//	INTERNAL             500   no
//	UNAVAILABLE          503   yes
//	DATA_LOSS            500   no
//
// This library's default policy (DefaultPolicy in package grpcbackoff)
// retries only UNAVAILABLE and RESOURCE_EXHAUSTED. The reasons, code by
// code:
//
//   - UNAVAILABLE (503) is transient by definition. code.proto calls it "most
//     likely a transient condition, which can be corrected by retrying with a
//     backoff". grpc-go also reports it when a connection fails and when a
//     proxy answers 429, 502, 503 or 504. This covers the "5xx" that comes
//     from intermediaries.
//   - RESOURCE_EXHAUSTED (429) means a quota or rate limit was hit. Waiting
//     (with backoff, or for the delay in a RetryInfo detail) is the cure.
//     Beware that grpc-go also uses this code on the client when a message
//     is larger than the configured size limit. Retrying that never helps.
//   - DEADLINE_EXCEEDED (504) means the caller's time budget is spent. A
//     retry under the same context fails at once. Retrying with a fresh
//     per-attempt timeout sends more work to a server that is already too
//     slow, which makes overload worse. code.proto also warns that the
//     operation may have completed anyway, so a retry is not safe unless the
//     operation is idempotent.
//   - UNIMPLEMENTED (501) means the server does not support the method. That
//     does not change between attempts, so a retry cannot succeed.
//   - INTERNAL (500) means a server invariant was broken: a bug. The same
//     request usually hits the same bug, and the server may have applied part
//     of the request before failing, so a blind retry is not safe.
//   - UNKNOWN (500) carries no information. It can be a panic, an error that
//     was never converted to a status, or a non-gRPC 500 from a proxy. The
//     client cannot know whether side effects happened, so a retry is not
//     safe.
//   - DATA_LOSS (500) means unrecoverable data loss or corruption. A retry
//     cannot repair it and may spread it.
//
// Callers who know that an operation is idempotent and that a failure is
// transient can still add codes to the policy's retryable set (Policy.Codes)
// themselves.
//
// # Where the tables come from
//
// [FromHTTP] follows the canonical map of
// github.com/googleapis/gax-go/v2/apierror for the statuses it lists, and
// its fallback by class: other 4xx give FAILED_PRECONDITION (the request
// cannot succeed as sent, but it is not known to be malformed), other 5xx
// (502, 505 and so on) INTERNAL. Where code.proto maps several codes to one
// status, it picks one: 400 gives INVALID_ARGUMENT (not FAILED_PRECONDITION
// or OUT_OF_RANGE), 409 ABORTED (not ALREADY_EXISTS), 500 INTERNAL (not
// UNKNOWN or DATA_LOSS); the exact statuses 412 and 416 give
// FAILED_PRECONDITION and OUT_OF_RANGE, though [ToHTTP] sends those codes to
// 400. gax-go v2.27.0 does not list 499, so it gives FAILED_PRECONDITION for
// it; FromHTTP gives CANCELLED, the inverse of code.proto's mapping, as
// gax-java's HttpJsonStatusCode does.
//
// [FromTransportHTTP] is grpc-go's table (HTTPStatusConvTab in
// google.golang.org/grpc/internal/transport, checked against v1.85.0), which
// follows grpc/doc/http-grpc-status-mapping.md with one difference: the spec
// and grpc-java map 431 (Request Header Fields Too Large) to INTERNAL, but
// grpc-go does not list it, so FromTransportHTTP returns UNKNOWN for 431.
// grpc-go skips interim 1xx headers, and gives INTERNAL to a response
// without a usable :status, which an int argument cannot represent. The
// spec forbids servers from choosing an HTTP status by this table, which is
// neither symmetric nor one-to-one.
package codes
