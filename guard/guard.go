// Package guard is a retry guard for gRPC servers: interceptors that count,
// per method, the attempts that are first tries and those that are retries,
// and, while retries are more than a share of a method's traffic, ask the
// clients that make them not to retry their failures.
//
//	g, err := guard.New(guard.Options{})
//	srv := grpc.NewServer(append(g.ServerOptions(), grpc.Creds(creds))...)
//
// A retry is an attempt whose request carries grpc-previous-rpc-attempts
// with a value of 1 or more (gRFC A6): grpc-go's built-in retry sends it, and
// so does this library's interceptor package on retries, hedges and stream
// replays. An attempt without it counts as a first try: the retries of a
// client that does not send it, such as the gax-based retry of Google's
// generated clients, are seen as first tries (they lower the share the guard
// measures, though each failure let through to them is expected as a retry
// for half a window), and such clients do not read pushback either.
//
// The guard counts over a sliding window (Options.Window), and counts each
// retriable failure it lets through at once as a retry expected: until a
// retry of the same client comes (then counted as that retry, never twice)
// or for half a window, so that it sees the retries it allowed a backoff
// before they arrive. A method is over while its retries (counted and
// expected) are at least Options.MinRetries and above Share of its
// attempts and expected retries, or above Share/2 while the failures let
// through in this tenth of the window are above Share of a tenth's
// attempts. The second test paces a half-used window by tenths, not in
// bursts, and spares a short spike in a quiet window. A client of the
// method is over by the same tests on its own counts. A failure let through
// on a call's last attempt is expected too (the guard cannot know a
// client's maximum): it counts for half a window.
//
// While both the method and the client are over, a failure of the client
// with a retriable code (UNAVAILABLE, RESOURCE_EXHAUSTED and Options.Codes)
// carries the trailer grpc-retry-pushback-ms: -1, which gRFC A6 defines as
// "do not retry": grpc-go's retry (with a retryPolicy) and grpc-java's stop,
// and this library's ends with grpcbackoff.ReasonServerRefused. Counting per
// client as well keeps one noisy client from switching off the retries of
// the others. The guard never changes a status, never touches a successful
// response or another code, and leaves a failure alone when its status has a
// RetryInfo detail: the handler said when to retry. A pushback trailer the
// handler sets itself cannot be seen from an interceptor (grpc-go keeps the
// trailer in its transport stream, and replacing that stream in the context
// breaks grpc.SetSendCompressor): a failure the guard marks then carries
// both values, which gRFC A6 reads as "do not retry".
//
// The defaults, 10% over 10 s, sit far from both sides: with 1% of calls
// failing once, retries are 1% of the traffic; clients whose budgets allow
// 10% of calls (this library's long-run allowance) reach at most 9.1%
// (0.1/1.1); 50 clients of 5 attempts in a 5 s outage sent 79%. 10 s holds
// the whole schedule of grpc-go's usual policies and the first retries of
// the Memorystore recipe (1, 2, 4 s), whose retries then come within the
// half window a failure is expected for, and ends refusals a window after a
// storm.
//
// A client is a connection: its peer's IP address and port. The counts of
// up to 4096 clients (of a method each) are kept at a time, in a table where
// one idle for a whole window gives its place up; past that, further clients
// share one count. Peers that are not TCP addresses (bufconn, Unix sockets)
// count as one client per method.
//
// The guard sees what passes through its interceptors: install it first
// (outermost), so that it counts every attempt and sees the failures the
// interceptors after it return. What gRPC answers before any interceptor
// runs (an unknown method, a server shutting down) is neither counted nor
// changed.
package guard

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/guardcore"
)

// previousAttemptsKey is the request metadata that marks a retry: the
// number of attempts of the call made before this one (gRFC A6; the
// interceptor package's PreviousAttemptsKey).
const previousAttemptsKey = "grpc-previous-rpc-attempts"

// The defaults of Options: a Share of 0.1, a Window of 10 s, 10
// MinRetries.
const (
	DefaultShare      = guardcore.DefaultShare
	DefaultWindow     = guardcore.DefaultWindow
	DefaultMinRetries = guardcore.DefaultMinRetries
)

// maxMethods is the number of method names counted apart (past it, further
// names, which only a server with an unknown-service handler can see, share
// one count).
const maxMethods = 1000

// Options configure a Guard. The zero value is the defaults.
type Options struct {
	// Share is the share of a method's attempts, over Window (and, once
	// half of it is used, over each tenth of Window), that retries, counted
	// and expected, may make before the guard refuses them: in (0, 1].
	// Default 0.1.
	Share float64
	// Window is how far back the guard counts, at least 10 ms; it slides by
	// a tenth of its length. Default 10 s.
	Window time.Duration
	// MinRetries is the fewest retries of a method in Window, counted and
	// expected, for which the guard refuses anything, however large their
	// share, so that the failing call of a quiet method keeps its retries.
	// Default 10; at least 1 when set.
	MinRetries int
	// Codes are retriable codes whose failures the guard marks, beside
	// UNAVAILABLE and RESOURCE_EXHAUSTED, which it always marks (ABORTED,
	// for a service whose clients retry it). OK is refused.
	Codes []codes.Code
}

// A Guard is a retry guard (see the package documentation). Its Unary and
// Stream methods are the server interceptors; ServerOptions installs both.
// It is safe for concurrent use; one Guard may serve many servers, which
// then share its counts.
type Guard struct {
	core  *guardcore.Core // counts and decides, on the time since start
	start time.Time
	codes uint32 // bit c set: failures with code c are marked

	seed    maphash.Seed
	methods sync.Map // full method name -> *method
	nameds  atomic.Int64
	other   method // the methods past maxMethods
}

// method is the state of one method.
type method struct {
	id     uint64 // mixed into its clients' hash
	counts guardcore.Method
}

// New returns a Guard, or an error naming every invalid field of o with its
// value.
func New(o Options) (*Guard, error) {
	core, err := guardcore.New(guardcore.Params{Share: o.Share, Window: o.Window, MinRetries: o.MinRetries})
	errs := []error{err}
	set := uint32(1<<codes.Unavailable | 1<<codes.ResourceExhausted)
	for i, c := range o.Codes {
		switch {
		case c == codes.OK:
			errs = append(errs, fmt.Errorf("guard: Options.Codes[%d] (OK): a success is never marked", i))
		case c > codes.Unauthenticated:
			errs = append(errs, fmt.Errorf("guard: Options.Codes[%d] (%d) is not a gRPC code", i, uint32(c)))
		default:
			set |= 1 << c
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Guard{core: core, start: time.Now(), codes: set, seed: maphash.MakeSeed()}, nil
}

// ServerOptions returns the options that install the guard's interceptors
// on a server, chained before those given after them: pass them first.
// (They are two: grpc-go has no public way to join server options into one.)
func (g *Guard) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(g.Unary), grpc.ChainStreamInterceptor(g.Stream)}
}

// Unary is the guard's grpc.UnaryServerInterceptor: it counts the attempt,
// calls the handler, and marks a retriable failure while the attempt's
// client and method retry too much (see the package documentation).
func (g *Guard) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	m, c := g.count(ctx, info.FullMethod)
	resp, err := handler(ctx, req)
	if err != nil && g.refuses(err, m, c) {
		grpc.SetTrailer(ctx, metadata.Pairs(grpcbackoff.PushbackKey, "-1"))
	}
	return resp, err
}

// Stream is the guard's grpc.StreamServerInterceptor: it counts the stream
// when it starts and, if the handler ends it with a retriable failure while
// its client and method retry too much, adds the pushback trailer before
// the status goes out.
func (g *Guard) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	m, c := g.count(ss.Context(), info.FullMethod)
	err := handler(srv, ss)
	if err != nil && g.refuses(err, m, c) {
		ss.SetTrailer(metadata.Pairs(grpcbackoff.PushbackKey, "-1"))
	}
	return err
}

// count counts an attempt of fullMethod, whose context is ctx, and returns
// its method's state and its client's counts.
func (g *Guard) count(ctx context.Context, fullMethod string) (*method, *guardcore.Counts) {
	m := g.method(fullMethod)
	return m, g.core.Count(&m.counts, g.clientKey(ctx, m.id), time.Since(g.start), isRetry(ctx))
}

// refuses reports whether the failure err of an attempt of m by the client
// whose counts are c is to carry pushback −1, and counts it if so.
// (time.Since reads the monotonic clock alone.)
func (g *Guard) refuses(err error, m *method, c *guardcore.Counts) bool {
	st, ok := status.FromError(err)
	if !ok || g.codes&(1<<st.Code()) == 0 || hasRetryInfo(st) {
		return false
	}
	return g.core.Refuses(&m.counts, c, time.Since(g.start))
}

// method returns the state of fullMethod, made on its first attempt.
func (g *Guard) method(fullMethod string) *method {
	if v, ok := g.methods.Load(fullMethod); ok {
		return v.(*method)
	}
	if g.nameds.Add(1) > maxMethods {
		g.nameds.Add(-1)
		return &g.other
	}
	v, loaded := g.methods.LoadOrStore(fullMethod, &method{id: maphash.String(g.seed, fullMethod)})
	if loaded {
		g.nameds.Add(-1)
	}
	return v.(*method)
}

// clientKey returns the key of the client of the attempt whose context is
// ctx, for the method whose id is id: a hash of id and its peer's IP
// address and port (of id alone for a peer that is not a TCP address).
func (g *Guard) clientKey(ctx context.Context, id uint64) uint64 {
	var b [26]byte
	if p, ok := peer.FromContext(ctx); ok {
		if a, ok := p.Addr.(*net.TCPAddr); ok {
			copy(b[:16], a.IP)
			b[16], b[17] = byte(a.Port>>8), byte(a.Port)
		}
	}
	for i := range 8 {
		b[18+i] = byte(id >> (8 * i))
	}
	return maphash.Bytes(g.seed, b[:])
}

// isRetry reports whether the attempt whose context is ctx is a retry: its
// request carries previousAttemptsKey with a value of 1 or more.
func isRetry(ctx context.Context) bool {
	v := metadata.ValueFromIncomingContext(ctx, previousAttemptsKey)
	if len(v) == 0 {
		return false
	}
	n, err := strconv.Atoi(v[0])
	return err == nil && n >= 1
}

// hasRetryInfo reports whether st carries a RetryInfo detail.
func hasRetryInfo(st *status.Status) bool {
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.RetryInfo); ok {
			return true
		}
	}
	return false
}

// State is what a Guard counts of one method, as State returns it.
type State struct {
	// FirstTries and Retries are the method's attempts in the window now.
	FirstTries, Retries int64
	// Expected is the retries the guard expects: the retriable failures of
	// the method it let through in the last half window whose retries have
	// not come.
	Expected int64
	// Over says the method is over (see the package documentation): the
	// retriable failures of its clients that are over too carry pushback −1.
	Over bool
	// Refused is the number of failures of the method that carried
	// pushback −1, since the Guard was made.
	Refused int64
}

// State returns what g counts of fullMethod ("/pkg.Service/Method") now.
func (g *Guard) State(fullMethod string) State {
	m := &g.other
	if v, ok := g.methods.Load(fullMethod); ok {
		m = v.(*method)
	} else if g.nameds.Load() < maxMethods {
		return State{}
	}
	first, retries, expected, over, refused := g.core.State(&m.counts, time.Since(g.start))
	return State{FirstTries: first, Retries: retries, Expected: expected, Over: over, Refused: refused}
}
