// Command library is half of bench/binsize.sh: grpc.NewClient with interceptor.DialOptions, built stripped to weigh the library.
package main

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
)

func main() {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	opts = append(opts, interceptor.DialOptions(grpcbackoff.DefaultPolicy())...)
	cc, err := grpc.NewClient("127.0.0.1:1", opts...)
	if err != nil {
		panic(err)
	}
	fmt.Println(cc.Target())
	cc.Close()
}
