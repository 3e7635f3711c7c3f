package guard_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
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
		{"code OK", guard.Options{Codes: []codes.Code{codes.Aborted, codes.OK}}, []string{"Options.Codes[1] (OK)"}},
		{"code unknown", guard.Options{Codes: []codes.Code{17}}, []string{"Options.Codes[0] (17) is not a gRPC code"}},
		{"every field at once", guard.Options{Share: 2, Window: -1, MinRetries: -3, Codes: []codes.Code{codes.OK}},
			[]string{"Options.Share (2)", "Options.Window (-1ns)", "Options.MinRetries (-3)", "Options.Codes[0] (OK)"}},
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
	for _, o := range []guard.Options{{}, {Share: 1, Window: 10 * time.Millisecond, MinRetries: 1, Codes: []codes.Code{codes.Aborted, codes.Unavailable}}} {
		if _, err := guard.New(o); err != nil {
			t.Errorf("New(%+v) = %v, want no error", o, err)
		}
	}
}

// TestMarksWhileRetriesOverShare follows one client's attempts: 100 first
// tries, then failing retries. The guard marks a failure only from the
// 12th retry on (12 > 10% of 112; 11 is not more than 10% of 111), and
// then every retriable failure, first tries' included, but never a success,
// another code or a failure whose status says when to retry.
func TestMarksWhileRetriesOverShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGuard(t, guard.Options{})
		const c = "10.0.0.1:5000"
		for i := range 100 {
			if got := attempt(t, g, c, 0, nil); got != nil {
				t.Fatalf("first try %d: pushback %q on a success", i, got)
			}
		}
		for i := 1; i <= 12; i++ {
			got := attempt(t, g, c, 1, errUnavailable)
			if want := []string(nil); i == 12 {
				want = stop
				if !slices.Equal(got, want) {
					t.Errorf("retry %d: pushback %q, want %q", i, got, want)
				}
			} else if got != nil {
				t.Errorf("retry %d: pushback %q, want none (%d retries of %d attempts)", i, got, i, 100+i)
			}
		}
		if s := g.State(method); s != (guard.State{FirstTries: 100, Retries: 12, Over: true, Refused: 1}) {
			t.Errorf("State = %+v", s)
		}

		retryInfo, _ := status.New(codes.Unavailable, "later").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
		for _, tc := range []struct {
			name string
			prev int
			err  error
			want []string
		}{
			{"a success", 1, nil, nil},
			{"a first try's UNAVAILABLE", 0, errUnavailable, stop},
			{"RESOURCE_EXHAUSTED", 2, status.Error(codes.ResourceExhausted, "quota"), stop},
			{"NOT_FOUND", 1, status.Error(codes.NotFound, ""), nil},
			{"ABORTED, not in Codes", 1, status.Error(codes.Aborted, ""), nil},
			{"DEADLINE_EXCEEDED", 1, status.Error(codes.DeadlineExceeded, ""), nil},
			{"an error that is not a status", 1, errors.New("plain"), nil},
			{"a RetryInfo detail", 1, retryInfo.Err(), nil},
		} {
			if got := attempt(t, g, c, tc.prev, tc.err); !slices.Equal(got, tc.want) {
				t.Errorf("%s: pushback %q, want %q", tc.name, got, tc.want)
			}
		}

		// The window slides: once the retries are out of it, nothing is
		// marked, and the failure let through is expected to be retried.
		time.Sleep(guard.DefaultWindow)
		if got := attempt(t, g, c, 1, errUnavailable); got != nil {
			t.Errorf("a window later: pushback %q, want none", got)
		}
		if s := g.State(method); s != (guard.State{FirstTries: 0, Retries: 1, Expected: 1, Refused: 3}) {
			t.Errorf("a window later: State = %+v", s)
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
		attempt(t, g, "10.0.0.1:5000", 1, nil)
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

// TestMinRetries checks that a quiet method's failing call keeps its
// retries, however large their share, until the method sees MinRetries.
func TestMinRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, tc := range []struct {
			min       int
			wantFirst int // the first retry marked, 0 for none
		}{{0, 0}, {5, 5}, {1, 1}} {
			g := newGuard(t, guard.Options{MinRetries: tc.min})
			first := 0
			for call := range 2 {
				attempt(t, g, "10.0.0.1:5000", 0, errUnavailable)
				for prev := 1; prev <= 4; prev++ {
					if got := attempt(t, g, "10.0.0.1:5000", prev, errUnavailable); got != nil && first == 0 {
						first = call*4 + prev
					}
				}
			}
			if first != tc.wantFirst {
				t.Errorf("MinRetries %d: retry %d marked first, want %d", tc.min, first, tc.wantFirst)
			}
		}
	})
}

// TestCodes checks that Options.Codes adds codes to UNAVAILABLE and
// RESOURCE_EXHAUSTED.
func TestCodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGuard(t, guard.Options{MinRetries: 1, Codes: []codes.Code{codes.Aborted}})
		for _, code := range []codes.Code{codes.Aborted, codes.Unavailable, codes.ResourceExhausted} {
			if got := attempt(t, g, "10.0.0.1:5000", 1, status.Error(code, "")); !slices.Equal(got, stop) {
				t.Errorf("%v: pushback %q, want %q", code, got, stop)
			}
		}
		if got := attempt(t, g, "10.0.0.1:5000", 1, status.Error(codes.Internal, "")); got != nil {
			t.Errorf("INTERNAL: pushback %q, want none", got)
		}
	})
}

// TestPreviousAttemptsValues checks what counts as a retry: a value of
// grpc-previous-rpc-attempts of 1 or more; anything else is a first try.
func TestPreviousAttemptsValues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGuard(t, guard.Options{})
		for _, v := range []string{"1", "4", "0", "-1", "x", ""} {
			var ts transportStream
			ctx := attemptContext("10.0.0.1:5000", 0, &ts)
			ctx = metadataWith(ctx, interceptor.PreviousAttemptsKey, v)
			g.Unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) { return nil, nil })
		}
		if s := g.State(method); s.Retries != 2 || s.FirstTries != 4 {
			t.Errorf("State = %+v, want 2 retries and 4 first tries", s)
		}
	})
}

// TestFairness is the case: 20 clients that each fail one call in
// 20 once, beside one that retries a failing call ten times as often as
// they call. Retries are then more than 10% of the method's attempts, so a
// share counted per method alone would refuse the 20 clients' retries; the
// guard refuses only the noisy client's, and every call of the others
// succeeds.
func TestFairness(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGuard(t, guard.Options{})
		noisy := "10.0.1.1:40000"
		var ok, refusedWhileOver, noisyRefused, noisyRetries int
		// Each good client calls twice a second, 25 s in all (50 calls); its
		// calls number 10, 30 and 50... fail once, then succeed on retry.
		// The noisy client retries its failing call 20 times a second.
		for tick := range 500 { // every 50 ms
			if tick%10 == 0 {
				round := tick / 10
				for c := range 20 {
					addr := fmt.Sprintf("10.0.0.%d:5000", c+1)
					var err error
					if (round+c)%20 == 0 {
						err = errUnavailable
					}
					pb := attempt(t, g, addr, 0, err)
					if err != nil {
						if g.State(method).Over {
							refusedWhileOver++
						}
						if pb != nil {
							t.Errorf("tick %d: client %s's first failure in 20 calls was refused (State %+v)", tick, addr, g.State(method))
							continue
						}
						err = nil
						pb = attempt(t, g, addr, 1, err)
					}
					if err == nil && pb == nil {
						ok++
					}
				}
			}
			noisyRetries++
			if attempt(t, g, noisy, noisyRetries, errUnavailable) != nil {
				noisyRefused++
			}
			time.Sleep(50 * time.Millisecond)
		}
		if ok != 1000 {
			t.Errorf("%d of the 1000 good calls succeeded, want all", ok)
		}
		if refusedWhileOver < 40 {
			t.Errorf("only %d of the good clients' 50 failures came while the method was over its share; the case does not test fairness", refusedWhileOver)
		}
		if noisyRefused < 490 {
			t.Errorf("the noisy client was refused %d times of 500, want nearly all", noisyRefused)
		}
		t.Logf("good calls: %d of 1000; good failures while the method was over its share: %d of 50; noisy failures refused: %d of 500",
			ok, refusedWhileOver, noisyRefused)
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
// grpc-previous-rpc-attempts values that grpc-go's metadata package makes.
func TestFirstTryAllocatesNothing(t *testing.T) {
	g := newGuard(t, guard.Options{})
	info := &grpc.UnaryServerInfo{FullMethod: method}
	handler := func(context.Context, any) (any, error) { return info, nil }
	for _, tc := range []struct {
		prev int
		want float64
	}{{0, 0}, {1, 1}} {
		ctx := attemptContext("10.0.0.1:5000", tc.prev, &transportStream{})
		if got := testing.AllocsPerRun(1000, func() { g.Unary(ctx, nil, info, handler) }); got != tc.want {
			t.Errorf("an attempt after %d others: %v allocations, want %v", tc.prev, got, tc.want)
		}
	}
}

// TestHandlerPushbackTrailer checks what a client gets when the handler
// sets a pushback trailer itself: the handler's value alone while the
// guard does not refuse, and both values once it does (an interceptor
// cannot see the trailer), which gRFC A6 reads as "do not retry".
func TestHandlerPushbackTrailer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGuard(t, guard.Options{MinRetries: 1})
		handler := func(ctx context.Context, _ any) (any, error) {
			grpc.SetTrailer(ctx, metadata.Pairs(grpcbackoff.PushbackKey, "100"))
			return nil, errUnavailable
		}
		for _, tc := range []struct {
			prev int
			want []string
		}{{0, []string{"100"}}, {1, []string{"100", "-1"}}} {
			var ts transportStream
			g.Unary(attemptContext("10.0.0.1:5000", tc.prev, &ts), nil, &grpc.UnaryServerInfo{FullMethod: method}, handler)
			if got := ts.trailer.Get(grpcbackoff.PushbackKey); !slices.Equal(got, tc.want) {
				t.Errorf("after %d attempts: pushback %q, want %q", tc.prev, got, tc.want)
			}
		}
	})
}
