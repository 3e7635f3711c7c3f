package guard_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/guard"
	"github.com/platformkit/grpcbackoff/interceptor"
)

var (
	errUnavailable = status.Error(codes.Unavailable, "down")
	stop           = []string{"-1"}
)

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name string
		o    guard.Options
		want []string // in the error
	}{
		{"share above 1", guard.Options{Share: 1.5}, []string{"Options.Share (1.5) must be in (0, 1]"}},
		{"share negative", guard.Options{Share: -0.1}, []string{"Options.Share (-0.1)"}},
		{"share NaN", guard.Options{Share: math.NaN()}, []string{"Options.Share (NaN)"}},
		{"window negative", guard.Options{Window: -time.Second}, []string{"Options.Window (-1s) must be at least 10ms"}},
		{"window too short", guard.Options{Window: time.Millisecond}, []string{"Options.Window (1ms)"}},
		{"min retries negative", guard.Options{MinRetries: -1}, []string{"Options.MinRetries (-1) must not be negative"}},
		{"client min retries negative", guard.Options{ClientMinRetries: -4}, []string{"Options.ClientMinRetries (-4) must not be negative"}},
		{"code OK", guard.Options{Codes: []codes.Code{codes.Aborted, codes.OK}}, []string{"Options.Codes[1] (OK)"}},
		{"code unknown", guard.Options{Codes: []codes.Code{17}}, []string{"Options.Codes[0] (17) is not a gRPC code"}},
		{"every field at once", guard.Options{Share: 2, Window: -1, MinRetries: -3, ClientMinRetries: -1, Codes: []codes.Code{codes.OK}},
			[]string{"Options.Share (2)", "Options.Window (-1ns)", "Options.MinRetries (-3)", "Options.ClientMinRetries (-1)", "Options.Codes[0] (OK)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := guard.New(tt.o)
			if err == nil || g != nil {
				t.Fatalf("New(%+v) = %v, %v; want nil and an error", tt.o, g, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) || !strings.HasPrefix(err.Error(), "guard: ") {
					t.Errorf("New(%+v) = %q; want it to start with \"guard: \" and contain %q", tt.o, err, w)
				}
			}
		})
	}
	for _, o := range []guard.Options{{}, {Share: 1, Window: 10 * time.Millisecond, MinRetries: 1, ClientMinRetries: 1, Codes: []codes.Code{codes.Aborted, codes.Unavailable}}} {
		if _, err := guard.New(o); err != nil {
			t.Errorf("New(%+v) = %v, want no error", o, err)
		}
	}
}

// warm makes 10 first tries a second from 10 clients for a whole window,
// all served: the traffic the guard's share is of (10 attempts a second,
// so one retry a second at 10%).
func warm(t *testing.T, g *guard.Guard) {
	for i := range 100 {
		attempt(t, g, fmt.Sprintf("10.0.0.%d:5000", i%10+1), 0, nil)
		time.Sleep(100 * time.Millisecond)
	}
}

// within is attempt with a deadline d from now, as grpc-timeout sets it.
func within(t *testing.T, g *guard.Guard, addr string, prev int, err error, d time.Duration) []string {
	t.Helper()
	var ts transportStream
	ctx, cancel := context.WithTimeout(attemptContext(addr, prev, &ts), d)
	defer cancel()
	g.Unary(ctx, "req", &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) { return nil, err })
	return ts.trailer.Get(grpcbackoff.PushbackKey)
}

// TestPacesThenRefuses: an outage begins at a method of 10 attempts a
// second. Its failures take slots of its schedule, about a second apart
// (Share of its attempts): the first carries nothing, the next ones their
// waits, each its own (the calls have no deadline here, so the slots asked
// for are the first free ones). Once the method has MinRetries of harm, a
// failure whose slot is past half the time to its deadline, or more than a
// Window away, carries −1 (before, it is let through). A success, another code, a failure whose
// status says when to retry carry nothing.
func TestPacesThenRefuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGuard(t, guard.Options{})
		warm(t, g)
		var waits []int
		var refusedAt []int
		for i := range 16 {
			addr := fmt.Sprintf("10.0.0.%d:5000", i%10+1)
			var pb []string
			if i == 11 {
				// Its slot, about 10 s away, is past half its 12 s.
				pb = within(t, g, addr, 0, errUnavailable, 12*time.Second)
			} else {
				pb = attempt(t, g, addr, 0, errUnavailable)
			}
			switch {
			case pb == nil:
				waits = append(waits, 0)
			case slices.Equal(pb, stop):
				refusedAt = append(refusedAt, i)
			default:
				ms, err := strconv.Atoi(pb[0])
				if len(pb) != 1 || err != nil || ms <= 0 {
					t.Fatalf("failure %d: pushback %q, want one positive number of milliseconds or -1", i, pb)
				}
				waits = append(waits, ms)
			}
		}
		t.Logf("waits %v ms, refused %v", waits, refusedAt)
		if waits[0] != 0 {
			t.Errorf("the first failure waits %d ms, want none: its slot is free", waits[0])
		}
		for i := 1; i < len(waits); i++ {
			if gap := waits[i] - waits[i-1]; gap < 800 || gap > 1100 {
				t.Errorf("waits %v: %d ms between slots %d and %d, want about a second", waits, gap, i-1, i)
			}
		}
		if len(refusedAt) < 2 || refusedAt[0] != 11 || refusedAt[len(refusedAt)-1] != 15 {
			t.Errorf("refused failures %v, want the one of 3 s deadline (11) and the last ones, past a Window", refusedAt)
		}
		if s := g.State(method); !s.Over || s.Paced != int64(len(waits)-1) || s.Refused != int64(len(refusedAt)) {
			t.Errorf("State = %+v; want Over, %d paced, %d refused", s, len(waits)-1, len(refusedAt))
		}

		retryInfo, _ := status.New(codes.Unavailable, "later").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
		for _, tc := range []struct {
			name string
			err  error
		}{
			{"a success", nil},
			{"NOT_FOUND", status.Error(codes.NotFound, "")},
			{"ABORTED, not in Codes", status.Error(codes.Aborted, "")},
			{"DEADLINE_EXCEEDED", status.Error(codes.DeadlineExceeded, "")},
			{"an error that is not a status", errors.New("plain")},
			{"a RetryInfo detail", retryInfo.Err()},
		} {
			if got := attempt(t, g, "10.0.0.1:5000", 1, tc.err); got != nil {
				t.Errorf("%s: pushback %q, want none", tc.name, got)
			}
		}
	})
}

// TestServedRetriesCostNothing: at a method whose calls each fail once and
// are served by their retry, the retries are refunded: however many, the
// guard never holds them back.
func TestServedRetriesCostNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGuard(t, guard.Options{})
		for i := range 500 {
			addr := fmt.Sprintf("10.0.0.%d:5000", i%10+1)
			if pb := attempt(t, g, addr, 0, errUnavailable); slices.Equal(pb, stop) {
				t.Fatalf("call %d: its first failure refused (State %+v)", i, g.State(method))
			}
			time.Sleep(10 * time.Millisecond)
			attempt(t, g, addr, 1, nil)
			time.Sleep(10 * time.Millisecond)
		}
		if s := g.State(method); s.Over || s.Refused != 0 || s.Refunded != 500 {
			t.Errorf("State = %+v; want not over, nothing refused, 500 refunded", s)
		}
	})
}

// TestWindowSlidesByTenths checks that attempts leave the count a tenth of
// the window at a time, the last tenth after the window has passed.
func TestWindowSlidesByTenths(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGuard(t, guard.Options{Window: time.Second})
		time.Sleep(time.Duration(time.Now().UnixNano()%int64(100*time.Millisecond)) + 50*time.Millisecond) // mid-tenth
		attempt(t, g, "10.0.0.1:5000", 0, nil)
		time.Sleep(100 * time.Millisecond)
		attempt(t, g, "10.0.0.1:5000", 1, errUnavailable)
		for _, step := range []struct {
			after       time.Duration
			first, retr int64
		}{{800 * time.Millisecond, 1, 1}, {100 * time.Millisecond, 0, 1}, {100 * time.Millisecond, 0, 0}} {
			time.Sleep(step.after)
			if s := g.State(method); s.FirstTries != step.first || s.Retries != step.retr {
				t.Errorf("%v on: State = %+v, want %d first tries and %d retries", step.after, s, step.first, step.retr)
			}
		}
	})
}

// TestMinRetries checks that a quiet method's failing calls keep their
// retries, however large their share, until the method's harm (retries
// arrived, and failures let through whose retries have not come) reaches
// MinRetries: until then a failure whose slot does not fit (past half the
// time to its 2 s deadline) is let through, from then on it is refused.
// With MinRetries 1, the first retry's slot, about a second away, fits;
// with 10, the 9th retry sees 9 retries and 2 expected (the last failures
// of the first two calls).
func TestMinRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, tc := range []struct {
			min       int
			wantFirst int // the first retry refused
		}{{0, 9}, {5, 5}, {1, 2}} {
			g := newGuard(t, guard.Options{MinRetries: tc.min})
			warm(t, g)
			first := 0
			for call := range 4 {
				within(t, g, "10.0.0.1:5000", 0, errUnavailable, 2*time.Second)
				for prev := 1; prev <= 4; prev++ {
					if got := within(t, g, "10.0.0.1:5000", prev, errUnavailable, 2*time.Second); slices.Equal(got, stop) && first == 0 {
						first = call*4 + prev
					}
				}
			}
			if first != tc.wantFirst {
				t.Errorf("MinRetries %d: retry %d refused first, want %d", tc.min, first, tc.wantFirst)
			}
		}
	})
}

// TestCodes checks that Options.Codes adds codes to UNAVAILABLE and
// RESOURCE_EXHAUSTED: their failures are paced, others' are not.
func TestCodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGuard(t, guard.Options{Codes: []codes.Code{codes.Aborted}})
		warm(t, g)
		for _, code := range []codes.Code{codes.Unavailable, codes.Aborted, codes.ResourceExhausted} {
			if got := attempt(t, g, "10.0.0.1:5000", 0, status.Error(code, "")); code != codes.Unavailable && got == nil {
				t.Errorf("%v: no pushback, want a wait: the first failure took the free slot", code)
			}
		}
		if got := attempt(t, g, "10.0.0.1:5000", 0, status.Error(codes.Internal, "")); got != nil {
			t.Errorf("INTERNAL: pushback %q, want none", got)
		}
	})
}

// TestPreviousAttemptsValues checks what counts as a retry: the first value
// of grpc-previous-rpc-attempts, a decimal of 1 or more of any length after
// at most one "+"; anything else is a first try.
func TestPreviousAttemptsValues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, tc := range []struct {
			values []string
			retry  bool
		}{
			{[]string{"1"}, true}, {[]string{"4"}, true}, {[]string{"0001"}, true},
			{[]string{"99999999999999999999"}, true}, {[]string{"9223372036854775808"}, true},
			{[]string{"+1"}, true}, {[]string{"1", "4"}, true}, {[]string{"4", "0"}, true},
			{[]string{"0"}, false}, {[]string{"00"}, false}, {[]string{"-1"}, false}, {[]string{"++1"}, false},
			{[]string{" 1"}, false}, {[]string{"1.0"}, false}, {[]string{"0x1"}, false}, {[]string{"x"}, false},
			{[]string{""}, false}, {[]string{"+"}, false}, {[]string{"0", "4"}, false}, {nil, false},
		} {
			g := newGuard(t, guard.Options{})
			md := metadata.MD{interceptor.PreviousAttemptsKey: tc.values}
			ctx := metadata.NewIncomingContext(context.Background(), md)
			g.Unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) { return nil, nil })
			if s := g.State(method); (s.Retries == 1) != tc.retry || s.Retries+s.FirstTries != 1 {
				t.Errorf("grpc-previous-rpc-attempts %q: State = %+v, want a retry %v", tc.values, s, tc.retry)
			}
		}
	})
}

// TestCriticality checks the tiers of grpcbackoff.CriticalityKey the guard
// reads, case ignored, as OnMark reports them: each rank is paced apart,
// its first failure taking its free slot.
func TestCriticality(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got []string
		g := newGuard(t, guard.Options{OnMark: func(_ context.Context, m guard.Mark) { got = append(got, m.Criticality) }})
		warm(t, g)
		for _, v := range []string{"SHEDDABLE", "sheddable", "Sheddable_Plus", "urgent", "", "critical", "CRITICAL_PLUS"} {
			attempt(t, g, "10.0.0.1:5000", 0, errUnavailable, grpcbackoff.CriticalityKey, v)
		}
		want := []string{grpcbackoff.CriticalitySheddable, "", "", grpcbackoff.CriticalityCriticalPlus}
		if !slices.Equal(got, want) {
			t.Errorf("marks' criticality = %q, want %q: the second of each rank paced", got, want)
		}
	})
}

// TestFairness is the case: 20 clients that each fail one call in
// 20 once, beside one that retries a failing call ten times as often as
// they call, ignoring pushback, so that retries are more than 10% of the
// method's attempts. The noisy client is refused; the 20 are never refused,
// and their waits, when paced, are short.
func TestFairness(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGuard(t, guard.Options{})
		noisy := "10.0.1.1:40000"
		var ok, failedWhileOver, noisyRefused, noisyRetries, longestWait int
		over := func() bool { // a count of retries would refuse
			s := g.State(method)
			return s.Retries > (s.FirstTries+s.Retries)/10
		}
		// Each good client calls twice a second, 25 s in all (50 calls); its
		// calls number 10, 30 and 50... fail once, then succeed on retry.
		// The noisy client retries its failing call 20 times a second.
		for tick := range 500 { // every 50 ms
			if tick%10 == 0 {
				round := tick / 10
				for c := range 20 {
					addr := fmt.Sprintf("10.0.0.%d:5000", c+1)
					if (round+c)%20 != 0 {
						if attempt(t, g, addr, 0, nil) == nil {
							ok++
						}
						continue
					}
					if over() {
						failedWhileOver++
					}
					pb := attempt(t, g, addr, 0, errUnavailable)
					if slices.Equal(pb, stop) {
						t.Errorf("tick %d: client %s's first failure in 20 calls was refused (State %+v)", tick, addr, g.State(method))
						continue
					}
					if pb != nil {
						ms, _ := strconv.Atoi(pb[0])
						longestWait = max(longestWait, ms)
					}
					if attempt(t, g, addr, 1, nil) == nil {
						ok++
					}
				}
			}
			noisyRetries++
			if slices.Equal(attempt(t, g, noisy, noisyRetries, errUnavailable), stop) {
				noisyRefused++
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("good calls: %d of 1000; good failures while retries were over 10%%: %d of 50; longest wait %d ms; noisy failures refused: %d of 500",
			ok, failedWhileOver, longestWait, noisyRefused)
		if ok != 1000 {
			t.Errorf("%d of the 1000 good calls succeeded, want all", ok)
		}
		if failedWhileOver < 40 {
			t.Errorf("only %d of the good clients' 50 failures came while retries were over 10%%; the case does not test fairness", failedWhileOver)
		}
		if longestWait > 1000 {
			t.Errorf("a good client's failure waited %d ms, want at most a second", longestWait)
		}
		if noisyRefused < 480 {
			t.Errorf("the noisy client was refused %d times of 500, want nearly all", noisyRefused)
		}
	})
}

func TestStateOfUnknownMethod(t *testing.T) {
	g := newGuard(t, guard.Options{})
	if s := g.State("/never.Called/Method"); s != (guard.State{}) {
		t.Errorf("State = %+v, want the zero State", s)
	}
}

// TestFirstTryAllocatesNothing checks the success path: a first try
// allocates nothing in the guard, a retry only the copy of its
// grpc-previous-rpc-attempts values that grpc-go's metadata package makes,
// and a call that says its criticality one more, the copy of that, once a
// failure of its method said one (before, it is not read).
func TestFirstTryAllocatesNothing(t *testing.T) {
	g := newGuard(t, guard.Options{})
	info := &grpc.UnaryServerInfo{FullMethod: method}
	handler := func(context.Context, any) (any, error) { return info, nil }
	critical := []string{grpcbackoff.CriticalityKey, "CRITICAL"}
	for _, tc := range []struct {
		prev int
		kv   []string
		want float64
	}{{0, nil, 0}, {1, nil, 1}, {0, critical, 0}, {1, critical, 1}} {
		ctx := attemptContext("10.0.0.1:5000", tc.prev, &transportStream{}, tc.kv...)
		if got := testing.AllocsPerRun(1000, func() { g.Unary(ctx, nil, info, handler) }); got != tc.want {
			t.Errorf("an attempt after %d others, metadata %q: %v allocations, want %v", tc.prev, tc.kv, got, tc.want)
		}
	}
	// A failure says the method's calls say their criticality: from then
	// on it is read.
	attempt(t, g, "10.0.0.1:5000", 0, errUnavailable, critical...)
	for _, tc := range []struct {
		prev int
		want float64
	}{{0, 1}, {1, 2}} {
		ctx := attemptContext("10.0.0.1:5000", tc.prev, &transportStream{}, critical...)
		if got := testing.AllocsPerRun(1000, func() { g.Unary(ctx, nil, info, handler) }); got != tc.want {
			t.Errorf("after a failure, an attempt after %d others, metadata %q: %v allocations, want %v", tc.prev, critical, got, tc.want)
		}
	}
}

// TestHandlerPushbackTrailer checks what a client gets when the handler
// sets a pushback trailer itself: the handler's value alone while the
// guard lets the failure through, and both values once it paces or refuses
// it (an interceptor cannot see the trailer), which gRFC A6 reads as "do
// not retry".
func TestHandlerPushbackTrailer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGuard(t, guard.Options{MinRetries: 1})
		handler := func(ctx context.Context, _ any) (any, error) {
			grpc.SetTrailer(ctx, metadata.Pairs(grpcbackoff.PushbackKey, "100"))
			return nil, errUnavailable
		}
		for i, want := range []int{1, 2, 2} {
			var ts transportStream
			g.Unary(attemptContext("10.0.0.1:5000", i, &ts), nil, &grpc.UnaryServerInfo{FullMethod: method}, handler)
			if got := ts.trailer.Get(grpcbackoff.PushbackKey); len(got) != want || got[0] != "100" {
				t.Errorf("failure %d: pushback %q, want the handler's 100 and %d value(s) in all", i, got, want)
			}
		}
	})
}

// TestLogsOverAndBack: a line at Warn when the guard starts holding a
// method's retries back, one at Info when it stops, each once.
func TestLogsOverAndBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &buf}, &slog.HandlerOptions{
			ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			}}))
		g := newGuard(t, guard.Options{Window: time.Second, Logger: log})
		for i := range 300 { // 1 s served, 1 s down, 1 s served again
			addr := fmt.Sprintf("10.0.0.%d:5000", i%10+1)
			var err error
			if i >= 100 && i < 200 {
				err = errUnavailable
			}
			attempt(t, g, addr, 0, err)
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(time.Second)
		attempt(t, g, "10.0.0.1:5000", 0, nil)
		mu.Lock()
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		mu.Unlock()
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "level=WARN msg=\"guard: holding back the retries of a method") ||
			!strings.Contains(lines[0], "method=/pkg.Svc/Get") || !strings.HasPrefix(lines[1], "level=INFO msg=\"guard: no longer holding back") {
			t.Errorf("log:\n%s\nwant a Warn line when /pkg.Svc/Get went over, then an Info line when back", strings.Join(lines, "\n"))
		}
	})
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestRegistrarAllocatesNothing: a method registered through Registrar,
// called as grpc-go calls it on a server without interceptors, allocates
// nothing more than its own handler for a first try.
func TestRegistrarAllocatesNothing(t *testing.T) {
	g := newGuard(t, guard.Options{})
	var got *grpc.ServiceDesc
	g.Registrar(captureRegistrar(func(d *grpc.ServiceDesc) { got = d })).RegisterService(&grpc.ServiceDesc{
		ServiceName: "pkg.Svc",
		Methods: []grpc.MethodDesc{{MethodName: "Get", Handler: func(_ any, ctx context.Context, _ func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			return ctx, nil
		}}},
	}, nil)
	h := got.Methods[0].Handler
	ctx := attemptContext("10.0.0.1:5000", 0, &transportStream{})
	if n := testing.AllocsPerRun(1000, func() { h(nil, ctx, nil, nil) }); n != 0 {
		t.Errorf("a first try through Registrar: %v allocations, want 0", n)
	}
	if s := g.State("/pkg.Svc/Get"); s.FirstTries == 0 {
		t.Errorf("State = %+v: the first tries were not counted", s)
	}
}

// captureRegistrar is a grpc.ServiceRegistrar that hands what it is given
// to a function.
type captureRegistrar func(*grpc.ServiceDesc)

func (c captureRegistrar) RegisterService(d *grpc.ServiceDesc, _ any) { c(d) }
