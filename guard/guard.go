package guard

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/guardcore"
)

// The defaults of Options: a Share of 0.1, a Window of 10 s, 10
// MinRetries and 10 ClientMinRetries.
const (
	DefaultShare            = guardcore.DefaultShare
	DefaultWindow           = guardcore.DefaultWindow
	DefaultMinRetries       = guardcore.DefaultMinRetries
	DefaultClientMinRetries = guardcore.DefaultClientMinRetries
)

// Options configure a Guard. The zero value is the defaults.
type Options struct {
	// Share is the share of a method's attempts, over Window, that retries
	// doing harm may make (see the package documentation): the rate of its
	// pace. In (0, 1]. Default 0.1.
	Share float64
	// Window is how far back the guard counts, at least 10 ms; it slides by
	// a tenth of its length. Default 10 s.
	Window time.Duration
	// MinRetries is the fewest retries doing harm, of a method's rank in
	// Window, for which the guard refuses anything, however large their
	// share: below it failures are only paced, so that the failing call of
	// a quiet method keeps its retries. Default 10; at least 1 when set.
	MinRetries int
	// ClientMinRetries is how many retries doing harm, in Window, a client
	// of a method may make past 4 times its fair part of the method's (the
	// part its first tries are of the method's) before the guard refuses
	// its failures without a slot: a client that ignores pushback. Default
	// 10; at least 1 when set.
	ClientMinRetries int
	// Codes are retriable codes whose failures the guard paces and refuses,
	// beside UNAVAILABLE and RESOURCE_EXHAUSTED, which it always does
	// (ABORTED, for a service whose clients retry it). OK is refused.
	Codes []codes.Code
	// Logger is told when a method goes over (the guard starts holding its
	// retries back) and back, at levels Warn and Info. Nil:
	// slog.Default(); slog.New(slog.DiscardHandler) for none.
	Logger *slog.Logger
	// OnMark, if set, is told of each failure the guard paces or refuses,
	// on the handler's goroutine, before the status goes out: it must be
	// quick and safe for concurrent use (the opentelemetry module's
	// GuardRecorder counts them).
	OnMark func(ctx context.Context, m Mark)
}

// A Mark is a retriable failure the guard paced or refused, as
// Options.OnMark is told of it.
type Mark struct {
	// Method is the full method name, "/pkg.Service/Method".
	Method string
	// Registered says the method is one the server registered: false for
	// a method served by an unknown-service handler, whose name a client
	// chose.
	Registered bool
	// Code is the failure's code.
	Code codes.Code
	// Criticality is the tier the call said (grpcbackoff.CriticalityKey),
	// one of grpcbackoff's Criticality constants, "" for none.
	Criticality string
	// Wait is the pushback the failure carries, for a failure paced.
	Wait time.Duration
	// Refused says the failure carries pushback −1.
	Refused bool
}

// A Guard is a retry guard (see the package documentation). Its Unary and
// Stream methods are the server interceptors; ServerOptions installs both.
// It is safe for concurrent use; one Guard may serve many servers, which
// then share its counts.
type Guard struct {
	core    *guardcore.Core // counts and decides, on the time since start
	start   time.Time
	codes   uint32 // bit c set: failures with code c are paced and refused
	seed    maphash.Seed
	methods methods
	log     *slog.Logger
	onMark  func(context.Context, Mark)
}

// New returns a Guard, or an error naming every invalid field of o with its
// value.
func New(o Options) (*Guard, error) {
	core, err := guardcore.New(guardcore.Params{Share: o.Share, Window: o.Window, MinRetries: o.MinRetries, ClientMinRetries: o.ClientMinRetries})
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
	g := &Guard{core: core, start: time.Now(), codes: set, seed: maphash.MakeSeed(), log: o.Logger, onMark: o.OnMark}
	if g.log == nil {
		g.log = slog.Default()
	}
	g.methods.core = core
	return g, nil
}

// ServerOptions returns the options that install the guard's interceptors
// on a server, chained before those given after them: pass them first.
// (They are two: grpc-go has no public way to join server options into one.)
func (g *Guard) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(g.Unary), grpc.ChainStreamInterceptor(g.Stream)}
}

// Unary is the guard's grpc.UnaryServerInterceptor: it counts the attempt,
// calls the handler, and marks a retriable failure with the pushback the
// guard decides (see the package documentation).
func (g *Guard) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	a := g.begin(ctx, info.FullMethod, true)
	resp, err := handler(ctx, req)
	if md := g.end(ctx, &a, err); md != nil {
		grpc.SetTrailer(ctx, md)
	}
	return resp, err
}

// Stream is the guard's grpc.StreamServerInterceptor: it counts the stream
// when it starts and, if the handler ends it with a retriable failure, adds
// the pushback the guard decides before the status goes out. A stream of
// an unknown-service handler (srv nil) is of a method not registered.
func (g *Guard) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	a := g.begin(ss.Context(), info.FullMethod, srv != nil)
	err := handler(srv, ss)
	if md := g.end(ss.Context(), &a, err); md != nil {
		ss.SetTrailer(md)
	}
	return err
}

// attempt is what the guard knows of an attempt between its start and its
// end.
type attempt struct {
	m      *method
	cl     guardcore.Client
	prev   int64 // grpc-previous-rpc-attempts
	tier   string
	rank   guardcore.Rank
	ranked bool // tier and rank read from the request
}

// begin counts the attempt of fullMethod whose context is ctx. Its
// criticality is read only at a method that has seen one (a failure always
// reads it): the success path of a method whose calls say none reads no
// more metadata than it needs. (Before, a retry or first try of its method
// counts in the default rank.)
func (g *Guard) begin(ctx context.Context, fullMethod string, registered bool) attempt {
	now := time.Since(g.start) // the monotonic clock alone
	a := attempt{m: g.methods.get(fullMethod, registered, now), prev: previousAttempts(ctx), rank: guardcore.RankDefault}
	if a.m.ranked.Load() {
		a.rank = g.read(ctx, &a)
	}
	var ch guardcore.Change
	a.cl, ch = g.core.Count(&a.m.counts, g.clientKey(ctx, a.m.id), now, a.prev >= 1, a.rank)
	g.changed(ctx, a.m, ch, now)
	return a
}

// end counts how the attempt a, whose context is ctx, ended with err, and
// returns the trailer to add, if any.
func (g *Guard) end(ctx context.Context, a *attempt, err error) metadata.MD {
	if err == nil {
		g.served(ctx, a)
		return nil
	}
	st, _ := status.FromError(err)
	code := st.Code()
	if g.codes&(1<<code) == 0 {
		if answers(code) {
			g.served(ctx, a)
		}
		return nil
	}
	if !a.ranked {
		a.rank = g.read(ctx, a)
	}
	now := time.Since(g.start)
	shed := code == codes.ResourceExhausted
	if hasRetryInfo(st) {
		g.core.Let(&a.m.counts, a.cl, now, a.rank, shed)
		return nil
	}
	var deadline time.Duration
	if dl, ok := ctx.Deadline(); ok {
		deadline = max(dl.Sub(g.start), 1)
	}
	v, ch := g.core.Failed(&a.m.counts, a.cl, now, deadline, a.prev, a.rank, shed)
	g.changed(ctx, a.m, ch, now)
	var pushback string
	switch {
	case v.Refused:
		pushback = "-1"
	case v.Paced:
		pushback = strconv.FormatInt(int64((v.Wait+time.Millisecond-1)/time.Millisecond), 10)
	default:
		return nil
	}
	if g.onMark != nil {
		g.onMark(ctx, Mark{Method: a.m.name, Registered: a.m.registered, Code: code, Criticality: a.tier, Wait: v.Wait, Refused: v.Refused})
	}
	return metadata.Pairs(grpcbackoff.PushbackKey, pushback)
}

// read reads the criticality of the attempt a, whose context is ctx, and
// notes at its method that one was said.
func (g *Guard) read(ctx context.Context, a *attempt) guardcore.Rank {
	a.tier, a.rank = criticality(ctx)
	a.ranked = true
	if a.tier != "" && !a.m.ranked.Load() {
		a.m.ranked.Store(true)
	}
	return a.rank
}

// served counts the attempt a, whose context is ctx, as served if it is a
// retry whose caller still waits.
func (g *Guard) served(ctx context.Context, a *attempt) {
	if a.prev >= 1 && ctx.Err() == nil {
		g.core.Served(&a.m.counts, a.cl, time.Since(g.start), a.prev, a.rank)
	}
}

// answers reports whether code is the server's real answer to a request,
// which a retry does not change: a retry that gets it was served.
func answers(code codes.Code) bool {
	switch code {
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
		codes.FailedPrecondition, codes.OutOfRange, codes.Unimplemented, codes.Unauthenticated:
		return true
	}
	return false
}

// changed logs a change of m's state at time now, seen by an attempt whose
// context is ctx.
func (g *Guard) changed(ctx context.Context, m *method, ch guardcore.Change, now time.Duration) {
	switch ch {
	case guardcore.BecameOver:
		s := g.core.State(&m.counts, now)
		g.log.LogAttrs(ctx, slog.LevelWarn, "guard: holding back the retries of a method: they would do more harm than its share",
			slog.String("method", m.name), slog.Int64("first_tries", s.FirstTries), slog.Int64("retries", s.Retries),
			slog.Int64("paced", s.Paced), slog.Int64("refused", s.Refused))
	case guardcore.WentBack:
		s := g.core.State(&m.counts, now)
		g.log.LogAttrs(ctx, slog.LevelInfo, "guard: no longer holding back the retries of a method",
			slog.String("method", m.name), slog.Int64("paced", s.Paced), slog.Int64("refused", s.Refused),
			slog.Int64("refunded", s.Refunded))
	}
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
	// Over says the guard is holding the method's retries back: the harm
	// its failures ask for, for one of its ranks, is more than Share of its
	// attempts (see the package documentation).
	Over bool
	// Refused is the number of failures of the method that carried
	// pushback −1, since the Guard was made (or since the method took a
	// place in its table).
	Refused int64
	// Paced is the number of failures that carried a pushback wait, and
	// Refunded the number of retries that cost nothing because they, or a
	// later retry of their call, were served, over the same time.
	Paced, Refunded int64
}

// State returns what g counts of fullMethod ("/pkg.Service/Method") now:
// the zero State for a method it holds no place for.
func (g *Guard) State(fullMethod string) State {
	m := g.methods.find(fullMethod)
	if m == nil {
		return State{}
	}
	t := g.core.State(&m.counts, time.Since(g.start))
	return State{FirstTries: t.FirstTries, Retries: t.Retries, Expected: t.Expected, Over: t.Over,
		Refused: t.Refused, Paced: t.Paced, Refunded: t.Refunded}
}
