package fleetbudget_test

import (
	"fmt"
	"strings"

	"github.com/alicebob/miniredis/v2"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/fleetbudget"
	"github.com/platformkit/grpcbackoff/interceptor"
)

func Example() {
	mr, err := miniredis.Run() // a Redis server, for the example
	if err != nil {
		panic(err)
	}
	defer mr.Close()

	fleet, err := fleetbudget.New(fleetbudget.Options{URL: "redis://" + mr.Addr()})
	if err != nil {
		panic(err)
	}
	defer fleet.Close()
	r, err := interceptor.New(grpcbackoff.DefaultPolicy(), fleet.Option())
	if err != nil {
		panic(err)
	}
	d := r.Explain("/google.cloud.redis.v1.CloudRedis/GetInstance").String()
	fmt.Println(d[strings.LastIndex(d, ";")+2:])
	// Output: retries paid from a budget per target shared by the fleet's processes (WithSharedBudget)
}
