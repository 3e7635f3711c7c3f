package grpcbackoff

// CriticalityKey is the request metadata by which a call says how critical
// it is, in the four tiers of the Google SRE book ("Handling Overload":
// CRITICAL_PLUS, CRITICAL, SHEDDABLE_PLUS, SHEDDABLE), the values below,
// one per request, case ignored. A server's retry guard (package guard)
// holds back the retries of the sheddable tiers first. Any gRPC client can
// send it: grpc-go with metadata.AppendToOutgoingContext(ctx,
// "x-request-criticality", "CRITICAL_PLUS"), grpc-java with a
// Metadata.Key of the same name and Metadata.ASCII_STRING_MARSHALLER.
const CriticalityKey = "x-request-criticality"

// The values of CriticalityKey, most critical first.
const (
	CriticalityCriticalPlus  = "CRITICAL_PLUS"
	CriticalityCritical      = "CRITICAL"
	CriticalitySheddablePlus = "SHEDDABLE_PLUS"
	CriticalitySheddable     = "SHEDDABLE"
)
