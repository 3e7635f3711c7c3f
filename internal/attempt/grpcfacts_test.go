package attempt

// What grpc-go v1.85 reports of an attempt, pinned: every retry decision
// reads these facts (failure.go, facts.go), so a grpc-go that changes one of
// them fails here before it fails a user.

import (
	"context"
	"errors"
	"io"
	"maps"
	"net"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// factCase is one situation of a unary attempt and the facts grpc-go must
// report of it.
type factCase struct {
	name string
	// call makes one UnaryCall with opts on a client of its own, with
	// grpc-go's retry off as DialOptions turns it off, and returns the
	// ClientConn, the call's context and the error.
	call func(t *testing.T, opts ...grpc.CallOption) (*grpc.ClientConn, context.Context, error)

	code      codes.Code
	committed bool // grpc.Header's metadata is not nil
	sent      bool // counted sent: a transport stream was made (grpc.Peer written, grpc.Trailer's metadata not nil), or hidden
	status    bool // a failure not committed: its status is the server's (grpc.Trailer's metadata is not empty)
	trailerCT bool // grpc.Trailer's metadata carries a content-type
	hidden    bool // grpc-go never had the call options (it ran no grpc.OnFinish of theirs)
	ctxDone   bool // the call's context had ended when the attempt returned
	closed    bool // the ClientConn was shut down when the attempt returned
	streams   int  // streams a RawServer saw (its case only): grpc-go's transparent retry
}

// rawClient dials a RawServer answering as answer, on bufconn.
func rawClient(t *testing.T, answer func(conn, stream int) bufconntest.RawAnswer) (*bufconntest.RawServer, *grpc.ClientConn) {
	lis := bufconntest.Listen()
	srv := bufconntest.NewRawServer(t, lis, answer)
	return srv, bufconntest.Dial(t, lis.DialContext, grpc.WithDisableRetry())
}

// callTestService calls UnaryCall on cc with ctx and opts.
func callTestService(ctx context.Context, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
	_, err := testgrpc.NewTestServiceClient(cc).UnaryCall(ctx, &testgrpc.SimpleRequest{}, opts...)
	return err
}

// scripted returns a call to a bufconntest.Server following steps.
func scripted(steps ...bufconntest.Step) func(*testing.T, ...grpc.CallOption) (*grpc.ClientConn, context.Context, error) {
	return func(t *testing.T, opts ...grpc.CallOption) (*grpc.ClientConn, context.Context, error) {
		cc := bufconntest.NewServer(t, bufconntest.Steps(steps...)).Conn(t, grpc.WithDisableRetry())
		return cc, t.Context(), callTestService(t.Context(), cc, opts...)
	}
}

// raw returns a call to a RawServer answering every stream of connection c
// with answers[c][n], or the last answer of the last connection.
func raw(answers ...[]bufconntest.RawAnswer) func(*testing.T, ...grpc.CallOption) (*grpc.ClientConn, context.Context, error) {
	return func(t *testing.T, opts ...grpc.CallOption) (*grpc.ClientConn, context.Context, error) {
		srv, cc := rawClient(t, func(c, n int) bufconntest.RawAnswer {
			as := answers[min(c, len(answers)-1)]
			return as[min(n, len(as)-1)]
		})
		err := callTestService(t.Context(), cc, opts...)
		t.Cleanup(func() { rawStreams = len(srv.Streams()) })
		return cc, t.Context(), err
	}
}

// resolved returns a call on a ClientConn whose name a manual resolver,
// set up by setUp, resolves.
func resolved(setUp func(*manual.Resolver)) func(*testing.T, ...grpc.CallOption) (*grpc.ClientConn, context.Context, error) {
	return func(t *testing.T, opts ...grpc.CallOption) (*grpc.ClientConn, context.Context, error) {
		r := manual.NewBuilderWithScheme("facts")
		setUp(r)
		cc, err := grpc.NewClient("facts:///nowhere", grpc.WithResolvers(r), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDisableRetry())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc, t.Context(), callTestService(t.Context(), cc, opts...)
	}
}

// answeredBefore returns a call on a ClientConn whose interceptor, chained
// after the one that gave the call its options, answers with err without
// calling gRPC.
func answeredBefore(err error) func(*testing.T, ...grpc.CallOption) (*grpc.ClientConn, context.Context, error) {
	return func(t *testing.T, opts ...grpc.CallOption) (*grpc.ClientConn, context.Context, error) {
		cc := bufconntest.NewServer(t, bufconntest.Steps(bufconntest.Succeed(1))).Conn(t, grpc.WithDisableRetry(),
			grpc.WithUnaryInterceptor(func(context.Context, string, any, any, *grpc.ClientConn, grpc.UnaryInvoker, ...grpc.CallOption) error {
				return err
			}))
		return cc, t.Context(), callTestService(t.Context(), cc, opts...)
	}
}

// proxied returns a call through a bufconntest.Proxy (a grpc-go server
// forwarding to a grpc-go client) to a RawServer answering every stream
// with a.
func proxied(a bufconntest.RawAnswer) func(*testing.T, ...grpc.CallOption) (*grpc.ClientConn, context.Context, error) {
	return func(t *testing.T, opts ...grpc.CallOption) (*grpc.ClientConn, context.Context, error) {
		lis := bufconntest.Listen()
		bufconntest.NewRawServer(t, lis, func(int, int) bufconntest.RawAnswer { return a })
		proxy := bufconntest.NewProxy(t, "raw", grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }), grpc.WithDisableRetry())
		cc, err := grpc.NewClient(proxy.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDisableRetry())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc, t.Context(), callTestService(t.Context(), cc, opts...)
	}
}

// rawStreams is the number of streams the last raw case's server saw.
var rawStreams int

// The messages a server can write that read as grpc-go's own.
const (
	ctxDeadlineMsg = "context deadline exceeded"
	ctxCanceledMsg = "context canceled"
	dialErrMsg     = `connection error: desc = "transport: Error while dialing: dial tcp 10.0.0.7:443: connect: connection refused"`
	resolverMsg    = "name resolver error: produced zero addresses"
)

func factCases() []factCase {
	unavailable := func(msg string) error { return status.Error(codes.Unavailable, msg) }
	return []factCase{
		{name: "success", call: scripted(bufconntest.Succeed(1)), code: codes.OK, committed: true, sent: true},
		{name: "success, raw", call: raw([]bufconntest.RawAnswer{{Code: codes.OK}}), code: codes.OK, committed: true, sent: true, streams: 1},

		// A status the server sent alone (trailers-only): not committed,
		// whatever its message says.
		{name: "trailers-only UNAVAILABLE " + ctxDeadlineMsg, call: scripted(bufconntest.Fail(unavailable(ctxDeadlineMsg))), code: codes.Unavailable, sent: true, status: true, trailerCT: true},
		{name: "trailers-only UNAVAILABLE " + dialErrMsg, call: scripted(bufconntest.Fail(unavailable(dialErrMsg))), code: codes.Unavailable, sent: true, status: true, trailerCT: true},
		{name: "trailers-only UNAVAILABLE " + resolverMsg, call: scripted(bufconntest.Fail(unavailable(resolverMsg))), code: codes.Unavailable, sent: true, status: true, trailerCT: true},
		{name: "trailers-only UNAVAILABLE, raw", call: raw([]bufconntest.RawAnswer{{Code: codes.Unavailable}}), code: codes.Unavailable, sent: true, status: true, trailerCT: true, streams: 1},
		{name: "trailers-only RESOURCE_EXHAUSTED", call: raw([]bufconntest.RawAnswer{{Code: codes.ResourceExhausted, Message: "quota"}}), code: codes.ResourceExhausted, sent: true, status: true, trailerCT: true, streams: 1},
		{name: "trailers-only RESOURCE_EXHAUSTED with pushback", call: raw([]bufconntest.RawAnswer{{Code: codes.ResourceExhausted, Trailer: []string{"grpc-retry-pushback-ms", "10"}}}), code: codes.ResourceExhausted, sent: true, status: true, trailerCT: true, streams: 1},

		// After headers: committed, whatever the status or its message.
		{name: "headers, then UNAVAILABLE " + ctxCanceledMsg, call: scripted(bufconntest.Step{Header: true, Err: unavailable(ctxCanceledMsg)}), code: codes.Unavailable, committed: true, sent: true},
		{name: "headers, then UNAVAILABLE transport: shard 3 unreachable", call: scripted(bufconntest.Step{Header: true, Err: unavailable("transport: shard 3 unreachable")}), code: codes.Unavailable, committed: true, sent: true},
		{name: "headers, then CANCELED grpc: the client connection is closing", call: scripted(bufconntest.Step{Header: true, Err: status.Error(codes.Canceled, "grpc: the client connection is closing")}), code: codes.Canceled, committed: true, sent: true},
		{name: "headers, then UNAVAILABLE, raw", call: raw([]bufconntest.RawAnswer{{Headers: true, Code: codes.Unavailable}}), code: codes.Unavailable, committed: true, sent: true, streams: 1},
		{name: "headers, then RESOURCE_EXHAUSTED with trailer metadata", call: raw([]bufconntest.RawAnswer{{Headers: true, Code: codes.ResourceExhausted, Trailer: []string{"x-shard", "3"}}}), code: codes.ResourceExhausted, committed: true, sent: true, streams: 1},
		// A content-type in the trailer does not make an answer
		// trailers-only: grpc-go keeps the one a hop puts after headers.
		{name: "headers, then UNAVAILABLE with a content-type in the trailer", call: raw([]bufconntest.RawAnswer{{Headers: true, Code: codes.Unavailable, Trailer: []string{"content-type", "application/grpc"}}}), code: codes.Unavailable, committed: true, sent: true, trailerCT: true, streams: 1},

		// The connection dropped under the stream: sent, committed only if
		// the headers had come.
		{name: "connection cut before headers", call: raw([]bufconntest.RawAnswer{{Cut: true}}), code: codes.Unavailable, sent: true, streams: 1},
		{name: "connection cut after headers", call: raw([]bufconntest.RawAnswer{{Headers: true, Cut: true}}), code: codes.Unavailable, committed: true, sent: true, streams: 1},

		// A stream reset once its request arrived: grpc-go makes the status
		// from the reset's code; none is the server's.
		{name: "RST_STREAM ENHANCE_YOUR_CALM", call: raw([]bufconntest.RawAnswer{{Reset: http2.ErrCodeEnhanceYourCalm, AfterRequest: true}}), code: codes.ResourceExhausted, sent: true, streams: 1},
		{name: "RST_STREAM FLOW_CONTROL_ERROR", call: raw([]bufconntest.RawAnswer{{Reset: http2.ErrCodeFlowControl, AfterRequest: true}}), code: codes.ResourceExhausted, sent: true, streams: 1},
		{name: "RST_STREAM CANCEL", call: raw([]bufconntest.RawAnswer{{Reset: http2.ErrCodeCancel, AfterRequest: true}}), code: codes.Canceled, sent: true, streams: 1},
		{name: "RST_STREAM INTERNAL_ERROR", call: raw([]bufconntest.RawAnswer{{Reset: http2.ErrCodeInternal, AfterRequest: true}}), code: codes.Internal, sent: true, streams: 1},
		{name: "RST_STREAM PROTOCOL_ERROR before the request's end", call: raw([]bufconntest.RawAnswer{{Reset: http2.ErrCodeProtocol}}), code: codes.Internal, sent: true, streams: 1},
		// The same resets after headers: committed, with the same empty
		// trailer.
		{name: "headers, then RST_STREAM ENHANCE_YOUR_CALM", call: raw([]bufconntest.RawAnswer{{Headers: true, Reset: http2.ErrCodeEnhanceYourCalm, AfterRequest: true}}), code: codes.ResourceExhausted, committed: true, sent: true, streams: 1},
		{name: "headers, then RST_STREAM INTERNAL_ERROR", call: raw([]bufconntest.RawAnswer{{Headers: true, Reset: http2.ErrCodeInternal, AfterRequest: true}}), code: codes.Internal, committed: true, sent: true, streams: 1},

		// An HTTP hop that is not gRPC answers for the server: no headers of
		// gRPC's, no status of the server's.
		{name: "HTTP 503 from a hop", call: raw([]bufconntest.RawAnswer{{HTTPStatus: 503, AfterRequest: true}}), code: codes.Unavailable, sent: true, streams: 1},

		// Through a proxy (a grpc-go server forwarding to a grpc-go client):
		// the facts are the proxy's. A reset behind it before headers
		// becomes the proxy's trailers-only status; headers it forwarded
		// commit the call.
		{name: "proxy, backend RST_STREAM ENHANCE_YOUR_CALM", call: proxied(bufconntest.RawAnswer{Reset: http2.ErrCodeEnhanceYourCalm, AfterRequest: true}), code: codes.ResourceExhausted, sent: true, status: true, trailerCT: true},
		{name: "proxy, backend headers, then RST_STREAM ENHANCE_YOUR_CALM", call: proxied(bufconntest.RawAnswer{Headers: true, Reset: http2.ErrCodeEnhanceYourCalm, AfterRequest: true}), code: codes.ResourceExhausted, committed: true, sent: true},
		{name: "proxy, backend trailers-only UNAVAILABLE", call: proxied(bufconntest.RawAnswer{Code: codes.Unavailable}), code: codes.Unavailable, sent: true, status: true, trailerCT: true},

		// A stream the server did not process is retried by grpc-go itself,
		// retry policy off: once. The attempt reports the stream that
		// answered, and when that one is refused too, it reports it sent.
		{name: "REFUSED_STREAM, then answered", call: raw([]bufconntest.RawAnswer{{Refuse: true}, {Code: codes.Unavailable, Message: "second"}}), code: codes.Unavailable, sent: true, status: true, trailerCT: true, streams: 2},
		{name: "REFUSED_STREAM twice", call: raw([]bufconntest.RawAnswer{{Refuse: true}}), code: codes.Unavailable, sent: true, streams: 2},
		{name: "GOAWAY before processing, then answered on a new connection", call: raw([]bufconntest.RawAnswer{{GoAway: true}}, []bufconntest.RawAnswer{{Code: codes.OK}}), code: codes.OK, committed: true, sent: true, streams: 2},

		// No transport stream: no connection, no address, no ClientConn.
		{name: "dial fails", call: func(t *testing.T, opts ...grpc.CallOption) (*grpc.ClientConn, context.Context, error) {
			cc := bufconntest.Dial(t, func(context.Context) (net.Conn, error) { return nil, errors.New("connection refused") }, grpc.WithDisableRetry())
			return cc, t.Context(), callTestService(t.Context(), cc, opts...)
		}, code: codes.Unavailable},
		{name: "resolver produces zero addresses", call: resolved(func(r *manual.Resolver) { r.InitialState(resolver.State{}) }), code: codes.Unavailable},
		{name: "resolver error", call: resolved(func(r *manual.Resolver) {
			r.BuildCallback = func(_ resolver.Target, rcc resolver.ClientConn, _ resolver.BuildOptions) {
				go rcc.ReportError(errors.New("no such host"))
			}
		}), code: codes.Unavailable},
		{name: "caller's deadline while no connection is ready (WaitForReady)", call: func(t *testing.T, opts ...grpc.CallOption) (*grpc.ClientConn, context.Context, error) {
			cc := bufconntest.Dial(t, func(context.Context) (net.Conn, error) { return nil, errors.New("connection refused") }, grpc.WithDisableRetry())
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			t.Cleanup(cancel)
			return cc, ctx, callTestService(ctx, cc, append(opts, grpc.WaitForReady(true))...)
		}, code: codes.DeadlineExceeded, ctxDone: true},
		{name: "ClientConn closed before the call", call: func(t *testing.T, opts ...grpc.CallOption) (*grpc.ClientConn, context.Context, error) {
			cc := bufconntest.NewServer(t, bufconntest.Steps(bufconntest.Succeed(1))).Conn(t, grpc.WithDisableRetry())
			cc.Close()
			return cc, t.Context(), callTestService(t.Context(), cc, opts...)
		}, code: codes.Canceled, closed: true},

		// The client ended a stream it had made.
		{name: "ClientConn closed during the attempt", call: func(t *testing.T, opts ...grpc.CallOption) (*grpc.ClientConn, context.Context, error) {
			in := make(chan struct{})
			cc := bufconntest.NewServer(t, bufconntest.Steps(bufconntest.Step{Before: func(ctx context.Context) error {
				close(in)
				<-ctx.Done()
				return ctx.Err()
			}})).Conn(t, grpc.WithDisableRetry())
			go func() {
				<-in
				cc.Close()
			}()
			return cc, t.Context(), callTestService(t.Context(), cc, opts...)
		}, code: codes.Canceled, sent: true, closed: true},
		{name: "caller's context canceled during the attempt", call: func(t *testing.T, opts ...grpc.CallOption) (*grpc.ClientConn, context.Context, error) {
			ctx, cancel := context.WithCancel(t.Context())
			cc := bufconntest.NewServer(t, bufconntest.Steps(bufconntest.Step{Before: func(sctx context.Context) error {
				cancel()
				<-sctx.Done()
				return sctx.Err()
			}})).Conn(t, grpc.WithDisableRetry())
			return cc, ctx, callTestService(ctx, cc, opts...)
		}, code: codes.Canceled, sent: true, ctxDone: true},
		{name: "caller's deadline after headers", call: func(t *testing.T, opts ...grpc.CallOption) (*grpc.ClientConn, context.Context, error) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			t.Cleanup(cancel)
			cc := bufconntest.NewServer(t, bufconntest.Steps(bufconntest.Step{Header: true, Hang: true})).Conn(t, grpc.WithDisableRetry())
			return cc, ctx, callTestService(ctx, cc, opts...)
		}, code: codes.DeadlineExceeded, committed: true, sent: true, ctxDone: true},

		// An interceptor chained after the one that gave the options answers
		// itself: grpc-go tells nothing.
		{name: "an interceptor after ours answers UNAVAILABLE", call: answeredBefore(status.Error(codes.Unavailable, "hidden")), code: codes.Unavailable, sent: true, hidden: true},
	}
}

// TestGRPCFacts pins, case by case, what grpc-go reports of a unary attempt
// through the call options of its Facts (those the unary path gives it):
// grpc.Header's metadata is not nil exactly when real response headers
// arrived (not for a trailers-only response, nor for a stream that ended
// before headers); grpc.Peer and grpc.Trailer are written exactly when a
// transport stream was made; the trailer carries a content-type after a
// trailers-only answer, and after headers only when a hop put one there;
// grpc.OnFinish runs, for every call grpc-go was given, before the invoker
// returns (so an attempt grpc-go had and wrote no peer for was not sent,
// and one whose interceptor answered itself tells nothing); a stream the
// server did not process is retried by grpc-go itself, once, even with its
// retry policy off; the end of the caller's context shows in ctx.Err(), the
// closing of the ClientConn in its state, by the time the attempt returns.
// None of it depends on a status message: the servers here write grpc-go's
// own words.
func TestGRPCFacts(t *testing.T) {
	for _, tc := range factCases() {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var facts Facts
				facts.Reset()
				header, peer, finish, trailer := facts.Options()
				cc, ctx, err := tc.call(t, header, peer, finish, trailer)
				f := Failure{Err: err}
				facts.Read(&f, true)
				if got := status.Code(err); got != tc.code {
					t.Errorf("code = %v, want %v (%v)", got, tc.code, err)
				}
				if f.Committed != tc.committed {
					t.Errorf("grpc.Header %v: committed = %v, want %v", facts.Header, f.Committed, tc.committed)
				}
				if facts.Reached == tc.hidden {
					t.Errorf("grpc-go ran the attempt's grpc.OnFinish before it returned: %v, want %v", facts.Reached, !tc.hidden)
				}
				stream := tc.sent && !tc.hidden // a transport stream was made
				if f.Sent != tc.sent || facts.PeerWritten() != stream || (facts.Trailer != nil) != stream {
					t.Errorf("grpc.Peer %v, grpc.Trailer %v: sent = %v, want %v", facts.Peer, facts.Trailer, f.Sent, tc.sent)
				}
				if got := len(facts.Trailer.Get("content-type")) > 0; got != tc.trailerCT {
					t.Errorf("grpc.Trailer %v: a content-type: %v, want %v", facts.Trailer, got, tc.trailerCT)
				}
				if !f.Committed && err != nil && f.Status != tc.status {
					t.Errorf("grpc.Trailer %v: the server's status = %v, want %v", facts.Trailer, f.Status, tc.status)
				}
				if got := ctx.Err() != nil; got != tc.ctxDone {
					t.Errorf("the call's context ended: %v, want %v", got, tc.ctxDone)
				}
				if got := cc.GetState() == connectivity.Shutdown; got != tc.closed {
					t.Errorf("the ClientConn shut down: %v, want %v", got, tc.closed)
				}
				if facts.Header != nil && len(facts.Header.Get("content-type")) == 0 {
					t.Errorf("grpc.Header = %v, want the response's content-type", facts.Header)
				}
			})
			if tc.streams > 0 && rawStreams != tc.streams {
				t.Errorf("the server saw %d streams, want %d", rawStreams, tc.streams)
			}
		})
	}
}

// TestGRPCFactsTrailersOnly pins the form of a trailers-only response: its
// content-type is in the trailer, and grpc.Header stays nil, so that
// nothing but the headers' arrival tells a commit.
func TestGRPCFactsTrailersOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cc := bufconntest.NewServer(t, bufconntest.Steps(bufconntest.Fail(status.Error(codes.Unavailable, "down")))).Conn(t, grpc.WithDisableRetry())
		var header, trailer metadata.MD
		err := callTestService(t.Context(), cc, grpc.Header(&header), grpc.Trailer(&trailer))
		if status.Code(err) != codes.Unavailable || header != nil || !slices.Equal(trailer.Get("content-type"), []string{"application/grpc"}) {
			t.Errorf("err %v, header %v, trailer %v; want UNAVAILABLE, no header, the content-type in the trailer", err, header, trailer)
		}
	})
}

// TestGRPCStreamFacts pins what grpc-go v1.85 reports of a stream's attempt,
// which the stream machine reads (internal/stream): its opening returns a
// stream only once a transport stream was made, and runs the attempt's
// grpc.OnFinish before it returns an error; once the stream failed,
// ClientStream.Header's metadata is not nil exactly when real response
// headers had arrived.
func TestGRPCStreamFacts(t *testing.T) {
	desc := &grpc.StreamDesc{StreamName: "StreamingOutputCall", ServerStreams: true}
	const method = "/grpc.testing.TestService/StreamingOutputCall"
	for _, tc := range []struct {
		name      string
		cc        func(t *testing.T) *grpc.ClientConn
		opened    bool // NewStream returned a stream
		committed bool // Header's metadata, once RecvMsg failed, is not nil
	}{
		{"trailers-only UNAVAILABLE " + dialErrMsg, func(t *testing.T) *grpc.ClientConn {
			return bufconntest.NewServer(t, bufconntest.Steps(bufconntest.Fail(status.Error(codes.Unavailable, dialErrMsg)))).Conn(t, grpc.WithDisableRetry())
		}, true, false},
		{"headers, then UNAVAILABLE " + ctxCanceledMsg, func(t *testing.T) *grpc.ClientConn {
			return bufconntest.NewServer(t, bufconntest.Steps(bufconntest.Step{Header: true, Err: status.Error(codes.Unavailable, ctxCanceledMsg)})).Conn(t, grpc.WithDisableRetry())
		}, true, true},
		{"connection cut after headers", func(t *testing.T) *grpc.ClientConn {
			_, cc := rawClient(t, func(int, int) bufconntest.RawAnswer { return bufconntest.RawAnswer{Headers: true, Cut: true} })
			return cc
		}, true, true},
		{"REFUSED_STREAM twice", func(t *testing.T) *grpc.ClientConn {
			_, cc := rawClient(t, func(int, int) bufconntest.RawAnswer { return bufconntest.RawAnswer{Refuse: true} })
			return cc
		}, true, false},
		{"dial fails", func(t *testing.T) *grpc.ClientConn {
			return bufconntest.Dial(t, func(context.Context) (net.Conn, error) { return nil, errors.New("connection refused") }, grpc.WithDisableRetry())
		}, false, false},
		{"ClientConn closed before the call", func(t *testing.T) *grpc.ClientConn {
			cc := bufconntest.NewServer(t, bufconntest.Steps(bufconntest.Succeed(1))).Conn(t, grpc.WithDisableRetry())
			cc.Close()
			return cc
		}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var facts Facts
				cs, err := tc.cc(t).NewStream(t.Context(), desc, method, grpc.OnFinish(facts.Finished))
				if (cs != nil) != tc.opened || (err == nil) != tc.opened {
					t.Fatalf("NewStream = %v, %v; want a stream: %v", cs, err, tc.opened)
				}
				if !tc.opened {
					if !facts.Reached {
						t.Errorf("NewStream failed (%v) before grpc-go ran the attempt's grpc.OnFinish", err)
					}
					return
				}
				if err := cs.SendMsg(&testgrpc.StreamingOutputCallRequest{}); err != nil && err != io.EOF {
					t.Fatal(err)
				}
				cs.CloseSend()
				if err := cs.RecvMsg(new(testgrpc.StreamingOutputCallResponse)); status.Code(err) != codes.Unavailable {
					t.Fatalf("RecvMsg = %v, want UNAVAILABLE", err)
				}
				if md, _ := cs.Header(); (md != nil) != tc.committed {
					t.Errorf("Header() = %v once the stream failed; want metadata: %v", md, tc.committed)
				}
			})
		})
	}
}

// TestGRPCFactsTrailerTellsNoCommit pins why an attempt that may be retried
// carries grpc.Header, although grpc-go copies the headers it points at on
// every success: the trailer alone (grpc.Trailer, with grpc.OnFinish) reads
// the same, code and metadata, for an attempt that committed and one that
// did not. A reset or a cut leaves an empty trailer before headers as after
// them, as does a server's status after headers without trailer metadata;
// and a content-type, which a trailers-only answer carries, can follow
// headers too.
func TestGRPCFactsTrailerTellsNoCommit(t *testing.T) {
	cases := make(map[string]factCase)
	for _, tc := range factCases() {
		cases[tc.name] = tc
	}
	for _, pair := range [][2]string{
		{"headers, then UNAVAILABLE, raw", "connection cut before headers"},
		{"connection cut after headers", "connection cut before headers"},
		{"headers, then RST_STREAM ENHANCE_YOUR_CALM", "RST_STREAM ENHANCE_YOUR_CALM"},
		{"headers, then RST_STREAM INTERNAL_ERROR", "RST_STREAM INTERNAL_ERROR"},
		{"headers, then UNAVAILABLE with a content-type in the trailer", "trailers-only UNAVAILABLE, raw"},
	} {
		t.Run(pair[0]+" | "+pair[1], func(t *testing.T) {
			var code [2]codes.Code
			var trailers [2]metadata.MD
			for i, name := range pair {
				tc, ok := cases[name]
				if !ok {
					t.Fatalf("no case %q", name)
				}
				if tc.committed != (i == 0) {
					t.Fatalf("case %q: committed %v", name, tc.committed)
				}
				synctest.Test(t, func(t *testing.T) {
					var reached bool
					_, _, err := tc.call(t, grpc.Trailer(&trailers[i]), grpc.OnFinish(func(error) { reached = true }))
					code[i] = status.Code(err)
					if !reached || trailers[i] == nil {
						t.Errorf("%s: grpc.OnFinish ran: %v, grpc.Trailer %v; want both", name, reached, trailers[i])
					}
				})
			}
			if code[0] != code[1] || !maps.EqualFunc(trailers[0], trailers[1], slices.Equal) {
				t.Errorf("%v with trailer %v, and %v with trailer %v: the trailer tells the commit", code[0], trailers[0], code[1], trailers[1])
			}
		})
	}
}
