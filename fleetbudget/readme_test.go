package fleetbudget_test

import (
	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/fleetbudget"
	"github.com/platformkit/grpcbackoff/interceptor"
)

// The snippet of the root README.md (TestReadmeSnippetsCompile).
var _ = readmeFleet

func readmeFleet() error {
	fleet, err := fleetbudget.New(fleetbudget.Options{URL: "rediss://10.0.0.3:6378"})
	if err != nil {
		return err
	}
	defer fleet.Close()
	r, err := interceptor.New(grpcbackoff.DefaultPolicy(), fleet.Option())
	_ = r
	return err
}
