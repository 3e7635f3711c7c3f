package interceptor_test

// Hostile and broken servers. A retry library sits on every call a service
// makes, so whatever the server does, a call must end within the caller's
// deadline and MaxAttempts, leave no goroutine behind and keep its memory
// bounded. Every case runs over bufconn inside a synctest bubble: delays are
// checked exactly on the fake clock, and a goroutine left behind fails the
// test (the bubble will not end).

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/internal/bufconntest"
)

// hostileDeadline is the deadline every hostile call gets.
const hostileDeadline = 30 * time.Second

// hostilePolicy is the Policy of the hostile tests: exact waits of 1, 2, 4 and
// 8 s between five attempts, 15 s in all, well within hostileDeadline.
func hostilePolicy() grpcbackoff.Policy {
	return grpcbackoff.Policy{
		Initial:     time.Second,
		Multiplier:  2,
		Max:         8 * time.Second,
		Jitter:      0,
		MaxAttempts: 5,
		Codes:       []codes.Code{codes.Unavailable, codes.ResourceExhausted},
	}
}

var (
	// allKinds are unary calls and the three kinds of stream.
	allKinds = []callKind{unary, serverStream, clientStream, bidi}
	// responseStreams are the kinds whose server can send a response
	// before the end.
	responseStreams = []callKind{serverStream, bidi}
)

// hostileMessages are what the caller of a client or bidi stream sends; a
// unary call and a server stream send the first as their request.
var hostileMessages = []string{"m0", "m1", "m2"}

// successResponses returns what the caller of kind k receives from an attempt
// that succeeds (succeed): the unary answer, the two responses of a server
// or bidi stream, the number of messages a client stream's server received.
func successResponses(k callKind) []string {
	switch k {
	case unary:
		return []string{"r0"}
	case clientStream:
		return []string{strconv.Itoa(len(hostileMessages))}
	default:
		return []string{"r0", "r1"}
	}
}

// hostileServer is bufconntest's scripted TestService, whose every attempt
// follows a hostile act.
type hostileServer struct {
	*bufconntest.Server

	deliverOnce sync.Once
	delivered   chan struct{} // closed when a caller received a response
}

// hostileAct is what the server does in attempt n (from 0) of a call.
type hostileAct func(s *hostileServer, n int) bufconntest.Step

// newHostileServer starts a server running act on a private bufconn
// listener; it stops when the test ends.
func newHostileServer(tb testing.TB, act hostileAct) *hostileServer {
	s := &hostileServer{delivered: make(chan struct{})}
	s.Server = bufconntest.NewServer(tb, func(_ string, n int) bufconntest.Step { return act(s, n) })
	return s
}

// markDelivered records that the caller received a response.
func (s *hostileServer) markDelivered() { s.deliverOnce.Do(func() { close(s.delivered) }) }

// The acts.

// succeed is the step of an attempt that succeeds: the caller of a unary
// call gets r0, of a server or bidi stream r0 and r1 (the latter once the
// server read every message), of a client stream the number of messages it
// sent.
var succeed = bufconntest.Step{Recv: bufconntest.UntilHalfClose, Send: 2}

// failWithStatus fails every attempt with st.
func failWithStatus(st *spb.Status) hostileAct {
	return func(*hostileServer, int) bufconntest.Step { return bufconntest.Fail(status.FromProto(st).Err()) }
}

// unavailableWith returns an UNAVAILABLE status with details.
func unavailableWith(details ...proto.Message) *spb.Status {
	st := &spb.Status{Code: int32(codes.Unavailable), Message: "hostile"}
	for _, d := range details {
		a, err := anypb.New(d)
		if err != nil {
			panic(err)
		}
		st.Details = append(st.Details, a)
	}
	return st
}

// failWithRetryInfo fails every attempt with UNAVAILABLE and a RetryInfo of d.
func failWithRetryInfo(d *durationpb.Duration) hostileAct {
	return failWithStatus(unavailableWith(&errdetails.RetryInfo{RetryDelay: d}))
}

// failWithPushback fails every attempt with UNAVAILABLE, the pushback trailer
// with vals and the details.
func failWithPushback(vals []string, details ...proto.Message) hostileAct {
	return func(*hostileServer, int) bufconntest.Step {
		md := metadata.MD{}
		md[grpcbackoff.PushbackKey] = vals
		return bufconntest.Step{Trailer: md, Err: status.FromProto(unavailableWith(details...)).Err()}
	}
}

// answerNothing answers nothing: the attempt ends only at the caller's deadline
// (the server's grpc-timeout and the caller's context both end it).
func answerNothing(*hostileServer, int) bufconntest.Step { return bufconntest.Step{Hang: true} }

// headersFirst sends headers (x-attempt: n), so that the response is not
// trailers-only, then does act.
func headersFirst(act hostileAct) hostileAct {
	return func(s *hostileServer, n int) bufconntest.Step {
		st := act(s, n)
		st.Header = true
		return st
	}
}

// headersThenDown sends headers, then fails with UNAVAILABLE before any
// message.
var headersThenDown = headersFirst(failWithStatus(&spb.Status{Code: int32(codes.Unavailable), Message: "hostile: headers, then down"}))

// cutConnections cuts every connection to the server, as a crash would, and
// waits until the server noticed.
func cutConnections(s *hostileServer, _ int) bufconntest.Step {
	return bufconntest.Step{Before: func(context.Context) error { s.Cut(); return nil }, Hang: true}
}

// stopServer stops the whole server (listener and connections) for good.
func stopServer(s *hostileServer, _ int) bufconntest.Step {
	return bufconntest.Step{Before: func(context.Context) error {
		go s.Stop() // Stop waits for this handler
		return nil
	}, Hang: true}
}

// afterFirstResponse sends the first response, waits until the caller received
// it (so the stream committed), then does act (one of those that act in
// Before, then hang).
func afterFirstResponse(act hostileAct) hostileAct {
	return func(s *hostileServer, n int) bufconntest.Step {
		then := act(s, n)
		return bufconntest.Step{Send: 1, Hang: then.Hang, After: func(ctx context.Context) error {
			select {
			case <-s.delivered:
			case <-ctx.Done():
				return ctx.Err()
			}
			return then.Before(ctx)
		}}
	}
}

// firstAttempts does act in the first n attempts, and lets the others succeed.
func firstAttempts(n int, act hostileAct) hostileAct {
	return func(s *hostileServer, i int) bufconntest.Step {
		if i < n {
			return act(s, i)
		}
		return succeed
	}
}

func sumOf(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum
}

const year = 365 * 24 * time.Hour

// hostileCase is one hostile behaviour and what it must come to.
type hostileCase struct {
	name   string
	kinds  []callKind // nil: every kind
	act    hostileAct
	header bool // the caller calls Header before receiving

	gaps   []time.Duration // between the attempts the client made
	end    time.Duration   // when the call ends, if not after the gaps
	server int             // the attempts the server sees, if not len(gaps)+1
	code   codes.Code
	reason grpcbackoff.Reason // 0: the error, if any, is not a *grpcbackoff.Error
	first  bool               // the caller got the first response, r0, before the error
	check  func(t *testing.T, err error)
}

// exhausted: five attempts at 0, 1, 3, 7 and 15 s.
var exhaustedGaps = bufconntest.Seconds(1, 2, 4, 8)

func hostileCases() []hostileCase {
	big := strings.Repeat("~", 1<<20)
	var infos []proto.Message
	for i := range 1000 {
		infos = append(infos, &errdetails.ErrorInfo{Reason: "HOSTILE", Domain: "hostile.example.com",
			Metadata: map[string]string{"i": strconv.Itoa(i), "pad": strings.Repeat("p", 64)}})
	}
	return []hostileCase{
		{name: "RetryInfo 100 years: not retried", act: failWithRetryInfo(durationpb.New(100 * year)),
			code: codes.Unavailable, reason: grpcbackoff.ReasonServerRefused},
		{name: "RetryInfo 10000 years (largest valid, saturates)", act: failWithRetryInfo(&durationpb.Duration{Seconds: 315_576_000_000}),
			code: codes.Unavailable, reason: grpcbackoff.ReasonServerRefused},
		{name: "RetryInfo 10^15 s (out of range): not retried", act: failWithRetryInfo(&durationpb.Duration{Seconds: 1e15}),
			code: codes.Unavailable, reason: grpcbackoff.ReasonServerRefused},
		{name: "RetryInfo −1 s: ignored", act: failWithRetryInfo(durationpb.New(-time.Second)),
			gaps: exhaustedGaps, code: codes.Unavailable, reason: grpcbackoff.ReasonExhausted},
		{name: "RetryInfo 0 s: backoff", act: failWithRetryInfo(durationpb.New(0)),
			gaps: exhaustedGaps, code: codes.Unavailable, reason: grpcbackoff.ReasonExhausted},
		{name: "RetryInfo invalid (1 s, −1 ns): ignored", act: failWithRetryInfo(&durationpb.Duration{Seconds: 1, Nanos: -1}),
			gaps: exhaustedGaps, code: codes.Unavailable, reason: grpcbackoff.ReasonExhausted},
		{name: "RetryInfo without delay: ignored", act: failWithRetryInfo(nil),
			gaps: exhaustedGaps, code: codes.Unavailable, reason: grpcbackoff.ReasonExhausted},
		{name: "RetryInfo 20 s, over the 8 s Max: waited while the deadline allows", act: failWithRetryInfo(durationpb.New(20 * time.Second)),
			gaps: bufconntest.Seconds(20), code: codes.Unavailable, reason: grpcbackoff.ReasonDeadline},
		{name: "RetryInfo = Max every time: stops before the deadline", act: failWithRetryInfo(durationpb.New(8 * time.Second)),
			gaps: bufconntest.Seconds(8, 8, 8), code: codes.Unavailable, reason: grpcbackoff.ReasonDeadline},
		{name: "pushback 0 forever: backoff, not a spin", act: failWithPushback([]string{"0"}),
			gaps: exhaustedGaps, code: codes.Unavailable, reason: grpcbackoff.ReasonExhausted},
		{name: "pushback 0 and RetryInfo 0 forever", act: failWithPushback([]string{"0"}, &errdetails.RetryInfo{RetryDelay: durationpb.New(0)}),
			gaps: exhaustedGaps, code: codes.Unavailable, reason: grpcbackoff.ReasonExhausted},
		{name: "pushback −1: not retried", act: failWithPushback([]string{"-1"}),
			code: codes.Unavailable, reason: grpcbackoff.ReasonServerRefused},
		{name: "pushback garbage: not retried", act: failWithPushback([]string{"soon"}),
			code: codes.Unavailable, reason: grpcbackoff.ReasonServerRefused},
		{name: "pushback sent twice: not retried", act: failWithPushback([]string{"0", "0"}),
			code: codes.Unavailable, reason: grpcbackoff.ReasonServerRefused},
		{name: "pushback 2^70 ms (saturates): not retried", act: failWithPushback([]string{"1180591620717411303424"}),
			code: codes.Unavailable, reason: grpcbackoff.ReasonServerRefused},
		{name: "1000 ErrorInfo details: kept", act: failWithStatus(unavailableWith(infos...)),
			gaps: exhaustedGaps, code: codes.Unavailable, reason: grpcbackoff.ReasonExhausted,
			check: func(t *testing.T, err error) {
				if n := len(status.Convert(err).Details()); n != 1000 {
					t.Errorf("len(Details()) = %d, want 1000", n)
				}
			}},
		{name: "1 MiB message: kept", act: failWithStatus(&spb.Status{Code: int32(codes.Unavailable), Message: big}),
			gaps: exhaustedGaps, code: codes.Unavailable, reason: grpcbackoff.ReasonExhausted,
			check: func(t *testing.T, err error) {
				if msg := status.Convert(err).Message(); !strings.HasPrefix(msg, big) || !strings.Contains(msg, "5 attempts") {
					t.Errorf("message (%d bytes) = %.40q…, want the server's 1 MiB message and the attempts", len(msg), msg)
				}
			}},
		// A call commits once headers arrive (gRFC A6): the server's error,
		// unchanged, after one attempt, whatever the trailer says. (Re-derived
		// for issue 20: streams were retried unless the caller had asked for
		// the headers.)
		{name: "headers, then UNAVAILABLE with pushback 3000 ms: committed", act: headersFirst(failWithPushback([]string{"3000"})),
			code: codes.Unavailable},
		{name: "headers, then UNAVAILABLE with RetryInfo 100 years: committed", act: headersFirst(failWithRetryInfo(durationpb.New(100 * year))),
			code: codes.Unavailable},
		{name: "no answer: the caller's deadline", act: answerNothing,
			end: hostileDeadline, code: codes.DeadlineExceeded},
		{name: "UNAVAILABLE, then no answer: the caller's deadline", act: func(s *hostileServer, n int) bufconntest.Step {
			if n == 0 {
				return bufconntest.Fail(status.Error(codes.Unavailable, "hostile"))
			}
			return answerNothing(s, n)
		}, gaps: bufconntest.Seconds(1), end: hostileDeadline, code: codes.DeadlineExceeded, reason: grpcbackoff.ReasonDeadline},
		{name: "trailers only, twice: retried", act: firstAttempts(2, failWithStatus(unavailableWith())),
			gaps: bufconntest.Seconds(1, 2), code: codes.OK},
		{name: "headers then UNAVAILABLE: committed", act: firstAttempts(2, headersThenDown),
			code: codes.Unavailable},
		{name: "headers then UNAVAILABLE, Header called: committed", kinds: streamKinds, act: headersThenDown, header: true,
			code: codes.Unavailable},
		{name: "connection cut before any response: retried", act: firstAttempts(1, cutConnections),
			gaps: bufconntest.Seconds(1), code: codes.OK},
		{name: "connection cut before any response, forever", act: cutConnections,
			gaps: exhaustedGaps, code: codes.Unavailable, reason: grpcbackoff.ReasonExhausted},
		{name: "connection cut after the first response: not retried", kinds: responseStreams, act: afterFirstResponse(cutConnections),
			code: codes.Unavailable, first: true},
		{name: "server stopped before any response", act: stopServer,
			gaps: exhaustedGaps, server: 1, code: codes.Unavailable, reason: grpcbackoff.ReasonExhausted},
		{name: "server stopped after the first response: not retried", kinds: responseStreams, act: afterFirstResponse(stopServer),
			code: codes.Unavailable, first: true},
	}
}

func TestHostileServers(t *testing.T) {
	for _, tc := range hostileCases() {
		kinds := tc.kinds
		if kinds == nil {
			kinds = allKinds
		}
		for _, k := range kinds {
			t.Run(tc.name+"/"+k.String(), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { checkHostile(t, tc, k) })
			})
		}
	}
}

// checkHostile makes one call of kind k to a server that does tc.act, with a
// Retrier of hostilePolicy and the default throttle, and checks what came of
// it.
func checkHostile(t *testing.T, tc hostileCase, k callKind) {
	srv := newHostileServer(t, tc.act)
	var cnt attemptLog
	var retries []interceptor.Retry
	r, err := interceptor.New(hostilePolicy(), testService, interceptor.WithOnRetry(func(r interceptor.Retry) { retries = append(retries, r) }))
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Client(t, append(r.DialOptions(), cnt.dialOptions()...)...)

	ctx, cancel := context.WithTimeout(t.Context(), hostileDeadline)
	defer cancel()
	start := time.Now()
	res := runCall(ctx, c, k, hostileMessages, howToRun{Header: tc.header, Received: srv.markDelivered})
	took := time.Since(start)

	wantEnd := sumOf(tc.gaps)
	if tc.end != 0 {
		wantEnd = tc.end
	}
	if got, want := took, wantEnd; got != want {
		t.Errorf("the call returned after %v, want %v", got, want)
	}
	if took > hostileDeadline {
		t.Errorf("the call returned after %v, past its deadline (%v)", took, hostileDeadline)
	}
	if got, want := cnt.gaps(), tc.gaps; !slices.Equal(got, want) {
		t.Errorf("gaps between attempts = %v, want %v", got, want)
	}
	attempts := len(tc.gaps) + 1
	wantSeen := attempts
	if tc.server > 0 {
		wantSeen = tc.server
	}
	if got := srv.Count(); got != wantSeen || got > hostilePolicy().MaxAttempts {
		t.Errorf("attempts the server saw = %d, want %d (MaxAttempts %d)", got, wantSeen, hostilePolicy().MaxAttempts)
	}
	if got := len(retries); got != attempts-1 {
		t.Errorf("retries announced to WithOnRetry = %d, want %d", got, attempts-1)
	}
	for _, rt := range retries {
		if want := hostilePolicy().Nominal(rt.Attempt - 1); rt.Delay < want {
			t.Errorf("retry after attempt %d waits %v, want at least the Policy's %v", rt.Attempt, rt.Delay, want)
		}
	}

	if got := status.Code(res.Err); got != tc.code {
		t.Errorf("status.Code(err) = %v, want %v (err %.200v)", got, tc.code, res.Err)
	}
	var e *grpcbackoff.Error
	switch isErr := errors.As(res.Err, &e); {
	case tc.reason == 0 && isErr:
		t.Errorf("err = %.200v, want the server's error, not a *grpcbackoff.Error", e)
	case tc.reason != 0 && !isErr:
		t.Errorf("err = %.200v (%T), want a *grpcbackoff.Error", res.Err, res.Err)
	case isErr && (e.Attempts != attempts || e.Reason != tc.reason || e.Elapsed != took):
		// The first attempt is not timed: Elapsed runs from its end.
		t.Errorf("Attempts, Reason, Elapsed = %d, %v, %v; want %d, %v, %v", e.Attempts, e.Reason, e.Elapsed, attempts, tc.reason, took)
	}

	var want []string
	switch {
	case tc.code == codes.OK:
		want = successResponses(k)
	case tc.first:
		want = []string{"r0"}
	}
	if !slices.Equal(res.Got, want) {
		t.Errorf("received %q, want %q", res.Got, want)
	}
	if tc.header {
		if got := res.Header.Get("x-attempt"); !slices.Equal(got, []string{"0"}) {
			t.Errorf("Header() x-attempt = %q, want the first attempt's, 0", got)
		}
	}
	if tc.check != nil {
		tc.check(t, res.Err)
	}
}

// liveHeap returns the live heap after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC() // the second empties the pools' victim caches
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestHostileMemoryBounded checks that hostile answers do not make memory
// grow with the number of calls or attempts: calls that each fail five times
// with a 1 MiB message or with 1000 details leave the live heap where it was,
// and a stream that sends 32 MiB before it could commit keeps at most its
// buffer limit. The live heap is measured after a full collection; the slack
// covers grpc's own buffers and pools.
func TestHostileMemoryBounded(t *testing.T) {
	if raceEnabled {
		t.Skip("a heap's growth: run without -race (the README's test command)")
	}
	var infos []proto.Message
	for i := range 1000 {
		infos = append(infos, &errdetails.ErrorInfo{Reason: "HOSTILE", Metadata: map[string]string{"i": strconv.Itoa(i)}})
	}
	calls := []struct {
		name  string
		st    *spb.Status
		calls int
		slack uint64
	}{
		// A leak of one status per call would be 6 MiB, of every attempt's 30 MiB.
		{"1 MiB message", &spb.Status{Code: int32(codes.Unavailable), Message: strings.Repeat("~", 1<<20)}, 6, 2 << 20},
		// About 60 KiB on the wire, several times that decoded: a leak of
		// every attempt's status would be well over 2 MiB.
		{"1000 details", unavailableWith(infos...), 10, 2 << 20},
	}
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := newHostileServer(t, failWithStatus(tc.st))
				c := srv.Client(t, interceptor.DialOptions(hostilePolicy(), testService, interceptor.WithoutThrottle())...)
				run := func(n int) {
					for range n {
						res := runCall(t.Context(), c, unary, nil, howToRun{})
						if e := (*grpcbackoff.Error)(nil); !errors.As(res.Err, &e) || e.Attempts != 5 {
							t.Fatalf("err = %.100v, want 5 attempts", res.Err)
						}
						_ = res.Err.Error() // formatting the message must not pin anything either
					}
				}
				run(1) // warm up grpc's buffers and pools
				before := liveHeap()
				var ms0, ms1 runtime.MemStats
				runtime.ReadMemStats(&ms0)
				run(tc.calls)
				runtime.ReadMemStats(&ms1)
				after := liveHeap()
				t.Logf("status of %d KiB on the wire; %d calls of 5 attempts: live heap %d KiB → %d KiB; %d KiB allocated per call",
					proto.Size(tc.st)>>10, tc.calls, before>>10, after>>10, (ms1.TotalAlloc-ms0.TotalAlloc)/uint64(tc.calls)>>10)
				if after > before+tc.slack {
					t.Errorf("live heap grew from %d KiB to %d KiB over %d calls, want at most %d KiB more",
						before>>10, after>>10, tc.calls, tc.slack>>10)
				}
			})
		})
	}

	t.Run("stream replay buffer", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// The server reads everything and fails at the half-close: the
			// stream has not committed by receiving, only the buffer limit
			// can commit it.
			srv := newHostileServer(t, func(*hostileServer, int) bufconntest.Step {
				st := succeed
				st.Discard = true // 32 MiB: only the interceptor may keep them
				return st
			})
			c := srv.Client(t, interceptor.DialOptions(hostilePolicy(), testService, interceptor.WithoutThrottle())...)
			before := liveHeap()
			st, err := c.StreamingInputCall(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			const msgSize, total = 64 << 10, 32 << 20
			for range total / msgSize { // a fresh message each time: only the interceptor can keep them
				if err := st.Send(&testgrpc.StreamingInputCallRequest{Payload: &testgrpc.Payload{Body: make([]byte, msgSize)}}); err != nil {
					t.Fatalf("Send = %v, want nil", err)
				}
			}
			during := liveHeap()
			resp, err := st.CloseAndRecv()
			if err != nil || resp.GetAggregatedPayloadSize() != total/msgSize {
				t.Fatalf("CloseAndRecv = %v, %v; want %d messages received", resp, err, total/msgSize)
			}
			t.Logf("sent %d MiB on an uncommitted stream: live heap %d KiB → %d KiB (buffer limit %d KiB)",
				total>>20, before>>10, during>>10, interceptor.DefaultBufferLimit>>10)
			const slack = 8 << 20 // grpc's flow-control windows and buffers
			if during > before+interceptor.DefaultBufferLimit+slack {
				t.Errorf("live heap grew from %d KiB to %d KiB with the stream open, want at most the buffer limit (%d KiB) + %d KiB",
					before>>10, during>>10, interceptor.DefaultBufferLimit>>10, slack>>10)
			}
		})
	})
}
