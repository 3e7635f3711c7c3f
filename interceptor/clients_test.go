package interceptor_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
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

// Once the Retrier gave up on a client's call, a further attempt of the
// client (a per-call gax.WithRetry: the same request, a context with the
// same end) fails at once with the same error: no second layer. Another
// call is not concerned, on the same context or not, nor is a call that is
// not a client's (its caller may loop on one context).
func TestClientRetriesGaveUpRefusesAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := bufconntest.Exact()
		p.MaxAttempts = 3
		ic := interceptor.Unary(p)
		s := &script{errs: errsOf(codes.ResourceExhausted, codes.ResourceExhausted, codes.ResourceExhausted, codes.ResourceExhausted)}
		ctx, req := asClient(t.Context()), new(string)
		first := ic(ctx, getTopic, req, new(string), nil, s.invoke)
		checkFinal(t, first, codes.ResourceExhausted, 3, grpcbackoff.ReasonExhausted)
		again := ic(ctx, getTopic, req, new(string), nil, s.invoke)
		if len(s.times) != 3 || again != first {
			t.Errorf("again: %d attempts in all, err %v; want 3 and the first call's error", len(s.times), again)
		}
		traced := ic(context.WithValue(ctx, resendCount{}, 1), getTopic, req, new(string), nil, s.invoke)
		if len(s.times) != 3 || traced != first {
			t.Errorf("again, with a context of its own over the first's: %d attempts in all, err %v; want 3 and the first call's error", len(s.times), traced)
		}
		if err := ic(ctx, getTopic, new(string), new(string), nil, s.invoke); err != nil || len(s.times) != 5 {
			t.Errorf("another call on the same context: err %v, %d attempts in all; want success after 2 more", err, len(s.times))
		}
		s = &script{errs: errsOf(codes.ResourceExhausted, codes.ResourceExhausted)}
		if err := ic(ctx, "/google.pubsub.v1.Publisher/ListTopics", req, new(string), nil, s.invoke); err != nil || len(s.times) != 3 {
			t.Errorf("another method with the same context and request: err %v, %d attempts; want success after 3", err, len(s.times))
		}

		s = &script{errs: errsOf(codes.ResourceExhausted, codes.ResourceExhausted, codes.ResourceExhausted, codes.ResourceExhausted)}
		plain := t.Context()
		ic(plain, getTopic, req, new(string), nil, s.invoke)
		if err := ic(plain, getTopic, req, new(string), nil, s.invoke); err != nil || len(s.times) != 5 {
			t.Errorf("not a client's call, again with one context: err %v, %d attempts in all; want success after 2 more", err, len(s.times))
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
		// client's to retry), then RE refused again: MaxAttempts spent.
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
	one := interceptor.DialOptions(p)
	cases := []struct {
		name string
		opts []grpc.DialOption
	}{
		{"the same slice twice", append(append([]grpc.DialOption(nil), one...), one...)},
		{"two Retriers", append(interceptor.DialOptions(p), interceptor.DialOptions(p)...)},
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
	want := "called by cloud.google.com/go/pubsub/v2/apiv1 v2.8.1 CallOptions (TopicAdminClient): UNAVAILABLE by the client's own retry, one attempt each here; RESOURCE_EXHAUSTED by this library"
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
