package interceptor_test

// Issue 34's probes: the Retrier decides from what gRPC reports, never from
// the words of a status message. A server that sends headers, then fails
// with any words, has the call; a write answered with a server's forwarded
// transport error may have been applied; a write that found no connection
// was not. Each probe has its control.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// clientMadeWords are messages a server can write that are, word for word,
// those grpc-go's client gives the failures it makes itself.
var clientMadeWords = []string{
	"context deadline exceeded",
	"context canceled",
	`connection error: desc = "transport: Error while dialing: dial tcp 10.0.0.7:443: connect: connection refused"`,
	"transport: shard 3 unreachable",
}

// forwardedWords are what a server that forwards its own downstream's
// transport errors writes, beside a control in its own words.
var forwardedWords = []string{
	`connection error: desc = "transport: Error while dialing: dial tcp 10.0.0.7:443: connect: connection refused"`,
	`name resolver error: produced zero addresses`,
	`last resolver error: produced zero addresses`,
	"replica unreachable", // the control
}

// wireSetups are the ways a Retrier is installed for the probes: with its
// dial options, with an AttemptTimeout (a stats handler then sees headers
// as they come), and its interceptors alone with one (no stats handler).
var wireSetups = []struct {
	name  string
	dial  func(r *interceptor.Retrier) []grpc.DialOption
	timed bool
}{
	{"DialOptions", func(r *interceptor.Retrier) []grpc.DialOption { return r.DialOptions() }, false},
	{"DialOptions, AttemptTimeout", func(r *interceptor.Retrier) []grpc.DialOption { return r.DialOptions() }, true},
	{"interceptors alone, AttemptTimeout", func(r *interceptor.Retrier) []grpc.DialOption {
		return []grpc.DialOption{grpc.WithUnaryInterceptor(r.Unary()), grpc.WithStreamInterceptor(r.Stream())}
	}, true},
}

// wireClient returns a client of srv through a Retrier of hostilePolicy
// installed as setup says.
func wireClient(t *testing.T, srv *hostileServer, setup int, opts ...interceptor.Option) testgrpc.TestServiceClient {
	p := hostilePolicy()
	if wireSetups[setup].timed {
		p.AttemptTimeout = 2 * time.Second
	}
	r, err := interceptor.New(p, append(opts, testService)...)
	if err != nil {
		t.Fatal(err)
	}
	return srv.Client(t, wireSetups[setup].dial(r)...)
}

// TestHeadersThenAnyWordsCommit: a server sends response headers, then
// fails with UNAVAILABLE in words grpc-go's client uses for failures of its
// own: the handler runs once, and the caller gets the server's error as it
// is, on every kind of call, however the Retrier is installed. The control,
// the same failure trailers-only, is retried. (Issue 34: the handler ran 8
// times, with and without AttemptTimeout: an empty trailer fell through to
// matching the message.)
func TestHeadersThenAnyWordsCommit(t *testing.T) {
	for _, words := range clientMadeWords {
		for i, setup := range wireSetups {
			for _, k := range allKinds {
				t.Run(words+"/"+setup.name+"/"+k.String(), func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						fail := failWithStatus(&spb.Status{Code: int32(codes.Unavailable), Message: words})
						srv := newHostileServer(t, headersFirst(fail))
						res := runCall(t.Context(), wireClient(t, srv, i), k, hostileMessages, howToRun{})
						if st := status.Convert(res.Err); srv.Count() != 1 || st.Code() != codes.Unavailable || st.Message() != words {
							t.Errorf("the server ran %d attempts, the caller got %v; want 1 attempt and the server's error as it is", srv.Count(), res.Err)
						}

						control := newHostileServer(t, firstAttempts(2, fail))
						res = runCall(t.Context(), wireClient(t, control, i), k, hostileMessages, howToRun{})
						if control.Count() != 3 || res.Err != nil {
							t.Errorf("control (trailers only, twice): the server ran %d attempts, the caller got %v; want 3 attempts and success", control.Count(), res.Err)
						}
					})
				})
			}
		}
	}
}

// TestForwardedTransportWordsDoNotResendWrites: a write (CallNotIdempotent)
// answered trailers-only UNAVAILABLE by a server that forwards its
// downstream's transport error is applied once, as is the control in the
// server's own words: the request reached the server, which may have acted.
// The same answers to a call of unknown safety are retried. (Issue 34: the
// write was applied 8 times: "Error while dialing" and "name resolver
// error" were taken for grpc-go's own, never-sent failures.)
func TestForwardedTransportWordsDoNotResendWrites(t *testing.T) {
	for _, words := range forwardedWords {
		for _, k := range allKinds {
			t.Run(words+"/"+k.String(), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					fail := failWithStatus(&spb.Status{Code: int32(codes.Unavailable), Message: words})
					srv := newHostileServer(t, fail)
					c := srv.Client(t, interceptor.DialOptions(hostilePolicy(), testService)...)
					res := runCall(t.Context(), c, k, hostileMessages, howToRun{}, interceptor.CallNotIdempotent())
					if st := status.Convert(res.Err); srv.Count() != 1 || st.Code() != codes.Unavailable || st.Message() != words {
						t.Errorf("the write was applied %d times, the caller got %v; want once, and the server's error", srv.Count(), res.Err)
					}

					control := newHostileServer(t, firstAttempts(2, fail))
					c = control.Client(t, interceptor.DialOptions(hostilePolicy(), testService)...)
					if res := runCall(t.Context(), c, k, hostileMessages, howToRun{}); control.Count() != 3 || res.Err != nil {
						t.Errorf("control (safety unknown): the server ran %d attempts, the caller got %v; want 3 attempts and success", control.Count(), res.Err)
					}
				})
			})
		}
	}
}

// TestHiddenFactsDoNotResendWrites: an interceptor chained after the
// Retrier's hides what gRPC reports of an attempt when it answers the call
// (or fails a stream's opening) itself, or calls the invoker without the
// call options it was given. gRPC then says nothing of whether the request
// left: a write (CallNotIdempotent) answered UNAVAILABLE is not resent, its
// request counted as sent; a call of unknown safety, the control, is
// retried. (Before, a unary attempt without a peer, or a stream that did
// not open, was taken for one that made no transport stream: the write was
// resent, 5 times in all.)
func TestHiddenFactsDoNotResendWrites(t *testing.T) {
	unavailable := status.Error(codes.Unavailable, "replica unreachable")
	for _, tc := range []struct {
		name   string
		unary  grpc.UnaryClientInterceptor
		stream grpc.StreamClientInterceptor
	}{
		{"answers itself",
			func(context.Context, string, any, any, *grpc.ClientConn, grpc.UnaryInvoker, ...grpc.CallOption) error {
				return unavailable
			},
			func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, grpc.Streamer, ...grpc.CallOption) (grpc.ClientStream, error) {
				return nil, unavailable
			}},
		{"drops the call options",
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, _ ...grpc.CallOption) error {
				return invoker(ctx, method, req, reply, cc)
			},
			func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, _ ...grpc.CallOption) (grpc.ClientStream, error) {
				return streamer(ctx, desc, cc, method)
			}},
	} {
		for _, k := range allKinds {
			for _, write := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/%v/write=%v", tc.name, k, write), func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						srv := newHostileServer(t, failWithStatus(&spb.Status{Code: int32(codes.Unavailable), Message: "replica unreachable"}))
						var calls atomic.Int32
						unary := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
							calls.Add(1)
							return tc.unary(ctx, method, req, reply, cc, invoker, opts...)
						}
						stream := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
							calls.Add(1)
							return tc.stream(ctx, desc, cc, method, streamer, opts...)
						}
						c := srv.Client(t, append(interceptor.DialOptions(hostilePolicy(), testService, interceptor.WithoutThrottle()),
							grpc.WithChainUnaryInterceptor(unary), grpc.WithChainStreamInterceptor(stream))...)
						var opts []grpc.CallOption
						want := hostilePolicy().MaxAttempts
						if write {
							opts, want = append(opts, interceptor.CallNotIdempotent()), 1
						}
						res := runCall(t.Context(), c, k, hostileMessages, howToRun{}, opts...)
						if status.Code(res.Err) != codes.Unavailable || int(calls.Load()) != want {
							t.Errorf("err = %v after %d attempts, want UNAVAILABLE after %d", res.Err, calls.Load(), want)
						}
					})
				})
			}
		}
	}
}

// neverListening returns a loopback TCP address nothing listens on.
func neverListening(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// fastPolicy retries UNAVAILABLE three times in all, 1 ms apart: for the
// tests over real TCP, which run in real time.
func fastPolicy() grpcbackoff.Policy {
	p := bufconntest.Exact()
	p.Initial, p.Max, p.MaxAttempts = time.Millisecond, time.Millisecond, 3
	return p
}

// tcpClient returns a client of the loopback TCP address addr through a
// Retrier of fastPolicy without a throttle, with more options, the log of
// its attempts, and a context for its calls; the connection is closed when
// the test ends.
func tcpClient(t *testing.T, addr string, more ...interceptor.Option) (testgrpc.TestServiceClient, *attemptLog, context.Context) {
	log := new(attemptLog)
	opts := append(interceptor.DialOptions(fastPolicy(), append(more, interceptor.WithoutThrottle(), testService)...), log.dialOptions()...)
	cc, err := grpc.NewClient("passthrough:///"+addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return testgrpc.NewTestServiceClient(cc), log, ctx
}

// TestWriteRetriedWhenNeverSent: over loopback TCP, to a port nothing
// listens on, a write's attempts make no transport stream (gRPC reports
// none), so it is retried, unary call and stream alike: the request never
// left.
func TestWriteRetriedWhenNeverSent(t *testing.T) {
	addr := neverListening(t)
	for _, k := range allKinds {
		t.Run(k.String(), func(t *testing.T) {
			c, log, ctx := tcpClient(t, addr)
			res := runCall(ctx, c, k, hostileMessages, howToRun{}, interceptor.CallNotIdempotent())
			var ge *grpcbackoff.Error
			if !errors.As(res.Err, &ge) || ge.Reason != grpcbackoff.ReasonExhausted || status.Code(res.Err) != codes.Unavailable || log.count() != 3 {
				t.Errorf("err = %v after %d attempts, want UNAVAILABLE after 3 attempts", res.Err, log.count())
			}
		})
	}
}

// TestResetAfterSend: over loopback TCP, the connection is cut once the
// handler has the request, before any response. The write may have been
// applied: it is not resent, and the caller gets UNAVAILABLE after one
// attempt. A call of unknown safety, the control, is retried on a new
// connection and succeeds.
func TestResetAfterSend(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     []grpc.CallOption
		attempts int
		code     codes.Code
	}{
		{"write", []grpc.CallOption{interceptor.CallNotIdempotent()}, 1, codes.Unavailable},
		{"safety unknown", nil, 2, codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tcp, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var handled atomic.Int32
			var served atomic.Pointer[bufconntest.Server]
			srv := bufconntest.NewServerOn(t, tcp, func(_ string, n int) bufconntest.Step {
				return bufconntest.Step{Before: func(context.Context) error {
					handled.Add(1)
					if n == 0 {
						served.Load().Cut() // the request reached the handler: the write is applied
					}
					return nil
				}, Send: 1}
			})
			served.Store(srv)
			c, log, ctx := tcpClient(t, srv.Addr())
			_, err = c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, append(tc.opts, grpc.WaitForReady(true))...)
			if status.Code(err) != tc.code || log.count() != tc.attempts || int(handled.Load()) != tc.attempts {
				t.Errorf("err = %v after %d attempts, the handler ran %d times; want %v after %d", err, log.count(), handled.Load(), tc.code, tc.attempts)
			}
		})
	}
}

// TestResetAfterHeaders: over loopback TCP, a server that sent response
// headers, then lost its connection, had the call: it committed, and the
// caller gets UNAVAILABLE after that one attempt, whatever its Safety, as
// grpc-go's own retry decides. The control, a connection lost before any
// headers, is retried on a new connection, and succeeds.
func TestResetAfterHeaders(t *testing.T) {
	for _, tc := range []struct {
		name     string
		headers  bool
		attempts int
		code     codes.Code
	}{
		{"after headers", true, 1, codes.Unavailable},
		{"before headers", false, 2, codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := bufconntest.NewRawServer(t, lis, func(c, _ int) bufconntest.RawAnswer {
				return bufconntest.RawAnswer{Headers: c == 0 && tc.headers, Cut: c == 0}
			})
			c, log, ctx := tcpClient(t, lis.Addr().String())
			_, err = c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
			if status.Code(err) != tc.code || log.count() != tc.attempts || len(srv.Streams()) != tc.attempts {
				t.Errorf("err = %v after %d attempts, %d streams; want %v after %d", err, log.count(), len(srv.Streams()), tc.code, tc.attempts)
			}
		})
	}
}

// TestUnprocessedStreamsRetriedByGRPC: over loopback TCP, a server that
// refuses a write's stream (REFUSED_STREAM), or sends GOAWAY before
// processing it, did not apply it, and says so: grpc-go retries such a
// stream itself, under the Retrier's one attempt, and the write is applied
// once, by the stream that was processed.
func TestUnprocessedStreamsRetriedByGRPC(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answers func(conn, stream int) bufconntest.RawAnswer
	}{
		// The stream processed answers once its request arrived, as a
		// handler does: answered before it, the client's transparent retry
		// may race the answer and get io.EOF from grpc-go (seen under -race).
		{"REFUSED_STREAM", func(_, n int) bufconntest.RawAnswer {
			return bufconntest.RawAnswer{Refuse: n == 0, AfterRequest: n > 0}
		}},
		{"GOAWAY", func(c, _ int) bufconntest.RawAnswer {
			return bufconntest.RawAnswer{GoAway: c == 0, AfterRequest: c > 0}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := bufconntest.NewRawServer(t, lis, tc.answers)
			c, log, ctx := tcpClient(t, lis.Addr().String())
			_, err = c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, interceptor.CallNotIdempotent())
			if err != nil || log.count() != 1 || len(srv.Streams()) != 2 {
				t.Errorf("err = %v after %d attempts of the Retrier, %d streams; want success after 1 attempt, on the second stream", err, log.count(), len(srv.Streams()))
			}
		})
	}
}
