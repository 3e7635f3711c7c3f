module github.com/platformkit/grpcbackoff/cmd/backoffplan

go 1.26.0

// No replace lines, unlike the other modules: `go run
// github.com/platformkit/grpcbackoff/cmd/backoffplan@VERSION` refuses a
// module that has any. go.work points the library at this clone; see
// RELEASING.md.

require (
	cloud.google.com/go/redis v1.29.0
	github.com/platformkit/grpcbackoff v0.1.0
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	cloud.google.com/go/longrunning v1.5.0 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto v0.0.0-20261026165753-2ffab32bce7e // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20261019180522-ce908d29299b // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261026165753-2ffab32bce7e // indirect
)
