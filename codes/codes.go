package codes

import (
	"net/http"

	grpccodes "google.golang.org/grpc/codes"
)

// maxCode is one past the highest gRPC code defined by the gRPC spec
// (UNAUTHENTICATED = 16).
const maxCode = grpccodes.Unauthenticated + 1

// Class constants stand for a whole class of HTTP statuses in the arguments
// of [ForHTTPStatuses]. Class5xx, for example, matches every status from 500
// to 599. The values 1 to 5 can never be confused with a real status.
const (
	Class1xx = 1 // Informational: 100-199.
	Class2xx = 2 // Success: 200-299.
	Class3xx = 3 // Redirection: 300-399.
	Class4xx = 4 // Client error: 400-499.
	Class5xx = 5 // Server error: 500-599.
)

// ToHTTP returns the HTTP status that Google APIs use for the gRPC code c,
// as given by the "HTTP Mapping" comments in google/rpc/code.proto:
//
//	OK                  200    ABORTED             409
//	CANCELLED           499    OUT_OF_RANGE        400
//	UNKNOWN             500    UNIMPLEMENTED       501
//	INVALID_ARGUMENT    400    INTERNAL            500
//	DEADLINE_EXCEEDED   504    UNAVAILABLE         503
//	NOT_FOUND           404    DATA_LOSS           500
//	ALREADY_EXISTS      409    UNAUTHENTICATED     401
//	PERMISSION_DENIED   403    FAILED_PRECONDITION 400
//	RESOURCE_EXHAUSTED  429
//
// The mapping is many-to-one: 400, 409 and 500 each stand for several
// codes, so [FromHTTP] cannot always recover c. A code outside 0 to 16 is
// not defined by gRPC, so ToHTTP treats it like UNKNOWN and returns 500.
// The result is always one of the statuses in the table.
func ToHTTP(c grpccodes.Code) int {
	switch c {
	case grpccodes.OK:
		return http.StatusOK
	case grpccodes.Canceled:
		return 499 // Client Closed Request; net/http has no constant for it.
	case grpccodes.Unknown:
		return http.StatusInternalServerError
	case grpccodes.InvalidArgument:
		return http.StatusBadRequest
	case grpccodes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case grpccodes.NotFound:
		return http.StatusNotFound
	case grpccodes.AlreadyExists:
		return http.StatusConflict
	case grpccodes.PermissionDenied:
		return http.StatusForbidden
	case grpccodes.ResourceExhausted:
		return http.StatusTooManyRequests
	case grpccodes.FailedPrecondition:
		return http.StatusBadRequest
	case grpccodes.Aborted:
		return http.StatusConflict
	case grpccodes.OutOfRange:
		return http.StatusBadRequest
	case grpccodes.Unimplemented:
		return http.StatusNotImplemented
	case grpccodes.Internal:
		return http.StatusInternalServerError
	case grpccodes.Unavailable:
		return http.StatusServiceUnavailable
	case grpccodes.DataLoss:
		return http.StatusInternalServerError
	case grpccodes.Unauthenticated:
		return http.StatusUnauthorized
	default:
		return http.StatusInternalServerError
	}
}

// FromHTTP returns the gRPC code that Google APIs assign to an HTTP status,
// as Google's client libraries turn an HTTP/JSON error response into a gRPC
// status. For a non-gRPC response seen by a gRPC client, use
// [FromTransportHTTP]. These statuses have a code of their own:
//
//	200 OK                   416 OUT_OF_RANGE
//	400 INVALID_ARGUMENT     429 RESOURCE_EXHAUSTED
//	401 UNAUTHENTICATED      499 CANCELLED
//	403 PERMISSION_DENIED    500 INTERNAL
//	404 NOT_FOUND            501 UNIMPLEMENTED
//	409 ABORTED              503 UNAVAILABLE
//	412 FAILED_PRECONDITION  504 DEADLINE_EXCEEDED
//
// Other statuses get the code of their class: other 2xx OK, other 4xx
// FAILED_PRECONDITION, other 5xx INTERNAL. 1xx, 3xx and statuses outside
// 100–599 give UNKNOWN. The package documentation says where the table
// comes from and where it differs from gax-go's.
func FromHTTP(status int) grpccodes.Code {
	switch status {
	case http.StatusOK:
		return grpccodes.OK
	case http.StatusBadRequest:
		return grpccodes.InvalidArgument
	case http.StatusUnauthorized:
		return grpccodes.Unauthenticated
	case http.StatusForbidden:
		return grpccodes.PermissionDenied
	case http.StatusNotFound:
		return grpccodes.NotFound
	case http.StatusConflict:
		return grpccodes.Aborted
	case http.StatusPreconditionFailed:
		return grpccodes.FailedPrecondition
	case http.StatusRequestedRangeNotSatisfiable:
		return grpccodes.OutOfRange
	case http.StatusTooManyRequests:
		return grpccodes.ResourceExhausted
	case 499: // Client Closed Request
		return grpccodes.Canceled
	case http.StatusInternalServerError:
		return grpccodes.Internal
	case http.StatusNotImplemented:
		return grpccodes.Unimplemented
	case http.StatusServiceUnavailable:
		return grpccodes.Unavailable
	case http.StatusGatewayTimeout:
		return grpccodes.DeadlineExceeded
	}
	switch status / 100 {
	case 2:
		return grpccodes.OK
	case 4:
		return grpccodes.FailedPrecondition
	case 5:
		return grpccodes.Internal
	default:
		// 1xx, 3xx, and anything outside 100-599 (integer division
		// sends 0-99 and negative numbers to 0, and 600 and up past 5).
		return grpccodes.Unknown
	}
}

// FromTransportHTTP returns the gRPC code that a grpc-go client reports when
// the server answers with HTTP status and no grpc-status, as a proxy, load
// balancer or web server that does not speak gRPC does:
//
//	400 INTERNAL             429 UNAVAILABLE
//	401 UNAUTHENTICATED      502 UNAVAILABLE
//	403 PERMISSION_DENIED    503 UNAVAILABLE
//	404 UNIMPLEMENTED        504 UNAVAILABLE
//
// Every other status gives UNKNOWN, 200 included (a real success carries
// grpc-status 0), as do 1xx (grpc-go waits for the final response) and
// statuses outside 100–599. A response that carries grpc-status has that
// code, and this table does not apply. The package documentation says where
// the table comes from.
func FromTransportHTTP(status int) grpccodes.Code {
	switch status {
	case http.StatusBadRequest:
		return grpccodes.Internal
	case http.StatusUnauthorized:
		return grpccodes.Unauthenticated
	case http.StatusForbidden:
		return grpccodes.PermissionDenied
	case http.StatusNotFound:
		return grpccodes.Unimplemented
	case http.StatusTooManyRequests,
		http.StatusBadGateway,
		http.StatusServiceUnavailable,
		http.StatusGatewayTimeout:
		return grpccodes.Unavailable
	default:
		return grpccodes.Unknown
	}
}

// ForHTTPStatuses returns the gRPC codes that [ToHTTP] maps into any of the
// given statuses, in ascending numeric order and without duplicates. It
// answers "which gRPC codes does this HTTP advice mean?". Each argument is
// either an HTTP status, matched exactly, or one of [Class1xx] to [Class5xx],
// which matches a whole class. For example, "retry 5xx and 429" becomes
//
//	httpcodes.ForHTTPStatuses(httpcodes.Class5xx, http.StatusTooManyRequests)
//
// which returns UNKNOWN, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED,
// UNIMPLEMENTED, INTERNAL, UNAVAILABLE and DATA_LOSS. The package
// documentation explains why a retry policy should not use all of them.
//
// Only codes 0 to 16 are considered. Only these statuses are ever produced
// by ToHTTP: 200, 400, 401, 403, 404, 409, 429, 499, 500, 501, 503 and 504.
// Any other argument, such as 502, Class1xx or Class3xx, matches nothing. To
// find what a gRPC client reports for a 502 from a proxy, use
// [FromTransportHTTP]. The argument order and repeated arguments do not
// affect the result. If nothing matches, including when there are no
// arguments, the result is nil.
//
// Each call returns a new slice, which the caller may modify.
func ForHTTPStatuses(statuses ...int) []grpccodes.Code {
	var out []grpccodes.Code
	for c := grpccodes.OK; c < maxCode; c++ {
		h := ToHTTP(c)
		for _, s := range statuses {
			if s == h || (s >= Class1xx && s <= Class5xx && h/100 == s) {
				out = append(out, c)
				break
			}
		}
	}
	return out
}
