package gaxretry_test

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	btadmin "cloud.google.com/go/bigtable/admin/apiv2"
	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/bigtable/bttest"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	gax "github.com/googleapis/gax-go/v2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/gaxretry"
	"github.com/platformkit/grpcbackoff/interceptor"
)

// quick retries 4 times after 50, 100, 200, 200 ms: well within a 3 s
// deadline, so that the attempts end by MaxAttempts, not by the deadline.
func quick() grpcbackoff.Policy {
	p := grpcbackoff.DefaultPolicy()
	p.Initial, p.Max, p.Jitter, p.MaxAttempts = 50*time.Millisecond, 200*time.Millisecond, 0, 5
	return p
}

// attempts counts the attempts that reach the wire, by method: its dial
// option installs an interceptor inside ours (chained after it).
type attempts struct {
	mu sync.Mutex
	n  map[string]int
}

func (a *attempts) option() option.ClientOption {
	a.n = make(map[string]int)
	return option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			a.mu.Lock()
			a.n[method[strings.LastIndexByte(method, '/')+1:]]++
			a.mu.Unlock()
			return invoker(ctx, method, req, reply, cc, opts...)
		}))
}

func (a *attempts) of(method string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n[method]
}

// fakeEndpoint reaches an in-process fake server over loopback TCP.
func fakeEndpoint(addr string) []option.ClientOption {
	return []option.ClientOption{
		option.WithEndpoint(addr),
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
	}
}

func standard(t *testing.T, opts ...interceptor.Option) []option.ClientOption {
	t.Helper()
	cos, err := gaxretry.ClientOptions(quick(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return cos
}

// getTopic runs GetTopic for 3 s against a Pub/Sub fake whose GetTopic
// always fails with UNAVAILABLE, with the platform's options (nil: none),
// adopting the client's CallOptions or not, and returns the error and the
// attempts sent.
func getTopic(t *testing.T, platform []option.ClientOption, adopt bool) (int, error) {
	srv := pstest.NewServer(pstest.WithErrorInjection("GetTopic", codes.Unavailable, "fake outage"))
	defer srv.Close()
	var a attempts
	opts := append(append(append([]option.ClientOption(nil), platform...), fakeEndpoint(srv.Addr)...), a.option())
	ctx := t.Context()
	c, err := pubsub.NewClient(ctx, "proj", opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if adopt {
		if err := gaxretry.Adopt(c.TopicAdminClient.CallOptions); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = c.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: "projects/proj/topics/t"})
	return a.of("GetTopic"), err
}

func TestPubSubAdoptOneRetryLayer(t *testing.T) {
	n, err := getTopic(t, standard(t), true)
	var ge *grpcbackoff.Error
	if !errors.As(err, &ge) || ge.Reason != grpcbackoff.ReasonExhausted || status.Code(err) != codes.Unavailable {
		t.Errorf("GetTopic: err = %v (%T), want a *grpcbackoff.Error, attempts exhausted", err, err)
	}
	if n != quick().MaxAttempts {
		t.Errorf("GetTopic: %d attempts, want exactly MaxAttempts = %d", n, quick().MaxAttempts)
	}
}

// Without Adopt, the client's own gax retry multiplies our attempts, and
// the call ends with gax's deadline error; the figures are logged.
func TestPubSubAttemptsMultiplyWithoutAdopt(t *testing.T) {
	if testing.Short() {
		t.Skip("6 s of real time")
	}
	alone, errAlone := getTopic(t, nil, false)
	both, errBoth := getTopic(t, standard(t), false)
	t.Logf("GetTopic, always UNAVAILABLE, 3 s: client alone %d attempts (%v); with ClientOptions, without Adopt %d attempts (%v)", alone, errAlone, both, errBoth)
	if both <= quick().MaxAttempts || both <= alone {
		t.Errorf("with both retry layers: %d attempts, want more than the client alone (%d) and more than MaxAttempts", both, alone)
	}
	var ge *grpcbackoff.Error
	if errors.As(errBoth, &ge) && ge.Reason == grpcbackoff.ReasonExhausted {
		t.Errorf("with both layers the call ended as ours: %v", errBoth)
	}
}

// Bigtable's table admin client (its CallOptions retry GetTable on
// UNAVAILABLE) against bttest with GetTable always UNAVAILABLE.
func TestBigtableAdminAdoptOneRetryLayer(t *testing.T) {
	for _, adopt := range []bool{false, true} {
		var gets atomic.Int64
		srv, err := bttest.NewServer("127.0.0.1:0", grpc.ChainUnaryInterceptor(
			func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
				if strings.HasSuffix(info.FullMethod, "/GetTable") {
					gets.Add(1)
					return nil, status.Error(codes.Unavailable, "fake outage")
				}
				return handler(ctx, req)
			}))
		if err != nil {
			t.Fatal(err)
		}
		c, err := btadmin.NewBigtableTableAdminClient(t.Context(), append(standard(t), fakeEndpoint(srv.Addr)...)...)
		if err != nil {
			t.Fatal(err)
		}
		if adopt {
			if err := gaxretry.Adopt(c.CallOptions); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		_, err = c.GetTable(ctx, &adminpb.GetTableRequest{Name: "projects/p/instances/i/tables/t"})
		cancel()
		c.Close()
		srv.Close()
		var ge *grpcbackoff.Error
		isOurs := errors.As(err, &ge) && ge.Reason == grpcbackoff.ReasonExhausted
		t.Logf("Bigtable admin GetTable, adopt=%v: %d attempts, err %v", adopt, gets.Load(), err)
		if adopt && (!isOurs || gets.Load() != int64(quick().MaxAttempts)) {
			t.Errorf("adopted: %d attempts, err %v; want exactly %d and a *grpcbackoff.Error", gets.Load(), err, quick().MaxAttempts)
		}
		if !adopt && gets.Load() <= int64(quick().MaxAttempts) {
			t.Errorf("not adopted: %d attempts, want more than MaxAttempts (both layers retry)", gets.Load())
		}
	}
}

// incrementThenFail is a Bigtable fake that applies ReadModifyWriteRow and
// then answers UNAVAILABLE, as a server whose answer is lost would.
func incrementThenFail(t *testing.T) (addr string, rmw *atomic.Int64) {
	rmw = new(atomic.Int64)
	srv, err := bttest.NewServer("127.0.0.1:0", grpc.ChainUnaryInterceptor(
		func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			resp, err := handler(ctx, req)
			if strings.HasSuffix(info.FullMethod, "/ReadModifyWriteRow") {
				rmw.Add(1)
				return nil, status.Error(codes.Unavailable, "answer lost")
			}
			return resp, err
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv.Addr, rmw
}

// counterAfterOneIncrement creates table t with family f on a fresh fake,
// increments one counter once with the platform's options, and returns the
// counter's value as read back, and how many increments the server saw.
func counterAfterOneIncrement(t *testing.T, platform []option.ClientOption) (value int64, sent int64, err error) {
	addr, rmw := incrementThenFail(t)
	ctx := t.Context()
	opts := append(append([]option.ClientOption(nil), platform...), fakeEndpoint(addr)...)
	admin, aerr := bigtable.NewAdminClient(ctx, "p", "i", opts...)
	if aerr != nil {
		t.Fatal(aerr)
	}
	defer admin.Close()
	if err := admin.CreateTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateColumnFamily(ctx, "t", "f"); err != nil {
		t.Fatal(err)
	}
	c, cerr := bigtable.NewClientWithConfig(ctx, "p", "i", bigtable.ClientConfig{
		MetricsProvider: bigtable.NoopMetricsProvider{}, DisableSession: true,
	}, opts...)
	if cerr != nil {
		t.Fatal(cerr)
	}
	defer c.Close()
	tbl := c.Open("t")
	m := bigtable.NewReadModifyWrite()
	m.Increment("f", "n", 1)
	_, err = tbl.ApplyReadModifyWrite(ctx, "row", m)
	row, rerr := tbl.ReadRow(ctx, "row", bigtable.RowFilter(bigtable.LatestNFilter(1)))
	if rerr != nil {
		t.Fatal(rerr)
	}
	if items := row["f"]; len(items) == 1 && len(items[0].Value) == 8 {
		value = int64(binary.BigEndian.Uint64(items[0].Value))
	}
	return value, rmw.Load(), err
}

func TestBigtableIncrementNotDuplicated(t *testing.T) {
	value, sent, err := counterAfterOneIncrement(t, standard(t))
	if value != 1 || sent != 1 {
		t.Errorf("standard options: counter = %d after %d increments sent, want 1 and 1", value, sent)
	}
	if status.Code(err) != codes.Unavailable {
		t.Errorf("err = %v, want the attempt's UNAVAILABLE", err)
	}

	// The opt-in retries it anyway: every attempt is applied.
	value, sent, _ = counterAfterOneIncrement(t, standard(t, interceptor.WithNonIdempotentRetries()))
	if want := int64(quick().MaxAttempts); value != want || sent != want {
		t.Errorf("WithNonIdempotentRetries: counter = %d after %d increments sent, want %d and %d", value, sent, want, want)
	}
}

func TestAdoptBadInput(t *testing.T) {
	type wrongField struct {
		Get  []gax.CallOption
		Name string
	}
	var nilPtr *btadmin.BigtableTableAdminCallOptions
	for _, tc := range []struct {
		in   any
		want string
	}{
		{nil, "gaxretry: Adopt(<nil>): want a non-nil pointer to a client's CallOptions struct"},
		{nilPtr, "gaxretry: Adopt(*admin.BigtableTableAdminCallOptions): want a non-nil pointer to a client's CallOptions struct"},
		{btadmin.BigtableTableAdminCallOptions{}, "gaxretry: Adopt(admin.BigtableTableAdminCallOptions): want a non-nil pointer to a client's CallOptions struct"},
		{&wrongField{}, "gaxretry: Adopt(*gaxretry_test.wrongField): field Name is string, want an exported []gax.CallOption"},
	} {
		if err := gaxretry.Adopt(tc.in); err == nil || err.Error() != tc.want {
			t.Errorf("Adopt(%T) = %v, want %q", tc.in, err, tc.want)
		}
	}
}

// Adopt keeps each field's gRPC options, removes gax's retry where there is
// one, changes nothing on a second call, and leaves a client with no retry
// configured anywhere as it is.
func TestAdoptFields(t *testing.T) {
	type callOptions struct {
		Get    []gax.CallOption
		Mutate []gax.CallOption
	}
	keep := grpc.MaxCallRecvMsgSize(1 << 20)
	co := &callOptions{
		Get:    []gax.CallOption{gax.WithGRPCOptions(keep), gax.WithRetry(func() gax.Retryer { return gax.OnCodes([]codes.Code{codes.Unavailable}, gax.Backoff{}) })},
		Mutate: []gax.CallOption{gax.WithTimeout(time.Second)},
	}
	for range 2 {
		if err := gaxretry.Adopt(co); err != nil {
			t.Fatal(err)
		}
	}
	resolve := func(opts []gax.CallOption) gax.CallSettings {
		var s gax.CallSettings
		for _, o := range opts {
			o.Resolve(&s)
		}
		return s
	}
	get, mutate := resolve(co.Get), resolve(co.Mutate)
	if get.Retry == nil || get.Retry() == nil {
		t.Fatal("Get: no Retryer: code that wraps the client's Retryer (the Pub/Sub publisher) would call a nil one")
	}
	if d, ok := get.Retry().Retry(status.Error(codes.Unavailable, "down")); ok {
		t.Errorf("Get: gax's retry is still on: Retry(UNAVAILABLE) = %v, true", d)
	}
	if len(get.GRPC) != 2 || get.GRPC[0] != keep || get.GRPC[1] != interceptor.CallIdempotent() {
		t.Errorf("Get: gRPC options %v, want the field's own then CallIdempotent", get.GRPC)
	}
	if mutate.Retry != nil || len(mutate.GRPC) != 1 || len(co.Mutate) != 2 {
		t.Errorf("Mutate: %d options, gRPC options %v, want one NoRetry added once", len(co.Mutate), mutate.GRPC)
	}

	none := &callOptions{Get: []gax.CallOption{gax.WithTimeout(time.Second)}}
	if err := gaxretry.Adopt(none); err != nil || len(none.Get) != 1 || len(none.Mutate) != 0 {
		t.Errorf("Adopt of a client with no retry anywhere changed it: %v, %v", err, none)
	}
}

// Bigtable's data client retries MutateRow itself, in code no CallOptions
// reach: Adopt cannot take its retry over. MutateRow is a custom method
// (":mutateRow"), not idempotent as far as its descriptor says, so with the
// standard options the interceptor does not add attempts after UNAVAILABLE:
// the client's own retry is the only layer. The figures are logged.
func TestBigtableMutateRowOneRetryLayer(t *testing.T) {
	if testing.Short() {
		t.Skip("6 s of real time")
	}
	run := func(platform []option.ClientOption) (int64, error) {
		var mutates atomic.Int64
		srv, err := bttest.NewServer("127.0.0.1:0", grpc.ChainUnaryInterceptor(
			func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
				if strings.HasSuffix(info.FullMethod, "/MutateRow") {
					mutates.Add(1)
					return nil, status.Error(codes.Unavailable, "fake outage")
				}
				return handler(ctx, req)
			}))
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		opts := append(append([]option.ClientOption(nil), platform...), fakeEndpoint(srv.Addr)...)
		c, err := bigtable.NewClientWithConfig(t.Context(), "p", "i", bigtable.ClientConfig{
			MetricsProvider: bigtable.NoopMetricsProvider{}, DisableSession: true,
		}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		m := bigtable.NewMutation()
		m.Set("f", "c", 1000, []byte("v"))
		err = c.Open("t").Apply(ctx, "row", m)
		return mutates.Load(), err
	}
	var ours, oursOptIn atomic.Int64
	count := func(n *atomic.Int64) interceptor.Option {
		return interceptor.WithOnRetry(func(r interceptor.Retry) {
			if !r.Throttled {
				n.Add(1)
			}
		})
	}
	alone, errAlone := run(nil)
	withOurs, errOurs := run(standard(t, count(&ours)))
	withOptIn, errOptIn := run(standard(t, count(&oursOptIn), interceptor.WithNonIdempotentRetries()))
	t.Logf("MutateRow, always UNAVAILABLE, 3 s: client alone %d attempts (%v); with ClientOptions %d, %d of them retries of ours (%v); with WithNonIdempotentRetries %d, %d of ours (%v)",
		alone, errAlone, withOurs, ours.Load(), errOurs, withOptIn, oursOptIn.Load(), errOptIn)
	if ours.Load() != 0 {
		t.Errorf("with ClientOptions: the interceptor retried MutateRow %d times, want 0 (only the client's own retry)", ours.Load())
	}
	if oursOptIn.Load() == 0 {
		t.Errorf("with WithNonIdempotentRetries: the interceptor never retried MutateRow")
	}
}

// The README's Pub/Sub recipe, on the publisher's path: Publish meets
// UNAVAILABLE. The publisher wraps the Retryer of the client's Publish
// CallOptions in its own and calls it on its background goroutine, so a
// nil Retryer from Adopt crashed the process there.
func TestPubSubPublisherAdopted(t *testing.T) {
	srv := pstest.NewServer(pstest.WithErrorInjection("Publish", codes.Unavailable, "fake outage"))
	defer srv.Close()
	ctx := t.Context()
	c, err := pubsub.NewClient(ctx, "proj", append(standard(t), fakeEndpoint(srv.Addr)...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := gaxretry.Adopt(c.TopicAdminClient.CallOptions); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.GServer.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/proj/topics/t"}); err != nil {
		t.Fatal(err)
	}
	p := c.Publisher("projects/proj/topics/t")
	defer p.Stop()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = p.Publish(ctx, &pubsub.Message{Data: []byte("m")}).Get(ctx)
	if status.Code(err) != codes.Unavailable && status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("Publish: err = %v, want the server's UNAVAILABLE or the deadline", err)
	}
}
