package fleetbudget_test

// Red-team probes of issue 35 against a real Redis (REDIS_ADDR; miniredis
// otherwise): processes of low traffic, at start-up and after quiet spells,
// each as its own Throttle would retry.

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/fleetbudget"
	"github.com/platformkit/grpcbackoff/interceptor"
)

var probePrefixes atomic.Int64

func probeRedis(t *testing.T) (addr, prefix string) {
	prefix = fmt.Sprintf("fbprobe:%d.%d:", time.Now().UnixNano(), probePrefixes.Add(1))
	if a := os.Getenv("REDIS_ADDR"); a != "" {
		return a, prefix
	}
	return miniredis.RunT(t).Addr(), prefix
}

// syncBuffer is a log sink safe for the fleet's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// failsTwice fails the first two attempts of each call, UNAVAILABLE.
func failsTwice(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
	md, _ := metadata.FromOutgoingContext(ctx)
	if v := md.Get(interceptor.PreviousAttemptsKey); len(v) == 0 || v[len(v)-1] != "2" {
		return status.Error(codes.Unavailable, "fails two attempts in three")
	}
	return nil
}

// newProbeProcesses returns n processes sharing addr's budget of prefix:
// a Fleet (defaults) and a Retrier of the recipe capped at 1 s each.
func newProbeProcesses(t *testing.T, addr, prefix string, n int) []*interceptor.Retrier {
	p := grpcbackoff.DefaultPolicy()
	p.Max = time.Second
	retriers := make([]*interceptor.Retrier, n)
	for i := range n {
		fleet, err := fleetbudget.New(fleetbudget.Options{URL: "redis://" + addr, Prefix: prefix, Logger: slog.New(slog.NewTextHandler(new(syncBuffer), nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fleet.Close() })
		if retriers[i], err = interceptor.New(p, fleet.Option()); err != nil {
			t.Fatal(err)
		}
	}
	return retriers
}

// TestProcessesStartingOneAfterAnother: 6 processes (a Fleet and a
// Retrier each, one Redis, one budget name, the defaults) start 300 ms
// apart and each makes one call whose first two attempts fail (the recipe,
// capped at 1 s). Each process's own Throttle retries its call (MinReserve
// 100, 2 retries); so would one Throttle for all six (12 retries), and so
// does the fleet's budget. (The red team's probe: the first process, alone
// at its first renewal, held the whole floor in its lease for a period, and
// the second and third processes' first retry was refused at their first
// renewal, "retry throttled". A retry refused while other processes hold
// stock is now asked for again at the next renewal, and the Ledger keeps
// what it refused out of the stocks it grants until then:
// lease.TestProcessesStartingOneAfterAnother runs 2 to 100 processes, at
// 0 to 2 s apart, on a virtual clock.)
func TestProcessesStartingOneAfterAnother(t *testing.T) {
	addr, prefix := probeRedis(t)
	const procs = 6
	retriers := newProbeProcesses(t, addr, prefix, procs)
	var failed atomic.Int64
	var wg sync.WaitGroup
	for i := range procs {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 300 * time.Millisecond) // start-up, staggered
			if err := retriers[i].Unary()(t.Context(), "/pkg.Svc/Get", nil, nil, nil, failsTwice); err != nil {
				failed.Add(1)
				t.Logf("process %d: %v (state %+v)", i, err, *retriers[i].States()[0].Shared)
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Errorf("%d of %d processes' first calls failed; want none: each one's own Throttle, or one Throttle for all, retries every one", n, procs)
	}
}

// TestWrongTypeKeyRejoins: a hostile (or mistaken) client replaces the
// hash of one target's budget with a string, as a `SET` of its key would.
// README ("Hostile or broken state"): the budget is made again at the next
// renewal, as old as the processes remember, as a lost key is; the other
// budget, renewed in the same pipeline, is untouched; both stay joined,
// and nothing is logged as Redis being down. (The red team's probe: the
// script's HMGET failed with WRONGTYPE, which failed every budget renewed
// in the pipeline, for as long as the key lived: a SET has no expiry; the
// log said "until Redis answers" while Redis answered.)
func TestWrongTypeKeyRejoins(t *testing.T) {
	addr, prefix := probeRedis(t)
	logs := new(syncBuffer)
	fleet, err := fleetbudget.New(fleetbudget.Options{URL: "redis://" + addr, Prefix: prefix, LeasePeriod: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	r, err := interceptor.New(grpcbackoff.DefaultPolicy(), fleet.Option())
	if err != nil {
		t.Fatal(err)
	}
	var ccs []*grpc.ClientConn
	for _, target := range []string{"passthrough:///broken", "passthrough:///untouched"} {
		cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ccs = append(ccs, cc)
	}
	ok := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	joined := func() [2]bool {
		for _, cc := range ccs {
			r.Unary()(t.Context(), "/pkg.Svc/Get", nil, nil, cc, ok)
		}
		var j [2]bool
		for _, s := range r.States() {
			switch s.Target {
			case "passthrough:///broken":
				j[0] = s.Shared.Joined
			case "passthrough:///untouched":
				j[1] = s.Shared.Joined
			}
		}
		return j
	}
	waitFor := func(want [2]bool, within time.Duration) bool {
		for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if joined() == want {
				return true
			}
		}
		return false
	}
	if !waitFor([2]bool{true, true}, 5*time.Second) {
		t.Fatalf("never joined: %s", logs)
	}
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	key := prefix + "{passthrough:///broken}"
	if n, err := rc.Exists(t.Context(), key).Result(); err != nil || n != 1 {
		t.Fatalf("the budget's key %q: exists %d, %v", key, n, err)
	}
	born, err := rc.HGet(t.Context(), key, "b").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Set(t.Context(), key, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var typ, again string
	var ttl time.Duration
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) { // 5 lease periods at most
		if got := joined(); got != [2]bool{true, true} {
			t.Fatalf("after one target's key became a string: joined %v (the broken target's, the untouched one's), want both; logs:\n%s", got, logs)
		}
		typ, _ = rc.Type(t.Context(), key).Result()
		ttl, _ = rc.PTTL(t.Context(), key).Result()
		again, _ = rc.HGet(t.Context(), key, "b").Result()
		if typ == "hash" {
			break
		}
	}
	if typ != "hash" || ttl <= 0 || again != born {
		t.Errorf("the key after it became a string: %s, TTL %v, born %q; want a hash again at the next renewal, expiring, born %q as before", typ, ttl, again, born)
	}
	// A renewal that timed out on a loaded machine (its period's quarter)
	// is not the key's doing: only a warning for another reason fails.
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "level=WARN") && !strings.Contains(line, `err="context deadline exceeded"`) {
			t.Errorf("logged:\n%s\nwant nothing: the budget is made again at the next renewal", logs)
			break
		}
	}
}

// TestURLErrorExampleIsValid: README: a malformed URL is an error from New
// "which names the value and how to write it" ("e.g.
// "redis://127.0.0.1:6379""). The example is one New accepts, with the
// URL's host and port where they are valid. (The red team's probe: where
// the host and port were themselves malformed, the example was the
// malformed value again, which New refused: net.SplitHostPort takes any
// text for a port.)
func TestURLErrorExampleIsValid(t *testing.T) {
	for bad, want := range map[string]string{
		"127.0.0.1:6379":               "redis://127.0.0.1:6379",
		"redis://127.0.0.1:+6379":      "redis://127.0.0.1:6379",
		"redis://127.0.0.1: 6379":      "redis://127.0.0.1:6379",
		"127.0.0.1:+6379":              "redis://127.0.0.1:6379",
		"localhost:6379":               "redis://localhost:6379",
		"u:pw@127.0.0.1:6380":          "redis://127.0.0.1:6380",
		"rediss://u:pw@127.0.0.1:1x/3": "rediss://127.0.0.1:6379",
		"redis://[::1]:+1":             "redis://[::1]:6379",
		"redis://127.0.0.1:6379:6379":  "redis://127.0.0.1:6379",
		"redis://127.0.0.1:0":          "redis://127.0.0.1:6379",
		"redis://127.0.0.1:65536":      "redis://127.0.0.1:6379",
		"redis:// 127.0.0.1:1":         "redis://10.0.0.3:6379",
		"redis://a b:1":                "redis://10.0.0.3:6379",
		"redis://%zz:1":                "redis://10.0.0.3:6379",
		"redis://:6379":                "redis://10.0.0.3:6379",
	} {
		_, err := fleetbudget.New(fleetbudget.Options{URL: bad})
		if err == nil {
			t.Errorf("New(URL %q) = nil error, want one", bad)
			continue
		}
		_, example, ok := strings.Cut(err.Error(), `e.g. "`)
		example, _, _ = strings.Cut(example, `"`)
		if !ok || example != want {
			t.Errorf("New(URL %q): %v\n\twant the example %q", bad, err, want)
			continue
		}
		f, eerr := fleetbudget.New(fleetbudget.Options{URL: example})
		if f != nil {
			f.Close() // no budget: it dials nothing
		}
		if eerr != nil {
			t.Errorf("New(URL %q): %v\n\tits example %q: %v; want an example New accepts", bad, err, example, eerr)
		}
		if strings.Contains(err.Error(), "pw") {
			t.Errorf("New(URL %q): the error shows the password: %v", bad, err)
		}
	}
}
