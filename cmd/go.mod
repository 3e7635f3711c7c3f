module github.com/platformkit/grpcbackoff/cmd

go 1.26.0

require (
	github.com/platformkit/grpcbackoff v0.1.0
	github.com/wcharczuk/go-chart/v2 v2.1.2
	golang.org/x/mod v0.42.0
	golang.org/x/tools v0.52.0
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
)

require (
	github.com/golang/freetype v0.0.0-20170609003504-e2365dfdc4a0 // indirect
	github.com/platformkit/grpcbackoff/fleetbudget v0.1.0
	golang.org/x/image v0.46.0 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261026165753-2ffab32bce7e // indirect
)

replace github.com/platformkit/grpcbackoff => ../

replace github.com/platformkit/grpcbackoff/fleetbudget => ../fleetbudget
