// Package googledata holds the facts generated about the Google Cloud Go
// clients, which internal/cloudclients reads: what each generated client
// retries, from googleapis' gRPC service configs (retries.txt, in words,
// which a reviewer reads; retries_gen.go, the same deflated, which the
// binary carries), and what the descriptors of the pinned clients' methods
// tell of their safety (safety_gen.go, looked up by Pinned, pinned.go). The
// files but pinned.go are generated, by the go:generate line below (go
// generate here, or go run ./googleclients/cmd/gaxdata -w from the
// repository's root); it holds data and the one lookup of it, at the bottom
// of the engine's layers.
package googledata

//go:generate go run ../../googleclients/cmd/gaxdata -w
