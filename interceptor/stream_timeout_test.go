package interceptor_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/platformkit/grpcbackoff/internal/bufconntest"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
)

// The tests of Policy.AttemptTimeout on streams: until the server answers an
// attempt (headers or a message), it bounds each wait of the caller in an
// operation on it.

// exactWithAttemptTimeout is exact with an AttemptTimeout of 10 s. Its codes do
// not include DEADLINE_EXCEEDED nor CANCELED: a cut attempt is retried all
// the same.
func exactWithAttemptTimeout() grpcbackoff.Policy {
	p := bufconntest.Exact()
	p.AttemptTimeout = 10 * time.Second
	return p
}

// neverAnswers is the step of an attempt that reads everything and never
// answers.
var neverAnswers = bufconntest.Step{Recv: bufconntest.UntilHalfClose, Hang: true}

// attemptDurations returns how long each attempt lasted on the server. Call it
// once the handlers are done (synctest.Wait): the caller may learn of an
// attempt's end before its handler returns.
func attemptDurations(as []bufconntest.Attempt) []time.Duration {
	var d []time.Duration
	for _, a := range as {
		d = append(d, a.End.Sub(a.At))
	}
	return d
}

func TestStreamAttemptTimeoutRetries(t *testing.T) {
	for _, k := range streamKinds {
		t.Run(k.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := bufconntest.NewServer(t, bufconntest.Steps(neverAnswers, neverAnswers, bufconntest.Succeed(2)))
				rec := &recorder{}
				c := srv.Client(t, interceptor.DialOptions(exactWithAttemptTimeout(), testService, interceptor.WithoutThrottle(), interceptor.WithObserver(rec))...)
				msgs := callerMessages(k)
				start := time.Now()
				r := runCall(callerContext(t), c, k, msgs, howToRun{})
				if r.Err != nil || len(r.SendErrs) > 0 {
					t.Fatalf("stream failed: %v (send errors %v), want the cut attempts retried", r.Err, r.SendErrs)
				}
				if want := expectedResponses(k, msgs, 2); !slices.Equal(r.Got, want) {
					t.Errorf("received %q, want %q", r.Got, want)
				}
				synctest.Wait()
				as := srv.Attempts("")
				if len(as) != 3 {
					t.Fatalf("attempts = %d, want 3", len(as))
				}
				// Starts at 0, 10+1 and 11+10+2 s.
				if got, want := attemptGaps(as), bufconntest.Seconds(11, 12); !slices.Equal(got, want) {
					t.Errorf("gaps between attempts = %v, want %v", got, want)
				}
				if got, want := attemptDurations(as[:2]), bufconntest.Seconds(10, 10); !slices.Equal(got, want) {
					t.Errorf("the cut attempts lasted %v, want %v", got, want)
				}
				if got := r.End.Sub(start); got != 23*time.Second {
					t.Errorf("stream ended after %v, want 23s", got)
				}
				checkAttempts(t, as, msgs, true)
				var codesSeen []codes.Code
				for _, x := range rec.retries {
					codesSeen = append(codesSeen, x.Code)
				}
				if want := []codes.Code{codes.DeadlineExceeded, codes.DeadlineExceeded}; !slices.Equal(codesSeen, want) {
					t.Errorf("retries of codes %v, want %v", codesSeen, want)
				}
				if len(rec.ends) != 1 || rec.ends[0].Code != codes.OK || rec.ends[0].Attempts != 3 {
					t.Errorf("ends = %+v, want one, OK after 3 attempts", rec.ends)
				}
			})
		})
	}
}

func TestStreamAttemptTimeoutExhausted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := bufconntest.NewServer(t, bufconntest.Steps(neverAnswers))
		p := exactWithAttemptTimeout()
		p.MaxAttempts = 2
		c := srv.Client(t, interceptor.DialOptions(p, testService, interceptor.WithoutThrottle())...)
		start := time.Now()
		r := runCall(callerContext(t), c, serverStream, []string{"q"}, howToRun{})
		checkFinal(t, r.Err, codes.DeadlineExceeded, 2, grpcbackoff.ReasonExhausted)
		if msg := status.Convert(r.Err).Message(); !strings.Contains(msg, "AttemptTimeout (10s)") {
			t.Errorf("message = %q, want it to name the AttemptTimeout", msg)
		}
		if got := r.End.Sub(start); got != 21*time.Second {
			t.Errorf("stream ended after %v, want 21s", got)
		}
		synctest.Wait()
		if got, want := attemptDurations(srv.Attempts("")), bufconntest.Seconds(10, 10); !slices.Equal(got, want) {
			t.Errorf("attempts lasted %v, want %v", got, want)
		}
	})
}

// An attempt ended by the caller's deadline is not a cut: it is not retried.
func TestStreamAttemptTimeoutCallerDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := bufconntest.NewServer(t, bufconntest.Steps(neverAnswers))
		c := srv.Client(t, interceptor.DialOptions(exactWithAttemptTimeout(), testService, interceptor.WithoutThrottle())...)
		ctx, cancel := context.WithTimeout(callerContext(t), 15*time.Second)
		defer cancel()
		start := time.Now()
		r := runCall(ctx, c, bidi, messages(2), howToRun{})
		// Attempt 1 is cut at 10 s; attempt 2 starts at 11 s and is ended by
		// the caller's deadline at 15 s.
		checkFinal(t, r.Err, codes.DeadlineExceeded, 2, grpcbackoff.ReasonDeadline)
		if got := r.End.Sub(start); got != 15*time.Second {
			t.Errorf("stream ended after %v, want 15s", got)
		}
		synctest.Wait()
		if got, want := attemptDurations(srv.Attempts("")), bufconntest.Seconds(10, 4); !slices.Equal(got, want) {
			t.Errorf("attempts lasted %v, want %v", got, want)
		}
	})
}

// A stream whose caller received a message is never cut, however long it
// then stalls.
func TestStreamAttemptTimeoutNotAfterMessage(t *testing.T) {
	for _, k := range []callKind{serverStream, bidi} {
		t.Run(k.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := bufconntest.NewServer(t, bufconntest.Steps(bufconntest.Step{Recv: bufconntest.UntilHalfClose, Send: 1, Hang: true}))
				c := srv.Client(t, interceptor.DialOptions(exactWithAttemptTimeout(), interceptor.WithoutThrottle())...)
				ctx, cancel := context.WithTimeout(callerContext(t), time.Minute)
				defer cancel()
				start := time.Now()
				r := runCall(ctx, c, k, callerMessages(k), howToRun{})
				if !slices.Equal(r.Got, []string{"r0"}) || status.Code(r.Err) != codes.DeadlineExceeded {
					t.Errorf("received %q, then %v; want r0, then the caller's DEADLINE_EXCEEDED", r.Got, r.Err)
				}
				var e *grpcbackoff.Error
				if errors.As(r.Err, &e) {
					t.Errorf("err = %v, want the attempt's error: the stream committed", r.Err)
				}
				if got := r.End.Sub(start); got != time.Minute {
					t.Errorf("stream ended after %v, want 1m0s (the caller's deadline)", got)
				}
				synctest.Wait()
				if got, want := attemptDurations(srv.Attempts("")), bufconntest.Seconds(60); !slices.Equal(got, want) {
					t.Errorf("attempts lasted %v, want %v: never cut", got, want)
				}
			})
		})
	}
}

// Headers commit the stream, and an attempt whose server answered with its
// headers is never cut, however long its first message takes: the caller's
// deadline ends it. (Re-derived for issue 20: the attempt was cut at 10 s
// before, though its server had answered.)
func TestStreamAttemptTimeoutAfterCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := bufconntest.NewServer(t, bufconntest.Steps(bufconntest.Step{Header: true, Hang: true}, bufconntest.Succeed(1)))
		c := srv.Client(t, interceptor.DialOptions(exactWithAttemptTimeout(), interceptor.WithoutThrottle())...)
		ctx, cancel := context.WithTimeout(callerContext(t), time.Minute)
		defer cancel()
		start := time.Now()
		r := runCall(ctx, c, serverStream, []string{"q"}, howToRun{Header: true})
		if r.Header == nil || len(r.Got) != 0 || status.Code(r.Err) != codes.DeadlineExceeded {
			t.Errorf("header %v, received %q, then %v; want headers, then the caller's DEADLINE_EXCEEDED", r.Header, r.Got, r.Err)
		}
		if msg := status.Convert(r.Err).Message(); strings.Contains(msg, "AttemptTimeout") {
			t.Errorf("message = %q: the attempt was cut", msg)
		}
		if got := r.End.Sub(start); got != time.Minute {
			t.Errorf("stream ended after %v, want 1m0s (the caller's deadline)", got)
		}
		if n := len(srv.Attempts("")); n != 1 {
			t.Errorf("attempts = %d, want 1: the stream committed", n)
		}
	})
}

// TestStreamAttemptTimeoutUpload: a slow producer whose every Send completes
// at once is never cut, AttemptTimeout or not: the caller never waits on the
// server. (Re-derived for issue 20: with AttemptTimeout 10 s the attempt was
// cut at 10 s while the caller was still sending, and the whole upload
// replayed.)
func TestStreamAttemptTimeoutUpload(t *testing.T) {
	const method = "/grpc.testing.TestService/StreamingInputCall"
	noTimeout := exactWithAttemptTimeout()
	noTimeout.AttemptTimeout = 0
	cases := []struct {
		name     string
		opts     []interceptor.Option
		attempts int
		took     time.Duration
	}{
		{"AttemptTimeout 10s", nil, 1, 28 * time.Second},
		{"AttemptTimeout 0 for the method", []interceptor.Option{interceptor.WithMethod(method, noTimeout)}, 1, 28 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := bufconntest.NewServer(t, bufconntest.Steps(bufconntest.Succeed(1)))
				c := srv.Client(t, interceptor.DialOptions(exactWithAttemptTimeout(), append([]interceptor.Option{interceptor.WithoutThrottle()}, tc.opts...)...)...)
				// A message every 4 s, from 0 to 24 s; the half-close at 28 s.
				msgs := messages(7)
				start := time.Now()
				s, err := c.StreamingInputCall(callerContext(t))
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range msgs {
					if err := s.Send(inputRequest(m)); err != nil {
						t.Fatalf("Send(%s): %v", m, err)
					}
					time.Sleep(4 * time.Second) // a slow producer
				}
				resp, err := s.CloseAndRecv()
				if err != nil {
					t.Fatalf("CloseAndRecv: %v", err)
				}
				if got := int(resp.GetAggregatedPayloadSize()); got != len(msgs) {
					t.Errorf("the server counted %d messages, want %d", got, len(msgs))
				}
				if got := time.Since(start); got != tc.took {
					t.Errorf("upload took %v, want %v", got, tc.took)
				}
				as := srv.Attempts("")
				if len(as) != tc.attempts {
					t.Fatalf("attempts = %d, want %d", len(as), tc.attempts)
				}
				checkAttempts(t, as, msgs, true)
			})
		})
	}
}

// TestStreamAttemptTimeoutAnsweredByHeaders: AttemptTimeout 1 s, a server that
// sends its headers at once and its message at 3 s. The headers are the
// server's answer: the attempt is never cut, its handler runs once, and the
// caller gets the message. Before issue 20 the attempt was cut at 1 s and
// replayed to 8 handlers, and the caller never got the message.
func TestStreamAttemptTimeoutAnsweredByHeaders(t *testing.T) {
	p := bufconntest.Exact()
	p.AttemptTimeout = time.Second
	for _, k := range []callKind{serverStream, bidi} {
		t.Run(k.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := bufconntest.NewServer(t, bufconntest.Steps(bufconntest.Step{Header: true, Recv: bufconntest.UntilHalfClose, Pause: 3 * time.Second, Send: 1}))
				c := srv.Client(t, interceptor.DialOptions(p, interceptor.WithoutThrottle())...)
				start := time.Now()
				r := runCall(callerContext(t), c, k, callerMessages(k), howToRun{})
				if r.Err != nil || !slices.Equal(r.Got, []string{"r0"}) {
					t.Errorf("received %q, then %v; want r0 and a clean end", r.Got, r.Err)
				}
				if got := r.End.Sub(start); got != 3*time.Second {
					t.Errorf("stream ended after %v, want 3s", got)
				}
				if n := len(srv.Attempts("")); n != 1 {
					t.Errorf("the handler ran %d times, want once", n)
				}
			})
		})
	}
}

// TestStreamAttemptTimeoutCallerPace: AttemptTimeout 1 s, an echo server that
// answers at once, and a caller that sends 5 messages 600 ms apart and only
// then reads. The caller's pace is never the reason for a cut: one attempt,
// every message delivered, every echo received. Before issue 20 the attempt
// was cut at 1 s: two echoes, then DEADLINE_EXCEEDED, and messages 2–4,
// accepted by Send, reached no server.
func TestStreamAttemptTimeoutCallerPace(t *testing.T) {
	p := bufconntest.Exact()
	p.AttemptTimeout = time.Second
	synctest.Test(t, func(t *testing.T) {
		srv := bufconntest.NewServer(t, bufconntest.Steps(bufconntest.Step{Recv: bufconntest.UntilHalfClose, Echo: true}))
		c := srv.Client(t, interceptor.DialOptions(p, interceptor.WithoutThrottle())...)
		s, err := c.FullDuplexCall(callerContext(t))
		if err != nil {
			t.Fatal(err)
		}
		msgs := messages(5)
		sendPaced(t, s, msgs, 600*time.Millisecond)
		var got []string
		for {
			m, err := s.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("Recv after %q: %v", got, err)
			}
			got = append(got, string(m.GetPayload().GetBody()))
		}
		if want := responses(len(msgs)); !slices.Equal(got, want) {
			t.Errorf("received %q, want %q", got, want)
		}
		as := srv.Attempts("")
		if len(as) != 1 || !slices.Equal(as[0].Msgs, msgs) {
			t.Errorf("attempts %+v, want one that received %q", as, msgs)
		}
	})
}

// TestStreamAttemptTimeoutSlowUpload: a slow but healthy upload, 1 MiB in 64
// KiB messages to a server that reads one a second (flow control holds each
// Send until the server reads), with AttemptTimeout 5 s. Each Send completes
// as the server reads, so the upload is never cut, however long it takes.
// Before issue 20 it was cut at 5 s, with 0 bytes counted.
func TestStreamAttemptTimeoutSlowUpload(t *testing.T) {
	const n, size = 16, 64 << 10
	p := bufconntest.Exact()
	p.AttemptTimeout = 5 * time.Second
	synctest.Test(t, func(t *testing.T) {
		// A fixed 64 KiB window (which also turns off the server's dynamic
		// window), so that the client can be at most a message ahead.
		srv := bufconntest.NewServer(t, bufconntest.Steps(bufconntest.Step{Recv: bufconntest.UntilHalfClose, RecvEvery: time.Second}),
			grpc.InitialWindowSize(size), grpc.InitialConnWindowSize(size))
		c := srv.Client(t, interceptor.DialOptions(p, interceptor.WithoutThrottle())...)
		start := time.Now()
		s, err := c.StreamingInputCall(callerContext(t))
		if err != nil {
			t.Fatal(err)
		}
		body := strings.Repeat("x", size-16)
		for i := range n {
			if err := s.Send(&testgrpc.StreamingInputCallRequest{Payload: &testgrpc.Payload{Body: []byte(body)}}); err != nil {
				t.Fatalf("Send %d: %v", i, err)
			}
		}
		resp, err := s.CloseAndRecv()
		if err != nil {
			t.Fatalf("CloseAndRecv after %v: %v", time.Since(start), err)
		}
		if got := resp.GetAggregatedPayloadSize(); got != n {
			t.Errorf("the server counted %d messages, want %d", got, n)
		}
		if took := time.Since(start); took < n*time.Second {
			t.Errorf("the upload took %v, want at least %v: the server did not read slowly", took, n*time.Second)
		}
		if a := srv.Attempts(""); len(a) != 1 {
			t.Errorf("attempts = %d, want 1", len(a))
		}
	})
}

// TestStreamAttemptTimeoutReceiverWhileSending: AttemptTimeout 1 s, a server
// that answers once the caller half-closes, and a caller that receives in a
// goroutine of its own while it sends 20 messages 600 ms apart. Each message
// sent restarts the receiver's wait: one attempt, never cut, every message
// delivered. Before, the receiver's wait counted from its start: the attempt
// was cut at 1 s, and again after each replay, until the third attempt's cut
// failed the stream (MaxAttempts 3) and Send of message 11 returned EOF.
func TestStreamAttemptTimeoutReceiverWhileSending(t *testing.T) {
	p := bufconntest.Exact()
	p.AttemptTimeout, p.MaxAttempts = time.Second, 3
	synctest.Test(t, func(t *testing.T) {
		srv := bufconntest.NewServer(t, bufconntest.Steps(bufconntest.Step{Recv: bufconntest.UntilHalfClose, Send: 1}))
		c := srv.Client(t, interceptor.DialOptions(p, interceptor.WithoutThrottle())...)
		s, err := c.FullDuplexCall(callerContext(t))
		if err != nil {
			t.Fatal(err)
		}
		received := make(chan error, 1)
		go func() {
			n := 0
			for {
				_, err := s.Recv()
				if err == io.EOF && n == 1 {
					received <- nil
					return
				}
				if err != nil {
					received <- fmt.Errorf("Recv after %d responses: %w", n, err)
					return
				}
				n++
			}
		}()
		msgs := messages(20)
		sendPaced(t, s, msgs, 600*time.Millisecond)
		if err := <-received; err != nil {
			t.Error(err)
		}
		if as := srv.Attempts(""); len(as) != 1 || !slices.Equal(as[0].Msgs, msgs) {
			t.Errorf("%d attempts, want one that received all %d messages", len(as), len(msgs))
		}
	})
}

// TestStreamAttemptTimeoutReceiverAfterSending: the same caller against a
// server that reads and never answers, the caller sending 3 messages 600 ms
// apart and then neither sending nor half-closing. The receiver has waited
// 1 s once the last message was sent: the attempt is cut then, at 2.2 s, and
// retried, as a hung server's must be.
func TestStreamAttemptTimeoutReceiverAfterSending(t *testing.T) {
	p := bufconntest.Exact()
	p.AttemptTimeout, p.MaxAttempts = time.Second, 2
	synctest.Test(t, func(t *testing.T) {
		srv := bufconntest.NewServer(t, bufconntest.Steps(neverAnswers))
		c := srv.Client(t, interceptor.DialOptions(p, testService, interceptor.WithoutThrottle())...)
		s, err := c.FullDuplexCall(callerContext(t))
		if err != nil {
			t.Fatal(err)
		}
		received := make(chan error, 1)
		go func() {
			_, err := s.Recv()
			received <- err
		}()
		for i, m := range messages(3) {
			if i > 0 {
				time.Sleep(600 * time.Millisecond)
			}
			if err := s.Send(outputRequest(m)); err != nil {
				t.Fatalf("Send(%s): %v", m, err)
			}
		}
		err = <-received
		var e *grpcbackoff.Error
		if !errors.As(err, &e) || status.Code(err) != codes.DeadlineExceeded || e.Attempts != 2 {
			t.Errorf("Recv: %v, want DEADLINE_EXCEEDED after 2 cut attempts", err)
		}
		synctest.Wait()
		as := srv.Attempts("")
		if len(as) != 2 {
			t.Fatalf("%d attempts, want 2", len(as))
		}
		if got, want := as[0].End.Sub(as[0].At), 2200*time.Millisecond; got != want {
			t.Errorf("the first attempt lasted %v, want %v (cut 1 s after the last message)", got, want)
		}
	})
}

// sendPaced sends msgs on s, waiting gap after each (the caller's own
// pace), then half-closes.
func sendPaced(t *testing.T, s testgrpc.TestService_FullDuplexCallClient, msgs []string, gap time.Duration) {
	t.Helper()
	for _, m := range msgs {
		if err := s.Send(outputRequest(m)); err != nil {
			t.Fatalf("Send(%s): %v", m, err)
		}
		time.Sleep(gap)
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
}

// TestStreamAttemptTimeoutSlowReplay: AttemptTimeout 3 s, a 64 KiB window, and
// an upload of 8 messages of 30 KiB that the server reads one per 500 ms;
// the first attempt fails after reading them all. The replay's sends are the
// caller's for the wait: the server reading the replay is never cut, and
// the second attempt succeeds. (Issue 27: every replay was cut after 6 of 8
// messages; 8 attempts, DEADLINE_EXCEEDED at 2 min.)
func TestStreamAttemptTimeoutSlowReplay(t *testing.T) {
	const n, size, window = 8, 30 << 10, 64 << 10
	p := bufconntest.Exact()
	p.AttemptTimeout = 3 * time.Second
	synctest.Test(t, func(t *testing.T) {
		srv := bufconntest.NewServer(t, bufconntest.Steps(
			bufconntest.Step{Recv: bufconntest.UntilHalfClose, RecvEvery: 500 * time.Millisecond, Err: status.Error(codes.Unavailable, "restarting")},
			bufconntest.Step{Recv: bufconntest.UntilHalfClose, RecvEvery: 500 * time.Millisecond}),
			grpc.InitialWindowSize(window), grpc.InitialConnWindowSize(window))
		c := srv.Client(t, interceptor.DialOptions(p, testService, interceptor.WithoutThrottle())...)
		s, err := c.StreamingInputCall(callerContext(t))
		if err != nil {
			t.Fatal(err)
		}
		body := strings.Repeat("x", size)
		for i := range n {
			if err := s.Send(&testgrpc.StreamingInputCallRequest{Payload: &testgrpc.Payload{Body: []byte(body)}}); err != nil {
				t.Fatalf("Send %d: %v", i, err)
			}
		}
		resp, err := s.CloseAndRecv()
		if err != nil || resp.GetAggregatedPayloadSize() != n {
			t.Fatalf("CloseAndRecv: %v, %d messages counted; want success and %d", err, resp.GetAggregatedPayloadSize(), n)
		}
		if a := srv.Attempts(""); len(a) != 2 {
			t.Errorf("attempts = %d, want 2", len(a))
		}
	})
}
