package interceptor_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
	"github.com/platformkit/grpcbackoff/serviceconfig"
)

// getTopic is a method whose Google Cloud client (Pub/Sub's) retries
// UNAVAILABLE, UNKNOWN and ABORTED in its CallOptions, and not
// RESOURCE_EXHAUSTED.
const getTopic = "/google.pubsub.v1.Publisher/GetTopic"

// runQuery is a server stream whose client (Firestore's) retries only its
// opening, on UNAVAILABLE among others.
const runQuery = "/google.firestore.v1.Firestore/RunQuery"

// asClient returns ctx as a Google Cloud client's call carries it: with its
// x-goog-api-client.
func asClient(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "x-goog-api-client", "gl-go/1.26.0 gccl/2.8.1 gapic/2.8.1 gax/2.27.0 grpc/1.85.0")
}

func errsOf(cs ...codes.Code) []error {
	errs := make([]error, len(cs))
	for i, c := range cs {
		errs[i] = status.Error(c, c.String())
	}
	return errs
}

// One layer per code: for a code the client retries, one attempt and its
// error unchanged; for another code of the Policy, the Retrier's retries;
// the same method called otherwise (a generated stub on a connection of
// one's own, or another x-goog-api-client value) keeps the Policy for
// every code.
func TestClientRetriesPerCode(t *testing.T) {
	u, re := codes.Unavailable, codes.ResourceExhausted
	cases := []struct {
		name     string
		ctx      func(context.Context) context.Context
		errs     []error
		attempts int
		code     codes.Code
	}{
		{"client, U×2: the client's", asClient, errsOf(u, u), 1, u},
		{"client, RE×2: the Retrier's", asClient, errsOf(re, re), 3, codes.OK},
		{"client, RE then U: the Retrier's, then the client's", asClient, errsOf(re, u), 2, u},
		{"own stub, U×2", nil, errsOf(u, u), 3, codes.OK},
		{"wrapper's header, U×2", func(ctx context.Context) context.Context {
			return metadata.AppendToOutgoingContext(ctx, "x-goog-api-client", "gl-go/1.26.0 my-wrapper/1.0")
		}, errsOf(u, u), 3, codes.OK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				if tc.ctx != nil {
					ctx = tc.ctx(ctx)
				}
				s := &script{errs: tc.errs}
				err := interceptor.Unary(bufconntest.Exact())(ctx, getTopic, "req", new(string), nil, s.invoke)
				if len(s.times) != tc.attempts || status.Code(err) != tc.code {
					t.Errorf("%d attempts, err %v; want %d attempts, %v", len(s.times), err, tc.attempts, tc.code)
				}
				if tc.attempts == 1 && tc.code != codes.OK && err != s.errs[0] {
					t.Errorf("err = %v, want the server's error unchanged", err)
				}
			})
		})
	}
}

// gaxLike is a client's own retry loop, as gax.Invoke's: it calls again
// with the same request and context after a code it retries, up to max
// attempts, and counts its attempts. traced gives each attempt a context of
// its own over ctx, as gax.Invoke does with its tracing on.
func gaxLike(ctx context.Context, max int, retries codes.Code, traced bool, attempt func(context.Context) error) (calls int, err error) {
	for {
		calls++
		actx := ctx
		if traced {
			actx = context.WithValue(ctx, resendCount{}, calls-1)
		}
		err = attempt(actx)
		if status.Code(err) != retries || calls == max {
			return calls, err
		}
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return calls, ctx.Err()
		}
	}
}

type resendCount struct{}

// Layers never nest: under any interleaving of a code the client retries
// (UNAVAILABLE) and one the Retrier retries (RESOURCE_EXHAUSTED), the
// attempts of one call are at most the client's own plus MaxAttempts−1,
// whether or not each of the client's attempts has a context of its own.
func TestClientRetriesLayersNeverNest(t *testing.T) {
	for _, traced := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(1, 26))
		for i := range 200 {
			cs := make([]codes.Code, 1+rng.IntN(24))
			for j := range cs {
				cs[j] = []codes.Code{codes.Unavailable, codes.ResourceExhausted}[rng.IntN(2)]
			}
			clientMax := 1 + rng.IntN(6)
			synctest.Test(t, func(t *testing.T) {
				p := bufconntest.Exact()
				p.Initial, p.Max, p.MaxAttempts = time.Millisecond, time.Millisecond, 4
				ic := interceptor.Unary(p, interceptor.WithoutThrottle())
				s := &script{errs: errsOf(cs...)}
				req := new(string)
				calls, err := gaxLike(asClient(t.Context()), clientMax, codes.Unavailable, traced, func(ctx context.Context) error {
					return ic(ctx, getTopic, req, new(string), nil, s.invoke)
				})
				if len(s.times) > calls+p.MaxAttempts-1 {
					t.Errorf("traced %v, sequence %d %v, client attempts %d (at most %d): %d attempts reached the server, want at most %d (err %v)",
						traced, i, cs, calls, clientMax, len(s.times), calls+p.MaxAttempts-1, err)
				}
			})
		}
	}
}

// newMethod is a method of a service googleapis' files name, but not the
// method itself: a client newer than the files may retry any code of it,
// and the Retrier retries every code of its Policy.
const newMethod = "/google.pubsub.v1.Publisher/SomeNewMethod"

// getSecret is a method whose client (Secret Manager's) retries nothing.
const getSecret = "/google.cloud.secretmanager.v1.SecretManagerService/GetSecret"

// After the Retrier gave up on a client's call, a further attempt of the
// client (its retry of a code the Retrier retries too: a method newer than
// the files) is sent, once: the Retrier's retries across the client's
// attempts stay within MaxAttempts, and each attempt ends with its own
// error. (Before issue 33 the Retrier refused such an attempt at once
// with the error it gave up with, never sending it: a later call with the
// same request and context got another call's error.) Once the client's
// longest pause has passed, the call is forgotten: the next one with the
// same request and context is retried afresh.
func TestClientRetriesGaveUpSendsAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := bufconntest.Exact()
		p.MaxAttempts = 3
		ic := interceptor.Unary(p, interceptor.WithSafety(newMethod, interceptor.Idempotent))
		s := &script{errs: errsOf(codes.Unavailable, codes.Unavailable, codes.Unavailable, codes.Unavailable, codes.Unavailable, codes.Unavailable)}
		ctx, req := asClient(t.Context()), new(string)
		var errs []error
		calls, _ := gaxLike(ctx, 4, codes.Unavailable, false, func(ctx context.Context) error {
			err := ic(ctx, newMethod, req, new(string), nil, s.invoke)
			errs = append(errs, err)
			return err
		})
		// 3 attempts under the client's first, 1 under each of its 3 others.
		if len(s.times) != calls+p.MaxAttempts-1 || calls != 4 {
			t.Errorf("%d attempts of the client, %d on the wire; want 4 and 4 + 3 − 1", calls, len(s.times))
		}
		for i := 1; i < len(errs); i++ {
			if errs[i] == errs[0] || status.Code(errs[i]) != codes.Unavailable {
				t.Errorf("the client's attempt %d ended with %v; want its own attempt's UNAVAILABLE, not the first's", i+1, errs[i])
			}
		}
		time.Sleep(62 * time.Second) // Publisher's longest pause, 60 s, and the grace
		s = &script{errs: errsOf(codes.Unavailable, codes.Unavailable)}
		if err := ic(ctx, newMethod, req, new(string), nil, s.invoke); err != nil || len(s.times) != 3 {
			t.Errorf("the same request and context after the client's longest pause: err %v, %d attempts; want success after 3", err, len(s.times))
		}
	})
}

// The first case: a poller reuses one request and one context
// (that never ends) with two clients, of two servers, and one set of
// options. Server A is down: each call through A reaches it, MaxAttempts
// times (its client, Secret Manager's GetSecret, retries nothing); server B
// fails each call's first attempt: each call through B reaches B and
// succeeds. (Before: 3 attempts on A in all, the other calls refused from
// memory; B's calls answered with A's error.)
func TestClientRetriesTwoServersOneRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := bufconntest.Exact()
		p.MaxAttempts = 3
		ic := interceptor.Unary(p, interceptor.WithoutThrottle()) // 600 retries in a row: no budget pays for them
		a, b := lazyConn(t, "server-a"), lazyConn(t, "server-b")
		var onA, onB int
		invoke := func(_ context.Context, _ string, _, _ any, cc *grpc.ClientConn, _ ...grpc.CallOption) error {
			if cc == a {
				onA++
				return status.Error(codes.Unavailable, "server A is down")
			}
			if onB++; onB%2 == 1 {
				return status.Error(codes.Unavailable, "server B hiccup")
			}
			return nil
		}
		// Each call with a context of its own, as a generated client makes
		// one per call (gax.InsertMetadataIntoOutgoingContext): the same
		// context again is the client's resend of a call (issue 42).
		base, req := context.Background(), new(string)
		for i := range 200 {
			err := ic(asClient(base), getSecret, req, new(string), a, invoke)
			if status.Code(err) != codes.Unavailable || onA != 3*(i+1) {
				t.Fatalf("call %d through A: err %v, %d attempts on A in all; want UNAVAILABLE, %d", i+1, err, onA, 3*(i+1))
			}
		}
		for i := range 3 {
			if err := ic(asClient(base), getSecret, req, new(string), b, invoke); err != nil || onB != 2*(i+1) {
				t.Errorf("call %d through B: err %v, %d attempts on B in all; want success, %d", i+1, err, onB, 2*(i+1))
			}
		}
	})
}

// lazyConn returns a ClientConn to target that never dials: the calls of the
// tests that take it go to their invoker.
func lazyConn(t *testing.T, target string) *grpc.ClientConn {
	cc, err := grpc.NewClient("passthrough:///"+target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// The second case: GetSecret twice with the same request and
// context; the server fails the first call every time: the second call
// reaches the server and gets its own answer.
func TestClientRetriesSameRequestTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ic := interceptor.Unary(bufconntest.Exact())
		s := &script{errs: errsOf(codes.Unavailable, codes.Unavailable, codes.Unavailable, codes.Unavailable,
			codes.Unavailable, codes.Unavailable, codes.Unavailable, codes.Unavailable)}
		req := new(string) // each call with a context of its own, as a client's (see above)
		first := ic(asClient(t.Context()), getSecret, req, new(string), nil, s.invoke)
		checkFinal(t, first, codes.Unavailable, 8, grpcbackoff.ReasonExhausted)
		second := ic(asClient(t.Context()), getSecret, req, new(string), nil, s.invoke)
		if second != nil || len(s.times) != 9 {
			t.Errorf("the second call: err %v, %d attempts in all; want its own success, 9", second, len(s.times))
		}
	})
}

// The third case: two calls at once with one request and one
// context, a client's (its retry of UNAVAILABLE: GetTopic's). Each reaches
// the server and ends with its own answer, however their attempts
// interleave.
func TestClientRetriesConcurrentSameRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := bufconntest.Exact()
		p.MaxAttempts = 3
		ic := interceptor.Unary(p)
		var mu sync.Mutex
		attempts := map[string]int{}
		invoke := func(ctx context.Context, _ string, _, reply any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
			md, _ := metadata.FromOutgoingContext(ctx)
			who := md.Get("x-who")[0]
			mu.Lock()
			attempts[who]++
			n := attempts[who]
			mu.Unlock()
			if n <= 2 {
				return status.Error(codes.ResourceExhausted, "quota of "+who)
			}
			*reply.(*string) = who
			return nil
		}
		ctx, req := asClient(t.Context()), new(string)
		var wg sync.WaitGroup
		for _, who := range []string{"A", "B"} {
			wg.Go(func() {
				reply := new(string)
				// One context: the caller's metadata is the same; the fake
				// tells the calls apart by a key each adds.
				err := ic(metadata.AppendToOutgoingContext(ctx, "x-who", who), getTopic, req, reply, nil, invoke)
				if err != nil || *reply != who {
					t.Errorf("call %s: err %v, reply %q; want its own success", who, err, *reply)
				}
			})
		}
		wg.Wait()
		if attempts["A"] != 3 || attempts["B"] != 3 {
			t.Errorf("attempts %v; want 3 each", attempts)
		}
	})
}

// The Retrier's memory of a client's call is keyed by the caller's
// context, not by the one a service config's timeout puts under each call:
// the retries of one call count in the client's next attempt of it.
func TestClientRetriesRememberedUnderTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc, err := serviceconfig.Parse([]byte(`{"methodConfig": [{"name": [{"service": "google.pubsub.v1.Publisher"}], "timeout": "60s",
			"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "0.001s", "backoffMultiplier": 1,
				"retryableStatusCodes": ["RESOURCE_EXHAUSTED", "UNAVAILABLE"]}}]}`))
		if err != nil {
			t.Fatal(err)
		}
		ic := interceptor.Unary(bufconntest.Exact(), interceptor.WithServiceConfig(sc))
		s := &script{errs: errsOf(codes.ResourceExhausted, codes.ResourceExhausted, codes.Unavailable, codes.ResourceExhausted, codes.ResourceExhausted)}
		req := new(string)
		calls, err := gaxLike(asClient(t.Context()), 5, codes.Unavailable, false, func(ctx context.Context) error {
			return ic(ctx, getTopic, req, new(string), nil, s.invoke)
		})
		// The client's attempts: RE, RE, U (the Retrier's 3 attempts, the
		// client's to retry), then RE, sent once: MaxAttempts spent.
		if calls != 2 || len(s.times) != 4 || status.Code(err) != codes.ResourceExhausted {
			t.Errorf("%d attempts of the client, %d on the wire, err %v; want 2, 4, RESOURCE_EXHAUSTED", calls, len(s.times), err)
		}
		var ge *grpcbackoff.Error
		if !errors.As(err, &ge) || ge.Attempts != 3 || ge.Reason != grpcbackoff.ReasonExhausted {
			t.Errorf("err %#v; want a grpcbackoff.Error of 3 attempts, exhausted", err)
		}
	})
}

// Installed twice on one connection, the same dial options or two
// Retriers', the library retries in one layer: a backend always
// UNAVAILABLE sees MaxAttempts attempts, not their square.
func TestInstalledTwice(t *testing.T) {
	p := bufconntest.Exact()
	p.MaxAttempts = 3
	one := interceptor.DialOptions(p, testService)
	cases := []struct {
		name string
		opts []grpc.DialOption
	}{
		{"the same slice twice", append(append([]grpc.DialOption(nil), one...), one...)},
		{"two Retriers", append(interceptor.DialOptions(p, testService), interceptor.DialOptions(p, testService)...)},
	}
	for _, tc := range cases {
		for _, k := range []callKind{unary, serverStream} {
			t.Run(tc.name+"/"+k.String(), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					srv := bufconntest.NewServer(t, bufconntest.Steps(bufconntest.Fail(status.Error(codes.Unavailable, "down"))))
					res := runCall(t.Context(), srv.Client(t, tc.opts...), k, nil, howToRun{})
					if n := srv.Count(); n != 3 || status.Code(res.Err) != codes.Unavailable {
						t.Errorf("%d attempts, err %v; want 3, UNAVAILABLE", n, res.Err)
					}
				})
			})
		}
	}
}

// openQuery opens a server stream of runQuery on cc, as a Google Cloud
// client would (with its header if client), sends its request, and
// receives until the end; it returns the messages received and the error.
func openQuery(ctx context.Context, cc *grpc.ClientConn, client bool) (int, error) {
	if client {
		ctx = asClient(ctx)
	}
	cs, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, runQuery)
	if err != nil {
		return 0, err
	}
	if err := cs.SendMsg(new(emptypb.Empty)); err != nil && err != io.EOF {
		return 0, err
	}
	if err := cs.CloseSend(); err != nil {
		return 0, err
	}
	for n := 0; ; n++ {
		if err := cs.RecvMsg(new(emptypb.Empty)); err != nil {
			if err == io.EOF {
				err = nil
			}
			return n, err
		}
	}
}

// A stream whose client retries only its opening is the Retrier's to retry
// once open, on every code, until it commits: the client retries nothing
// there.
func TestClientRetriesStreamAfterOpening(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := bufconntest.NewServer(t, bufconntest.Steps(failWith(codes.Unavailable), failWith(codes.Unavailable), bufconntest.Succeed(1)))
		n, err := openQuery(t.Context(), srv.Conn(t, interceptor.DialOptions(bufconntest.Exact())...), true)
		if srv.Count() != 3 || n != 1 || err != nil {
			t.Errorf("%d attempts, %d messages, err %v; want 3 attempts, 1 message, success", srv.Count(), n, err)
		}
	})
}

// Explain states, per code, who retries the calls of a client, and the
// calls otherwise made are retried on every code.
func TestExplainClientRetries(t *testing.T) {
	r, err := interceptor.New(grpcbackoff.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	got := r.Explain(getTopic).String()
	want := "called by the generated client's CallOptions, from googleapis google/pubsub/v1/pubsub_grpc_service_config.json at f8291d2b89f0: UNAVAILABLE by the client's own retry, one attempt each here; RESOURCE_EXHAUSTED by this library"
	if !strings.Contains(got, want) {
		t.Errorf("Explain(%s):\n got %s\nwant it to contain %s", getTopic, got, want)
	}
	ack := "/google.pubsub.v1.Subscriber/Acknowledge"
	want = "RESOURCE_EXHAUSTED by this library (on a subscription with exactly-once delivery, RESOURCE_EXHAUSTED by the client's own retry instead)"
	if got := r.Explain(ack).String(); !strings.Contains(got, want) {
		t.Errorf("Explain(%s):\n got %s\nwant it to contain %s", ack, got, want)
	}
	rows := "/google.bigtable.v2.Bigtable/ReadRows"
	want = "RESOURCE_EXHAUSTED by this library (RESOURCE_EXHAUSTED with the server's RetryInfo: by the client's own retry)"
	if got := r.Explain(rows).String(); !strings.Contains(got, want) {
		t.Errorf("Explain(%s):\n got %s\nwant it to contain %s", rows, got, want)
	}
	if d := r.Explain("/pkg.Svc/Get"); len(d.Clients) != 0 {
		t.Errorf("Explain of a method no Google client calls: Clients %+v, want none", d.Clients)
	}
}

// A mixin's call gets what the file of its client's API says, the API
// known from the connection's first call: Dataproc's file names no
// google.longrunning.Operations method, so the cluster controller's own
// GetOperation retries nothing and UNAVAILABLE is the Retrier's; the LRO
// client's (op.Wait's polling, at a longrunning version) retries
// UNAVAILABLE itself; Retail's file names ListOperations, which its client
// retries on UNAVAILABLE. (Before issue 33: the union of the pinned
// clients' codes, whatever the API.)
func TestClientRetriesMixinOfItsAPI(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := bufconntest.Exact()
		p.MaxAttempts = 3
		ic := interceptor.Unary(p)
		header := func(gapic string) context.Context {
			return metadata.AppendToOutgoingContext(t.Context(), "x-goog-api-client", "gl-go/1.26.0 gapic/"+gapic+" gax/2.27.0 grpc/1.85.0")
		}
		ok := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
		dataproc, retail := lazyConn(t, "dataproc"), lazyConn(t, "retail")
		if err := ic(header("2.28.1"), "/google.cloud.dataproc.v1.ClusterController/ListClusters", new(string), new(string), dataproc, ok); err != nil {
			t.Fatal(err)
		}
		if err := ic(header("2.7.0"), "/google.cloud.retail.v2.ProductService/GetProduct", new(string), new(string), retail, ok); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name     string
			ctx      context.Context
			method   string
			cc       *grpc.ClientConn
			attempts int
		}{
			{"Dataproc's own GetOperation", header("2.28.1"), "/google.longrunning.Operations/GetOperation", dataproc, 3},
			{"op.Wait's polling", header("1.5.0"), "/google.longrunning.Operations/GetOperation", dataproc, 1},
			{"Retail's own ListOperations", header("2.7.0"), "/google.longrunning.Operations/ListOperations", retail, 1},
			{"Dataproc's own ListLocations", header("2.28.1"), "/google.cloud.location.Locations/ListLocations", dataproc, 3},
		} {
			s := &script{errs: errsOf(codes.Unavailable, codes.Unavailable)}
			err := ic(tc.ctx, tc.method, new(string), new(string), tc.cc, s.invoke)
			if len(s.times) != tc.attempts || (tc.attempts == 3) != (err == nil) {
				t.Errorf("%s, UNAVAILABLE ×2: %d attempts, err %v; want %d", tc.name, len(s.times), err, tc.attempts)
			}
		}
	})
}
