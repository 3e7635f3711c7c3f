// Package interoptest runs grpc-go's own interop client cases
// (google.golang.org/grpc/interop's Do… functions) against grpc-go's own
// interop server, over bufconn in a testing/synctest bubble, through a
// Retrier under the default options, an AttemptTimeout, hedging (with and
// without a hedge in flight) and a service config, each beside bare
// grpc-go. It is a module of its own: the interop package brings oauth2
// and xDS's protos, which the library's users should not download.
//
//	go test ./interoptest/
package interoptest
