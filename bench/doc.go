// Package bench measures the retry interceptors of
// github.com/platformkit/grpcbackoff/interceptor against a bare gRPC client
// and against the retry layers people use instead: grpc-go's built-in retry
// (service config), go-grpc-middleware v2's retry interceptors and gax-go's
// Invoke. Everything is in its benchmarks; run.sh runs them and prints the
// comparison. See README.md.
package bench
