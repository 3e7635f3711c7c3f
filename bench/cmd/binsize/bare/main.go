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
