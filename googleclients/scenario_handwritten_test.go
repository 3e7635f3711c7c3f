package googleclients_test

// Issue 26's hand-written paths: the Google clients whose own code retries
// (the Pub/Sub publisher and subscriber, Bigtable's and Spanner's data
// clients, Firestore, Storage over gRPC, op.Wait's polling), run alone and
// with the platform's options against their in-process fakes (or a scripted
// loopback server) behind a bufconntest.Proxy. Each run counts two things:
// the attempts that reach the wire (the Proxy), and the client's own
// attempts (an interceptor given before the platform's options, which sees
// each attempt of the client once, whatever the library under it does).
// One layer per code: the wire sees at most the client's own attempts plus
// MaxAttempts − 1, and exactly the client's own for a code the client
// retries.

import (
	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	redis "cloud.google.com/go/redis/apiv1"
	"cloud.google.com/go/redis/apiv1/redispb"
	"cloud.google.com/go/spanner"
	"context"
	"encoding/binary"
	"fmt"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff/internal/bufconntest"
	"github.com/platformkit/grpcbackoff/redistest"
)

// ownAttempts counts the attempts a client makes by itself, by method: as an
// interceptor installed before the library's sees them.
type ownAttempts struct {
	mu sync.Mutex
	n  map[string]int
}

func newOwnAttempts() *ownAttempts { return &ownAttempts{n: make(map[string]int)} }

func (o *ownAttempts) add(method string) {
	o.mu.Lock()
	o.n[method]++
	o.mu.Unlock()
}

// of returns the attempts of the methods whose name ends with suffix.
func (o *ownAttempts) of(suffix string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return bufconntest.SumBySuffix(o.n, suffix)
}

// options returns the client options that count; given before the
// platform's, their interceptors run first (grpc-go chains interceptors in
// the order given, and google.golang.org/api gives dial options in theirs).
func (o *ownAttempts) options() []option.ClientOption {
	return []option.ClientOption{
		option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			o.add(method)
			return invoker(ctx, method, req, reply, cc, opts...)
		})),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			o.add(method)
			return streamer(ctx, desc, cc, method, opts...)
		})),
	}
}

// counting returns the options of a client of the fake at addr that counts
// its own attempts in own: own's options, then the platform's (none for the
// client alone), then the fake's endpoint.
func counting(own *ownAttempts, platform []option.ClientOption, addr string) []option.ClientOption {
	return with(append(own.options(), platform...), addr)
}

// failFirst fails the first n attempts of the methods whose name ends with
// suffix with code, counted from now.
func failFirst(suffix string, n int, code codes.Code) func(string, int) error {
	return failFirstWith(suffix, n, func() error { return status.Error(code, fmt.Sprintf("fake %v", code)) })
}

// failFirstHinted is failFirst with a RetryInfo of 10 ms on each error: the
// server says when to retry.
func failFirstHinted(suffix string, n int, code codes.Code) func(string, int) error {
	return failFirstWith(suffix, n, func() error {
		st, err := status.New(code, fmt.Sprintf("fake %v, retry in 10ms", code)).WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(10 * time.Millisecond)})
		if err != nil {
			panic(err)
		}
		return st.Err()
	})
}

// failFirstWith fails the first n attempts of the methods whose name ends
// with suffix, counted from now, with the error of fail.
func failFirstWith(suffix string, n int, fail func() error) func(string, int) error {
	var seen atomic.Int32
	return func(method string, _ int) error {
		if strings.HasSuffix(method, suffix) && int(seen.Add(1)) <= n {
			return fail()
		}
		return nil
	}
}

// layers is what one run put on the wire for one method.
type layers struct {
	wire, own int // attempts on the wire; the client's own attempts
}

func (l layers) String() string {
	return fmt.Sprintf("%d attempts on the wire, %d of the client", l.wire, l.own)
}

// oneLayer checks that the attempts of a run come from one layer per code:
// at most the client's own attempts plus MaxAttempts − 1, and, for a code
// the client retries by itself (clients), exactly the client's own.
func oneLayer(t *testing.T, what string, l layers, clients bool) {
	t.Helper()
	if limit := l.own + quick().MaxAttempts - 1; l.wire > limit {
		t.Errorf("%s: %v; want at most %d (the client's own + MaxAttempts − 1): two layers", what, l, limit)
	}
	if clients && l.wire != l.own {
		t.Errorf("%s: %v; want each of the client's attempts one attempt on the wire: the code is the client's", what, l)
	}
}

// TestHandwrittenPublish: the publisher's Publish meeting RESOURCE_EXHAUSTED
// twice, then UNAVAILABLE twice. The publisher retries both by itself
// (publishRetryer): with the options it stays the only layer for them, and
// the message is stored once.
func TestHandwrittenPublish(t *testing.T) {
	t.Parallel()
	for _, code := range []codes.Code{codes.ResourceExhausted, codes.Unavailable} {
		run := func(platform []option.ClientOption) (layers, int, error) {
			srv, proxy := pubsubFake(t)
			proxy.FailWith(failFirst("/Publish", 2, code))
			own := newOwnAttempts()
			c, err := pubsub.NewClient(t.Context(), "proj", counting(own, platform, proxy.Addr)...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			p := c.Publisher(topic)
			defer p.Stop()
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			_, err = p.Publish(ctx, &pubsub.Message{Data: []byte("m")}).Get(ctx)
			return layers{proxy.Attempts("/Publish"), own.of("/Publish")}, len(srv.Messages()), err
		}
		for _, setup := range []struct {
			name     string
			platform []option.ClientOption
		}{{"alone", nil}, {"options", standard(t)}} {
			l, stored, err := run(setup.platform)
			what := fmt.Sprintf("Publish, %v ×2, %s", code, setup.name)
			t.Logf("%s: %v, %d stored, err %v", what, l, stored, err)
			if err != nil || stored != 1 {
				t.Errorf("%s: err %v, %d messages stored; want success, stored once", what, err, stored)
			}
			oneLayer(t, what, l, true)
		}
	}
}

// TestHandwrittenSubscriber: the subscriber's Receive, its StreamingPull
// refused with RESOURCE_EXHAUSTED twice (the subscriber does not retry it on
// purpose, google-cloud-go issue 1166: the library leaves it to that choice,
// one attempt), then failing with UNAVAILABLE twice (the subscriber reopens
// the stream by itself), then its Acknowledge refused with
// RESOURCE_EXHAUSTED twice. Every message is delivered and acked, none
// twice, as alone or better.
func TestHandwrittenSubscriber(t *testing.T) {
	t.Parallel()
	const messages = 5
	type result struct {
		pull, ack layers
		got       map[string]int
		acked     int
		err       error
	}
	run := func(platform []option.ClientOption, fault func(string, int) error, exactlyOnce bool) result {
		srv, proxy := pubsubFake(t)
		sub := subscription
		if exactlyOnce {
			// A subscription of its own: the library's record of which
			// subscriptions have exactly-once delivery is the process's,
			// and the tests run beside one another.
			sub = subscription + "-exactly-once"
			if _, err := srv.GServer.CreateSubscription(t.Context(), &pubsubpb.Subscription{Name: sub, Topic: topic, AckDeadlineSeconds: 10, EnableExactlyOnceDelivery: true}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range messages {
			srv.Publish(topic, fmt.Appendf(nil, "m%d", i), nil)
		}
		proxy.FailWith(fault)
		own := newOwnAttempts()
		c, err := pubsub.NewClient(t.Context(), "proj", counting(own, platform, proxy.Addr)...)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s := c.Subscriber(sub)
		s.ReceiveSettings.NumGoroutines = 1
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		var mu sync.Mutex
		res := result{got: make(map[string]int)}
		confirmed := 0
		res.err = s.Receive(ctx, func(_ context.Context, m *pubsub.Message) {
			if !exactlyOnce {
				m.Ack()
			}
			mu.Lock()
			res.got[string(m.Data)]++
			if !exactlyOnce && len(res.got) == messages {
				cancel()
			}
			mu.Unlock()
			if exactlyOnce {
				// The ack's result comes once the subscriber's retries
				// (retryAcks) are done: Receive goes on till then.
				if _, err := m.AckWithResult().Get(ctx); err == nil {
					mu.Lock()
					if confirmed++; confirmed == messages {
						cancel()
					}
					mu.Unlock()
				}
			}
		})
		for _, m := range srv.Messages() {
			if m.Acks > 0 {
				res.acked++
			}
		}
		res.pull = layers{proxy.Attempts("/StreamingPull"), own.of("/StreamingPull")}
		res.ack = layers{proxy.Attempts("/Acknowledge"), own.of("/Acknowledge")}
		return res
	}
	for _, tc := range []struct {
		name        string
		fault       func() func(string, int) error // a new fault for each run
		refused     bool                           // StreamingPull is refused, as the subscriber chooses: Receive ends with it
		clients     bool                           // the code is the subscriber's to retry
		suffix      string
		exactlyOnce bool // the subscription has exactly-once delivery
	}{
		{"StreamingPull RESOURCE_EXHAUSTED ×2", func() func(string, int) error { return failFirst("/StreamingPull", 2, codes.ResourceExhausted) }, true, true, "/StreamingPull", false},
		{"StreamingPull UNAVAILABLE ×2", func() func(string, int) error { return failFirst("/StreamingPull", 2, codes.Unavailable) }, false, true, "/StreamingPull", false},
		// The subscriber retries Acknowledge's RESOURCE_EXHAUSTED only with
		// exactly-once delivery (retryAcks); on this subscription it does
		// not, and the library must be the one layer. Failing at 9ee8684:
		// the library's statement of the subscriber's acks
		// (internal/cloudclients/handwritten.go) leaves RESOURCE_EXHAUSTED
		// to it, so nobody retries it and the acks are lost (the messages
		// will be delivered again).
		{"Acknowledge RESOURCE_EXHAUSTED ×2", func() func(string, int) error { return failFirst("/Acknowledge", 2, codes.ResourceExhausted) }, false, false, "/Acknowledge", false},
		{"Acknowledge UNAVAILABLE ×2", func() func(string, int) error { return failFirst("/Acknowledge", 2, codes.Unavailable) }, false, true, "/Acknowledge", false},
		// With exactly-once delivery the subscriber retries it (retryAcks),
		// which the library learns from StreamingPull's responses, as the
		// subscriber does: one layer, the subscriber's.
		{"Acknowledge RESOURCE_EXHAUSTED ×2, exactly-once delivery", func() func(string, int) error { return failFirst("/Acknowledge", 2, codes.ResourceExhausted) }, false, true, "/Acknowledge", true},
	} {
		alone := run(nil, tc.fault(), tc.exactlyOnce)
		opts := run(standard(t), tc.fault(), tc.exactlyOnce)
		for _, r := range []struct {
			name string
			res  result
		}{{"alone", alone}, {"options", opts}} {
			t.Logf("%s, %s: StreamingPull %v; Acknowledge %v; received %v, %d acked; Receive: %v", tc.name, r.name, r.res.pull, r.res.ack, r.res.got, r.res.acked, r.res.err)
		}
		l := opts.pull
		if tc.suffix == "/Acknowledge" {
			l = opts.ack
		}
		oneLayer(t, tc.name+", options", l, tc.clients)
		if tc.refused {
			// The subscriber's choice: its stream's Recv does not retry
			// RESOURCE_EXHAUSTED (streamingPullRetryer, google-cloud-go#1166),
			// its open does (openWithRetry's defaultRetryer). Alone, the
			// failure reaches one or the other as grpc-go's stream happens
			// to surface it (1 attempt in 5 of 6 runs, 2 in the sixth);
			// under the options always Recv (1 attempt in 6 of 6): never
			// more than alone, every attempt the subscriber's own.
			if status.Code(opts.err) != codes.ResourceExhausted || opts.pull.wire > alone.pull.wire || opts.pull.wire != opts.pull.own {
				t.Errorf("%s: with the options StreamingPull %v, Receive %v; alone %v, %v: want the subscriber's choice, no more attempts than alone", tc.name, opts.pull, opts.err, alone.pull, alone.err)
			}
			continue
		}
		if opts.err != nil || len(opts.got) != messages || opts.acked != messages {
			t.Errorf("%s, options: received %v, %d of %d acked, Receive: %v; want every message received once and acked", tc.name, opts.got, opts.acked, messages, opts.err)
		}
		for m, n := range opts.got {
			if n != 1 {
				t.Errorf("%s, options: %s received %d times", tc.name, m, n)
			}
		}
	}
}

// TestHandwrittenOperationWait: op.Wait of a Cloud Redis CreateInstance,
// its polling (GetOperation through the client's LROClient, which retries
// UNAVAILABLE by itself) refused with RESOURCE_EXHAUSTED twice, then failing
// with UNAVAILABLE twice. The library retries the first, the LRO client the
// second, and the instance is created.
func TestHandwrittenOperationWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code    codes.Code
		clients bool
	}{{codes.ResourceExhausted, false}, {codes.Unavailable, true}} {
		run := func(platform []option.ClientOption) (layers, error) {
			srv := redistest.NewServer()
			t.Cleanup(srv.Close)
			proxy := bufconntest.NewProxy(t, "redistest", grpc.WithContextDialer(srv.Dialer()))
			own := newOwnAttempts()
			c, err := redis.NewCloudRedisClient(t.Context(), counting(own, platform, proxy.Addr)...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			op, err := c.CreateInstance(t.Context(), &redispb.CreateInstanceRequest{Parent: parent, InstanceId: "cache",
				Instance: &redispb.Instance{Tier: redispb.Instance_BASIC, MemorySizeGb: 1}})
			if err != nil {
				t.Fatal(err)
			}
			proxy.FailWith(failFirst("/GetOperation", 2, tc.code))
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			inst, err := c.CreateInstanceOperation(op.Name()).Wait(ctx)
			if err == nil && inst.GetName() != parent+"/instances/cache" {
				err = fmt.Errorf("instance %v", inst)
			}
			return layers{proxy.Attempts("/GetOperation"), own.of("/GetOperation")}, err
		}
		alone, errAlone := run(nil)
		opts, err := run(standard(t))
		what := fmt.Sprintf("op.Wait, GetOperation %v ×2", tc.code)
		t.Logf("%s: alone %v, err %v; options %v, err %v", what, alone, errAlone, opts, err)
		if err != nil {
			t.Errorf("%s, options: %v; want the instance", what, err)
		}
		oneLayer(t, what+", options", opts, tc.clients)
	}
}

// TestHandwrittenBigtable: the Bigtable data client's ReadRows (a scan of
// r0..r9) and ReadModifyWriteRow (an increment), each refused with
// RESOURCE_EXHAUSTED twice, then failing with UNAVAILABLE twice. The client
// retries neither RESOURCE_EXHAUSTED (without RetryInfo) nor, for the
// increment, anything: the library retries RESOURCE_EXHAUSTED, refused so
// never applied, and every row arrives once, the increment is applied once.
// ReadRows' UNAVAILABLE is the client's (it resumes after the last row); the
// increment's is nobody's: it may have been applied (Safety).
func TestHandwrittenBigtable(t *testing.T) {
	t.Parallel()
	type result struct {
		l      layers
		keys   []string
		counts int64
		err    error
	}
	run := func(platform []option.ClientOption, suffix string, code codes.Code, hinted bool) result {
		proxy := bigtableFake(t, nil, nil)
		fault := failFirst(suffix, 2, code)
		if hinted {
			fault = failFirstHinted(suffix, 2, code)
		}
		proxy.FailWith(fault)
		own := newOwnAttempts()
		c, err := bigtable.NewClientWithConfig(t.Context(), "p", "i",
			bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}, DisableDirectAccess: true, DisableSession: true},
			counting(own, platform, proxy.Addr)...)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		tbl := c.Open(table)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		var res result
		if suffix == "/ReadRows" {
			res.err = tbl.ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
				res.keys = append(res.keys, r.Key())
				return true
			})
		} else {
			m := bigtable.NewReadModifyWrite()
			m.Increment("f", "n", 1)
			_, res.err = tbl.ApplyReadModifyWrite(ctx, "r0", m)
		}
		res.l = layers{proxy.Attempts(suffix), own.of(suffix)}
		proxy.FailWith(nil)
		row, err := tbl.ReadRow(ctx, "r0", bigtable.RowFilter(bigtable.ColumnFilter("n")))
		if err != nil {
			t.Fatal(err)
		}
		for _, item := range row["f"] {
			res.counts = int64(binary.BigEndian.Uint64(item.Value))
		}
		return res
	}
	for _, tc := range []struct {
		suffix  string
		code    codes.Code
		hinted  bool // the errors carry RetryInfo
		clients bool // the code is the client's
		fails   bool // nobody retries it
	}{
		{"/ReadRows", codes.ResourceExhausted, false, false, false},
		// With RetryInfo, the client retries any code (bigtableRetryer).
		{"/ReadRows", codes.ResourceExhausted, true, true, false},
		{"/ReadRows", codes.Unavailable, false, true, false},
		{"/ReadModifyWriteRow", codes.ResourceExhausted, false, false, false},
		{"/ReadModifyWriteRow", codes.Unavailable, false, false, true},
	} {
		what := fmt.Sprintf("%s, %v ×2", tc.suffix[1:], tc.code)
		if tc.hinted {
			what += " with RetryInfo"
		}
		alone := run(nil, tc.suffix, tc.code, tc.hinted)
		opts := run(standard(t), tc.suffix, tc.code, tc.hinted)
		t.Logf("%s: alone %v, err %v; options %v, err %v", what, alone.l, alone.err, opts.l, opts.err)
		oneLayer(t, what+", options", opts.l, tc.clients)
		switch {
		case tc.fails:
			if opts.err == nil || opts.l.wire != 1 || opts.counts != 0 {
				t.Errorf("%s, options: %v, err %v, counter %d; want one attempt, its error, nothing applied", what, opts.l, opts.err, opts.counts)
			}
		case opts.err != nil:
			t.Errorf("%s, options: %v; want success", what, opts.err)
		case tc.suffix == "/ReadRows" && fmt.Sprint(opts.keys) != "[r0 r1 r2 r3 r4 r5 r6 r7 r8 r9]":
			t.Errorf("%s, options: rows %v; want r0..r9, each once", what, opts.keys)
		case tc.suffix == "/ReadModifyWriteRow" && opts.counts != 1:
			t.Errorf("%s, options: counter %d; want the increment applied once", what, opts.counts)
		}
	}
}

// TestHandwrittenSpanner: the Spanner data client's query (its resumable
// ExecuteStreamingSql) and Apply (its Commit), each refused with
// RESOURCE_EXHAUSTED twice, then failing with UNAVAILABLE twice. The query's
// RESOURCE_EXHAUSTED without RetryInfo is the library's (the client resumes
// only on UNAVAILABLE, INTERNAL, and RESOURCE_EXHAUSTED with the server's
// delay); Commit's both codes are the client's (its CallOptions). The query
// returns its row, once; the write is applied.
func TestHandwrittenSpanner(t *testing.T) {
	t.Parallel()
	run := func(platform []option.ClientOption, suffix string, code codes.Code) (layers, int64, error) {
		proxy := spannerFake(t)
		own := newOwnAttempts()
		c, err := spanner.NewClientWithConfig(t.Context(), database, spanner.ClientConfig{DisableNativeMetrics: true}, counting(own, platform, proxy.Addr)...)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		proxy.FailWith(failFirst(suffix, 2, code))
		before, ownBefore := proxy.Attempts(suffix), own.of(suffix)
		var v int64
		if suffix == "/ExecuteStreamingSql" {
			var rows int
			err = c.Single().Query(ctx, spanner.Statement{SQL: "SELECT V FROM T"}).Do(func(r *spanner.Row) error {
				rows++
				return r.Column(0, &v)
			})
			if err == nil && rows != 1 {
				err = fmt.Errorf("%d rows, want 1", rows)
			}
		} else {
			_, err = c.Apply(ctx, []*spanner.Mutation{spanner.Update("T", []string{"K", "V"}, []any{"k", 2})})
			l := layers{proxy.Attempts(suffix) - before, own.of(suffix) - ownBefore}
			proxy.FailWith(nil)
			row, rerr := c.Single().ReadRow(ctx, "T", spanner.Key{"k"}, []string{"V"})
			if rerr != nil {
				t.Fatal(rerr)
			}
			if rerr := row.Column(0, &v); rerr != nil {
				t.Fatal(rerr)
			}
			return l, v, err
		}
		return layers{proxy.Attempts(suffix) - before, own.of(suffix) - ownBefore}, v, err
	}
	for _, tc := range []struct {
		suffix  string
		code    codes.Code
		clients bool // the code is the client's
		want    int64
	}{
		{"/ExecuteStreamingSql", codes.ResourceExhausted, false, 1},
		{"/ExecuteStreamingSql", codes.Unavailable, true, 1},
		{"/Commit", codes.ResourceExhausted, true, 2},
		{"/Commit", codes.Unavailable, true, 2},
	} {
		what := fmt.Sprintf("%s, %v ×2", tc.suffix[1:], tc.code)
		alone, _, errAlone := run(nil, tc.suffix, tc.code)
		opts, v, err := run(standard(t), tc.suffix, tc.code)
		t.Logf("%s: alone %v, err %v; options %v, err %v", what, alone, errAlone, opts, err)
		oneLayer(t, what+", options", opts, tc.clients)
		if err != nil || v != tc.want {
			t.Errorf("%s, options: V = %d, err %v; want %d and success", what, v, err, tc.want)
		}
	}
}
