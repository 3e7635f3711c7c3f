// Package cloudredis is a wire-compatible subset of the Cloud Redis API v1,
// generated from cloud_redis.proto, for the library's own tests: the root
// package's bufconn_test.go serves it as a fake Cloud Redis. It is internal,
// and only tests import it.
package cloudredis

//go:generate go run github.com/bufbuild/buf/cmd/buf@v1.75.0 generate --template buf.gen.yaml
