// Package controlplane holds tests only: grpcbackoff's interceptors and bare
// grpc-go side by side on the control planes that hand a client a retry
// policy — a manual resolver, grpc-go's DNS resolver against a DNS server of
// the tests' own, and an xDS management server with grpc-go's xDS client —
// all on 127.0.0.1.
package controlplane
