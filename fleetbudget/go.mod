module github.com/platformkit/grpcbackoff/fleetbudget

go 1.26.0

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/platformkit/grpcbackoff v0.1.0
	github.com/redis/go-redis/v9 v9.23.0
	google.golang.org/grpc v1.85.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261026165753-2ffab32bce7e // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace github.com/platformkit/grpcbackoff => ../
