package interceptor_test

// Red-team probe of issue 34, item 2: a DeferredBudget whose Want panics,
// on every path that decides a retry (unary, hedged with an attempt in
// flight, server stream, bidi stream with a replay): the panic reaches the
// caller once, and the call leaves no goroutine.

import (
	"context"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
)

// probeScripted fails each call's first attempt (a unary call's first
// attempt hangs when its request says so, and its second fails), then
// answers.
type probeScripted struct {
	testgrpc.UnimplementedTestServiceServer
}

func probeAttemptOf(ctx context.Context) int {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(interceptor.PreviousAttemptsKey); len(v) > 0 {
		n, _ := strconv.Atoi(v[len(v)-1])
		return n
	}
	return 0
}

func (probeScripted) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if req.GetFillUsername() { // hedged: the first attempt hangs, the hedge fails
		switch probeAttemptOf(ctx) {
		case 0:
			<-ctx.Done()
			return nil, ctx.Err()
		case 1:
			return nil, status.Error(codes.Unavailable, "down")
		}
		return &testgrpc.SimpleResponse{}, nil
	}
	if probeAttemptOf(ctx) == 0 {
		return nil, status.Error(codes.Unavailable, "down")
	}
	return &testgrpc.SimpleResponse{}, nil
}

func (probeScripted) StreamingOutputCall(_ *testgrpc.StreamingOutputCallRequest, ss testgrpc.TestService_StreamingOutputCallServer) error {
	if probeAttemptOf(ss.Context()) == 0 {
		return status.Error(codes.Unavailable, "down")
	}
	return ss.Send(&testgrpc.StreamingOutputCallResponse{})
}

func (probeScripted) FullDuplexCall(ss testgrpc.TestService_FullDuplexCallServer) error {
	first := probeAttemptOf(ss.Context()) == 0
	for {
		m, err := ss.Recv()
		if err == io.EOF {
			if first {
				return status.Error(codes.Unavailable, "down")
			}
			return nil
		}
		if err != nil {
			return err
		}
		if !first {
			ss.Send(&testgrpc.StreamingOutputCallResponse{Payload: m.GetPayload()})
		}
	}
}

// wantPanics is a DeferredBudget that pays everything, and panics in Want
// once armed.
type wantPanics struct{ armed *atomic.Bool }

type wantBoom struct{}

func (wantPanics) Started()                    {}
func (wantPanics) Succeeded()                  {}
func (wantPanics) Allow(time.Time) bool        { return true }
func (wantPanics) AllowLongRun(time.Time) bool { return true }
func (wantPanics) State(time.Time) interceptor.SharedBudgetState {
	return interceptor.SharedBudgetState{Name: "want-panics", Joined: true}
}

func (b wantPanics) Want(time.Time, time.Time, bool) bool {
	if b.armed.Load() {
		panic(wantBoom{})
	}
	return true
}

func TestProbeDeferredBudgetWantPanics(t *testing.T) {
	for _, path := range []struct {
		name string
		call func(ctx context.Context, c testgrpc.TestServiceClient) error
	}{
		{"unary, retried", func(ctx context.Context, c testgrpc.TestServiceClient) error {
			_, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{})
			return err
		}},
		{"unary, hedged, an attempt in flight", func(ctx context.Context, c testgrpc.TestServiceClient) error {
			_, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{FillUsername: true})
			return err
		}},
		{"server stream, retried", func(ctx context.Context, c testgrpc.TestServiceClient) error {
			st, err := c.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		}},
		{"bidi stream, replayed", func(ctx context.Context, c testgrpc.TestServiceClient) error {
			st, err := c.FullDuplexCall(ctx)
			if err != nil {
				return err
			}
			for range 3 {
				st.Send(&testgrpc.StreamingOutputCallRequest{Payload: &testgrpc.Payload{Body: []byte("m")}})
			}
			st.CloseSend()
			_, err = st.Recv()
			return err
		}},
	} {
		t.Run(path.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lis := bufconn.Listen(1 << 20)
				srv := grpc.NewServer()
				testgrpc.RegisterTestServiceServer(srv, probeScripted{})
				go srv.Serve(lis)
				defer srv.Stop()
				armed := new(atomic.Bool)
				p := grpcbackoff.DefaultPolicy()
				r, err := interceptor.New(p, testService,
					interceptor.WithSharedBudget(func(string, grpcbackoff.Throttle) interceptor.SharedBudget { return wantPanics{armed} }),
					interceptor.WithHedging("/grpc.testing.TestService/UnaryCall", grpcbackoff.Hedging{MaxAttempts: 3, Delay: 100 * time.Millisecond}))
				if err != nil {
					t.Fatal(err)
				}
				cc, err := grpc.NewClient("passthrough:///bufconn", append(r.DialOptions(),
					grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
					grpc.WithTransportCredentials(insecure.NewCredentials()))...)
				if err != nil {
					t.Fatal(err)
				}
				defer cc.Close()
				c := testgrpc.NewTestServiceClient(cc)
				ctx := t.Context()
				if err := path.call(ctx, c); err != nil { // unarmed: the connection, and the path, work
					t.Fatalf("unarmed: %v", err)
				}
				synctest.Wait()
				before := bubbleGoroutines()
				armed.Store(true)
				var got any
				func() {
					defer func() { got = recover() }()
					path.call(ctx, c)
				}()
				synctest.Wait()
				if got != (wantBoom{}) {
					t.Errorf("the caller got the panic %v, want Want's", got)
				}
				for id, g := range bubbleGoroutines() {
					if _, ok := before[id]; !ok {
						t.Errorf("a goroutine of the call is left:\n%s", g)
					}
				}
				armed.Store(false)
				if err := path.call(ctx, c); err != nil {
					t.Errorf("the next call: %v", err)
				}
			})
		})
	}
}
