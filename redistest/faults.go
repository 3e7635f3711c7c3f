package redistest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/platformkit/grpcbackoff"
)

// Fault describes calls the Server fails on purpose. Faults queue in the order
// they are injected; each incoming call consumes one failure from the first
// queued fault whose Method matches, and a fault leaves the queue after Count
// failures.
type Fault struct {
	// Method is the full gRPC method name to fail, e.g. [MethodGetInstance].
	// Empty matches every method of every service, including Operations.
	Method string
	// Code is the status code to fail with. It must not be codes.OK.
	Code codes.Code
	// Count is the number of calls to fail. It must be > 0.
	Count int
	// Message is the status message; if empty it is
	// "redistest: injected <Code> for <method>".
	Message string
	// RetryDelay, if > 0, attaches a google.rpc.RetryInfo detail with this
	// retry_delay to the status.
	RetryDelay time.Duration
	// RetryDelaySet attaches the RetryInfo detail even when RetryDelay is zero
	// or negative, for tests of clients facing hostile servers.
	RetryDelaySet bool
	// Pushback, if non-empty, is sent verbatim as the grpc-retry-pushback-ms
	// trailer. It may be malformed on purpose ("-1", "soon") but must be
	// printable ASCII, as gRPC requires of header values.
	Pushback string
}

// Attempt is one call that reached the Server; every retry attempt is its own
// Attempt.
type Attempt struct {
	// Method is the full gRPC method name.
	Method string
	// Time is the arrival time, from time.Now (inside a synctest bubble, the
	// bubble's fake clock).
	Time time.Time
	// Answered is when the Server answered, after any latency; it is zero
	// while the call is in flight.
	Answered time.Time
	// Code is the status code the Server answered with; it is codes.Unknown
	// while the call is in flight.
	Code codes.Code
	// Metadata is a copy of the incoming metadata, e.g. to check
	// grpc-previous-rpc-attempts.
	Metadata metadata.MD
}

// Inject queues f. It returns an error naming the offending field and value if
// Code is OK or not a valid code, Count is not positive, Method is neither
// empty nor of the form "/package.Service/Method", or Pushback is not
// printable ASCII. Faults may name methods the fake does not implement; such
// calls are failed with the fault instead of UNIMPLEMENTED.
func (s *Server) Inject(f Fault) error {
	switch {
	case f.Code == codes.OK || f.Code > codes.Unauthenticated:
		return fmt.Errorf("redistest: invalid Fault.Code %v: must be a non-OK status code", f.Code)
	case f.Count <= 0:
		return fmt.Errorf("redistest: invalid Fault.Count %d: must be > 0", f.Count)
	case f.Method != "" && !validMethod(f.Method):
		return fmt.Errorf("redistest: invalid Fault.Method %q: must be empty or a full method name like %q", f.Method, MethodGetInstance)
	}
	for _, c := range []byte(f.Pushback) {
		if c < 0x20 || c > 0x7e {
			return fmt.Errorf("redistest: invalid Fault.Pushback %q: must be printable ASCII", f.Pushback)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &f)
	return nil
}

// validMethod reports whether m looks like "/package.Service/Method".
func validMethod(m string) bool {
	svc, name, ok := strings.Cut(strings.TrimPrefix(m, "/"), "/")
	return strings.HasPrefix(m, "/") && ok && svc != "" && name != "" && !strings.Contains(name, "/")
}

// FailNext makes the next n calls to method fail with code; method "" matches
// every method. It is Inject(Fault{Method: method, Code: code, Count: n}) and
// panics if Inject returns an error.
func (s *Server) FailNext(method string, n int, code codes.Code) {
	if err := s.Inject(Fault{Method: method, Code: code, Count: n}); err != nil {
		panic(err)
	}
}

// ClearFaults drops every queued fault and returns how many failures they
// still held, so that a test step cannot leak its faults into the next.
func (s *Server) ClearFaults() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, f := range s.faults {
		n += f.Count
	}
	s.faults = nil
	return n
}

// Down makes every call fail with UNAVAILABLE ("redistest: server is down"),
// after any latency, until [Server.Up]. Calls are still recorded. Queued faults
// are neither consumed nor dropped while the Server is down.
func (s *Server) Down() { s.setDown(true) }

// Up undoes [Server.Down].
func (s *Server) Up() { s.setDown(false) }

func (s *Server) setDown(v bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = v
}

// Freeze makes every call that arrives afterwards, until [Server.Thaw],
// hang as a hung server's would: it is recorded, then gets no answer at all
// until its context ends (cancelled, or past its deadline), and fails with
// the context's status. Calls that arrived while frozen keep hanging after
// Thaw; calls that arrive after it are served as usual.
func (s *Server) Freeze() { s.setFrozen(true) }

// Thaw undoes [Server.Freeze] for calls that arrive afterwards.
func (s *Server) Thaw() { s.setFrozen(false) }

func (s *Server) setFrozen(v bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frozen = v
}

// SetLatency makes every call that arrives afterwards wait d before it is
// handled (faults and Down included). The wait uses a timer, so inside a
// synctest bubble it takes exactly d of fake time; it ends early with the
// context's status if the call is cancelled or its deadline passes. d <= 0
// removes the latency, which is the default.
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency = max(d, 0)
}

// Attempts returns a copy of every recorded attempt in arrival order.
func (s *Server) Attempts() []Attempt {
	return s.attemptsMatching(func(string) bool { return true })
}

// AttemptsFor returns a copy of the recorded attempts of method in arrival
// order.
func (s *Server) AttemptsFor(method string) []Attempt {
	return s.attemptsMatching(func(m string) bool { return m == method })
}

func (s *Server) attemptsMatching(keep func(string) bool) []Attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Attempt
	for _, a := range s.attempts {
		if keep(a.Method) {
			c := *a
			c.Metadata = a.Metadata.Copy()
			out = append(out, c)
		}
	}
	return out
}

// ResetAttempts forgets every recorded attempt. Calls in flight are not
// recorded when they finish.
func (s *Server) ResetAttempts() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts = nil
}

func (s *Server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	a, err := s.admit(ctx, info.FullMethod, func(md metadata.MD) error { return grpc.SetTrailer(ctx, md) })
	var resp any
	if err == nil {
		resp, err = handler(ctx, req)
	}
	s.finish(a, err)
	return resp, err
}

// streamInterceptor gives streaming methods the same treatment; neither
// service has any today, but registering one must not bypass faults.
func (s *Server) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	a, err := s.admit(ss.Context(), info.FullMethod, func(md metadata.MD) error { ss.SetTrailer(md); return nil })
	if err == nil {
		err = handler(srv, ss)
	}
	s.finish(a, err)
	return err
}

// admit records the arrival of a call, applies latency, Down and the first
// matching fault, and returns the attempt record and the error to fail with,
// if any.
func (s *Server) admit(ctx context.Context, method string, setTrailer func(metadata.MD) error) (*Attempt, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	a := &Attempt{Method: method, Time: time.Now(), Code: codes.Unknown, Metadata: md.Copy()}
	s.mu.Lock()
	s.attempts = append(s.attempts, a)
	latency, frozen := s.latency, s.frozen
	s.mu.Unlock()

	if frozen {
		<-ctx.Done()
		return a, status.FromContextError(ctx.Err()).Err()
	}

	if latency > 0 {
		t := time.NewTimer(latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return a, status.FromContextError(ctx.Err()).Err()
		}
	}

	s.mu.Lock()
	if s.down {
		s.mu.Unlock()
		return a, status.Error(codes.Unavailable, "redistest: server is down")
	}
	var f Fault
	for i, q := range s.faults {
		if q.Method == "" || q.Method == method {
			f = *q
			if q.Count--; q.Count == 0 {
				s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
			}
			break
		}
	}
	s.mu.Unlock()
	if f.Code == codes.OK {
		return a, nil
	}
	return a, s.faultError(f, method, setTrailer)
}

func (s *Server) faultError(f Fault, method string, setTrailer func(metadata.MD) error) error {
	msg := f.Message
	if msg == "" {
		msg = fmt.Sprintf("redistest: injected %v for %s", f.Code, method)
	}
	st := status.New(f.Code, msg)
	if f.RetryDelay > 0 || f.RetryDelaySet {
		withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(f.RetryDelay)})
		if err != nil {
			return status.Errorf(codes.Internal, "redistest: attaching RetryInfo: %v", err)
		}
		st = withInfo
	}
	if f.Pushback != "" {
		if err := setTrailer(metadata.Pairs(grpcbackoff.PushbackKey, f.Pushback)); err != nil {
			return status.Errorf(codes.Internal, "redistest: setting %s trailer: %v", grpcbackoff.PushbackKey, err)
		}
	}
	return st.Err()
}

// finish records the answer to a.
func (s *Server) finish(a *Attempt, err error) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	a.Answered = now
	a.Code = status.Code(err)
}
