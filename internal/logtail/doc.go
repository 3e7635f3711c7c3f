// Package logtail is a log-tailing gRPC service of the tests' own,
// generated from logtail.proto, and its Server: the long server streams a
// rolling restart or a GOAWAY breaks, which the resume rules of
// interceptor.WithResume continue (issue 43). Tail resumes from the offset
// in its request; its Server fails an open after a number of records with a
// chosen status, restarts, or drains with GOAWAY, as a Script says.
// It is internal, and only tests import it.
package logtail

//go:generate go run github.com/bufbuild/buf/cmd/buf@v1.75.0 generate --template buf.gen.yaml
