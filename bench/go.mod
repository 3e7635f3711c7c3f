module github.com/platformkit/grpcbackoff/bench

go 1.26.0

replace github.com/platformkit/grpcbackoff => ../

require (
	github.com/googleapis/gax-go/v2 v2.27.0
	github.com/grpc-ecosystem/go-grpc-middleware/v2 v2.3.4
	github.com/platformkit/grpcbackoff v0.1.0
	go.opentelemetry.io/otel/metric v1.47.0
	go.opentelemetry.io/otel/sdk/metric v1.47.0
	golang.org/x/perf v0.0.0-20260908200009-22c9c6c9d4da
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261026165753-2ffab32bce7e
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/aclements/go-moremath v0.0.0-20210112150236-f10218a38794 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/sdk v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/api v0.311.0 // indirect
	google.golang.org/genproto v0.0.0-20261026165753-2ffab32bce7e // indirect
)

tool golang.org/x/perf/cmd/benchstat

require github.com/platformkit/grpcbackoff/opentelemetry v0.1.0

replace github.com/platformkit/grpcbackoff/opentelemetry => ../opentelemetry
