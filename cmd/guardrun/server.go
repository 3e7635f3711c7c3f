package main

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/guard"
	"github.com/platformkit/grpcbackoff/interceptor"
)

// The served method, google.protobuf.Empty in and out.
const (
	service = "guardrun.Server"
	method  = "/" + service + "/Work"
)

// Capacity is what the server can do: Workers requests at a time, each
// taking Service, in arrival order; up to Queue requests in all, working or
// waiting for a worker, and a request past that is refused at once with
// Shed; a request not served within Timeout is answered Shed then
// ("overloaded"), as a server that bounds its latency does, but its work
// goes on: work continues for callers that gave up (or were answered).
type Capacity struct {
	Workers int
	Service time.Duration
	Queue   int
	Timeout time.Duration
	Shed    codes.Code // UNAVAILABLE or RESOURCE_EXHAUSTED
}

// Rate is the requests a second the server completes when busy.
func (c Capacity) Rate() float64 { return float64(c.Workers) / c.Service.Seconds() }

// server is the model server. Its handler counts each attempt that reaches
// it in a series, first try or retry.
type server struct {
	cap     Capacity
	workers chan struct{} // a token per request being worked on
	queued  atomic.Int64  // requests working or waiting for a worker
	outage  atomic.Bool   // every request fails with UNAVAILABLE: at once, or after its work if costly
	costly  bool
	// During the trigger (while outage is set): with flaky, that share of
	// the requests fails at once with UNAVAILABLE, at random, the others are
	// served; with brownout, that share is shed at once with
	// RESOURCE_EXHAUSTED.
	flaky, brownout float64
	s               *series
	jobs            sync.WaitGroup

	mu      sync.Mutex
	resumed chan struct{} // nil unless paused; closed at resume
}

func newServer(c Capacity, s *series) *server {
	return &server{cap: c, workers: make(chan struct{}, c.Workers), s: s}
}

// serviceDesc describes the service by hand, so that no generated code is
// needed.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: service,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Work",
		Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			var in emptypb.Empty
			if err := dec(&in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, _ any) (any, error) { return &emptypb.Empty{}, srv.(*server).work(ctx) }
			if ic == nil {
				return h(ctx, &in)
			}
			return ic(ctx, &in, &grpc.UnaryServerInfo{Server: srv, FullMethod: method}, h)
		},
	}},
}

// newGRPCServer returns a gRPC server for s, with g's interceptors if g is
// not nil.
func (s *server) newGRPCServer(g *guard.Guard) *grpc.Server {
	var opts []grpc.ServerOption
	if g != nil {
		opts = g.ServerOptions()
	}
	gs := grpc.NewServer(opts...)
	gs.RegisterService(&serviceDesc, s)
	return gs
}

var (
	errOutage = status.Error(codes.Unavailable, "guardrun: outage")
	errFlaky  = status.Error(codes.Unavailable, "guardrun: flaky")
	errShed   = status.Error(codes.ResourceExhausted, "guardrun: brownout, shed")
)

// work is one attempt, from its arrival at the handler to its answer.
func (s *server) work(ctx context.Context) error {
	now, c := time.Now(), isRetry(ctx)
	s.s.add(now, c, 1)
	if c == retries && slices.Contains(metadata.ValueFromIncomingContext(ctx, grpcbackoff.CriticalityKey), grpcbackoff.CriticalitySheddable) {
		s.s.add(now, sheddableRetries, 1)
	}
	if s.outage.Load() {
		switch {
		case s.flaky > 0 || s.brownout > 0:
			if rand.Float64() < s.flaky {
				return errFlaky
			}
			if rand.Float64() < s.brownout {
				return errShed
			}
		case !s.costly:
			return errOutage
		}
	}
	if s.queued.Add(1) > int64(s.cap.Queue) {
		s.queued.Add(-1)
		return status.Error(s.cap.Shed, "guardrun: overloaded")
	}
	done := make(chan struct{})
	s.jobs.Go(func() { s.job(ctx, done) })
	t := time.NewTimer(s.cap.Timeout)
	defer t.Stop()
	select {
	case <-done:
		if s.outage.Load() && s.costly {
			return errOutage
		}
		return nil
	case <-t.C:
		return status.Error(s.cap.Shed, "guardrun: overloaded, not served in time")
	}
}

// job is the work of a request, done whatever became of its caller; it
// closes done when it is done. Work done after the attempt was answered
// or its caller gave up (its context is then done) is wasted.
func (s *server) job(ctx context.Context, done chan<- struct{}) {
	defer s.queued.Add(-1)
	s.workers <- struct{}{}
	s.waitResume()
	time.Sleep(s.cap.Service)
	s.waitResume()
	<-s.workers
	end := time.Now()
	s.s.add(end, served, 1)
	if ctx.Err() != nil {
		s.s.add(end, wasted, 1)
	}
	close(done)
}

// pause freezes the workers: no work starts or ends until resume. Requests
// keep arriving, wait for a worker, and are refused once Queue are queued,
// as by a server whose handlers hang on a frozen dependency.
func (s *server) pause() {
	s.mu.Lock()
	if s.resumed == nil {
		s.resumed = make(chan struct{})
	}
	s.mu.Unlock()
}

func (s *server) resume() {
	s.mu.Lock()
	if s.resumed != nil {
		close(s.resumed)
		s.resumed = nil
	}
	s.mu.Unlock()
}

func (s *server) waitResume() {
	s.mu.Lock()
	r := s.resumed
	s.mu.Unlock()
	if r != nil {
		<-r
	}
}

// isRetry reports whether the attempt of ctx is a retry, as the guard
// counts it: grpc-previous-rpc-attempts ≥ 1.
func isRetry(ctx context.Context) column {
	if v := metadata.ValueFromIncomingContext(ctx, interceptor.PreviousAttemptsKey); len(v) > 0 {
		if n, err := strconv.Atoi(v[0]); err == nil && n >= 1 {
			return retries
		}
	}
	return firstTries
}
