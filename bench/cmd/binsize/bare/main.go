// Command bare is half of bench/binsize.sh: grpc.NewClient alone, built stripped to weigh the library.
package main

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	cc, err := grpc.NewClient("127.0.0.1:1", opts...)
	if err != nil {
		panic(err)
	}
	fmt.Println(cc.Target())
	cc.Close()
}
