package fleetbudget

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// The tests run against miniredis, an embedded stand-in, unless REDIS_ADDR
// names a Redis server (host:port, on 127.0.0.1; .ci/run starts one), and
// test cluster mode against REDIS_CLUSTER_ADDR if it names a single-node
// cluster-enabled server (miniredis otherwise, which answers CLUSTER SLOTS
// for itself). Each test uses keys of its own prefix.

var prefixes atomic.Int64

// testPrefix returns a key prefix no other test uses.
func testPrefix(t *testing.T) string {
	return fmt.Sprintf("fbtest:%s:%d.%d:", strings.ReplaceAll(t.Name(), "/", "."), time.Now().UnixNano(), prefixes.Add(1))
}

// server returns the address of a Redis server for t: REDIS_ADDR's, or a
// new miniredis closed at t's end (mr is nil then for the former).
func server(t *testing.T) (addr string, mr *miniredis.Miniredis) {
	t.Helper()
	if a := os.Getenv("REDIS_ADDR"); a != "" {
		return a, nil
	}
	mr = miniredis.RunT(t)
	return mr.Addr(), mr
}

// clusterServer is server for a cluster: REDIS_CLUSTER_ADDR or miniredis.
func clusterServer(t *testing.T) string {
	t.Helper()
	if a := os.Getenv("REDIS_CLUSTER_ADDR"); a != "" {
		return a
	}
	return miniredis.RunT(t).Addr()
}

// client returns a go-redis client of addr, closed at t's end.
func client(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("Redis at %s: %v", addr, err)
	}
	return c
}

type redisClient = redis.Client

func newRedisClient() *redis.Client { return redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) }
