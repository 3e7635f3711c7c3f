package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/guard"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/serviceconfig"
)

// retryConfig is the clients' retry: 5 attempts, 0.1 s doubling up to 1 s,
// on UNAVAILABLE and RESOURCE_EXHAUSTED. grpc-go's built-in retry reads it
// from the service config; this library's clients are given it with
// interceptor.WithServiceConfig, without a budget (WithoutThrottle), as the
// issue measured them.
const retryConfig = `{"methodConfig": [{"name": [{"service": "` + service + `"}],
	"retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2,
		"retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]}}]}`

// A mix is who the clients are: "grpc" (grpc-go's built-in retry), "ours"
// (this library's interceptors), or "mixed" (every other client of each).
type mix string

// A scenario is what happens to the server from Warm to Warm+Trigger: an
// outage (every request fails with UNAVAILABLE: at once, or, costly, after
// its work, as with a failing dependency), a flaky server (a share of the
// requests fails at random), a brownout (a share is shed with
// RESOURCE_EXHAUSTED, the calls half sheddable, half critical) or a pause
// (the workers frozen), and what the server can do; with patient, 8 calls
// with 30 s deadlines start in the trigger. Its timing is the run's, unless
// the flags set one.
type scenario struct {
	name            string
	pause, costly   bool
	flaky, brownout float64
	patient         bool
	capacity        Capacity
	timing          timing
}

// timing is when a run's trigger comes: warm, then trigger, then after.
type timing struct{ warm, trigger, after time.Duration }

// config is the experiment around the scenarios.
type config struct {
	clients  int
	rate     float64       // calls a second, per client
	deadline time.Duration // of each call
	timing
	step time.Duration // of the series
	seed uint64
}

// patientCalls and patientDeadline are the patient callers of a scenario
// with patient: they start 0.5 s apart from 0.5 s into the trigger.
const (
	patientCalls    = 8
	patientDeadline = 30 * time.Second
)

// classes of calls, in the brownout: every other call says it is sheddable,
// the others critical: a client of this library with interceptor.Sheddable
// and interceptor.Critical, one of grpc-go's built-in retry with the
// request metadata those set (grpcbackoff.CriticalityKey).
const (
	plainCall = iota
	sheddableCall
	criticalCall
)

func (c config) length() time.Duration { return c.warm + c.trigger + c.after }

// offered is the calls a second all the clients start, on average.
func (c config) offered() float64 { return float64(c.clients) * c.rate }

// transport makes the server's listener and the clients' connections:
// loopback TCP for the real run, bufconn for the tests.
type transport struct {
	listen func() (net.Listener, error)
	dial   func(ctx context.Context, addr string) (net.Conn, error)
}

func tcp() transport {
	var d net.Dialer
	return transport{
		listen: func() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") },
		dial:   func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) },
	}
}

// result is one run.
type result struct {
	cfg     config
	sc      scenario
	mix     mix
	guarded bool
	s       *series
	state   guard.State // the guard's, at the end (guarded runs)
}

// cfgOr returns r's config, or o's if r is nil.
func (r *result) cfgOr(o *result) config {
	if r == nil {
		return o.cfg
	}
	return r.cfg
}

// run runs one scenario with one mix of clients, guarded or not, in real
// time, and returns what it measured.
func run(ctx context.Context, cfg config, tr transport, sc scenario, m mix, guarded bool) (*result, error) {
	start := time.Now()
	// The series goes on past the run by a deadline and a second: calls
	// started at its end end then, and the work it left queued is done.
	tail := cfg.deadline
	if sc.patient {
		tail = patientDeadline
	}
	res := &result{cfg: cfg, sc: sc, mix: m, guarded: guarded, s: newSeries(start, cfg.step, cfg.length()+tail+time.Second)}
	srv := newServer(sc.capacity, res.s)
	srv.costly, srv.flaky, srv.brownout = sc.costly, sc.flaky, sc.brownout
	var g *guard.Guard
	if guarded {
		var err error
		if g, err = guard.New(guard.Options{Logger: slog.New(slog.DiscardHandler)}); err != nil {
			return nil, err
		}
	}
	gs := srv.newGRPCServer(g)
	lis, err := tr.listen()
	if err != nil {
		return nil, err
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	defer func() {
		srv.resume()
		gs.Stop()
		<-served
		srv.jobs.Wait() // the work the run left queued
	}()

	conns := make([]*grpc.ClientConn, cfg.clients)
	for i := range conns {
		opts, err := dialOptions(m, i)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return tr.dial(ctx, lis.Addr().String()) }))
		if conns[i], err = grpc.NewClient("passthrough:///"+lis.Addr().String(), opts...); err != nil {
			return nil, err
		}
		defer conns[i].Close()
		conns[i].Connect()
	}

	triggerOn, triggerOff := time.AfterFunc(cfg.warm, func() {
		if sc.pause {
			srv.pause()
		} else {
			srv.outage.Store(true)
		}
	}), time.AfterFunc(cfg.warm+cfg.trigger, func() {
		srv.outage.Store(false)
		srv.resume()
	})
	defer triggerOn.Stop()
	defer triggerOff.Stop()

	end := start.Add(cfg.length())
	var calls sync.WaitGroup
	var clients sync.WaitGroup
	for i, cc := range conns {
		rng := rand.New(rand.NewPCG(cfg.seed, uint64(i)))
		clients.Go(func() {
			next := start
			for n := 0; ; n++ {
				next = next.Add(time.Duration(rng.ExpFloat64() / cfg.rate * float64(time.Second)))
				if !next.Before(end) {
					return
				}
				select {
				case <-time.After(time.Until(next)):
				case <-ctx.Done():
					return
				}
				class := plainCall
				if sc.brownout > 0 {
					class = sheddableCall + n%2
				}
				calls.Go(func() { call(ctx, cc, !grpcRetry(m, i), cfg.deadline, res.s, class) })
			}
		})
	}
	if sc.patient {
		for i := range patientCalls {
			cc := conns[i*len(conns)/patientCalls]
			t := time.AfterFunc(cfg.warm+time.Duration(i+1)*500*time.Millisecond, func() {
				calls.Go(func() { patientCall(ctx, cc, res.s) })
			})
			defer t.Stop()
		}
	}
	if g != nil {
		// The guard's State.Over, once a step.
		sampled := make(chan struct{})
		defer func() { <-sampled }()
		tick := time.NewTicker(cfg.step)
		defer tick.Stop()
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			defer close(sampled)
			for {
				select {
				case now := <-tick.C:
					if g.State(method).Over {
						res.s.add(now, over, 1)
					}
				case <-stop:
					return
				}
			}
		}()
	}
	clients.Wait()
	calls.Wait()
	if g != nil {
		res.state = g.State(method)
	}
	return res, ctx.Err()
}

// call makes one call of a class on cc, a client of this library if ours,
// and counts it.
func call(ctx context.Context, cc *grpc.ClientConn, ours bool, deadline time.Duration, s *series, class int) {
	s.add(time.Now(), offered, 1)
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	var opts []grpc.CallOption
	switch {
	case class == sheddableCall && ours:
		opts = append(opts, interceptor.Sheddable())
	case class == criticalCall && ours:
		opts = append(opts, interceptor.Critical())
	case class == sheddableCall:
		ctx = metadata.AppendToOutgoingContext(ctx, grpcbackoff.CriticalityKey, grpcbackoff.CriticalitySheddable)
	case class == criticalCall:
		ctx = metadata.AppendToOutgoingContext(ctx, grpcbackoff.CriticalityKey, grpcbackoff.CriticalityCriticalPlus)
	}
	err := cc.Invoke(ctx, method, &emptypb.Empty{}, &emptypb.Empty{}, opts...)
	now := time.Now()
	if err == nil {
		s.add(now, ok, 1)
	} else {
		s.add(now, failed, 1)
	}
	if class != plainCall {
		calls, failures := sheddable, sheddableFailed
		if class == criticalCall {
			calls, failures = critical, criticalFailed
		}
		s.add(now, calls, 1)
		if err != nil {
			s.add(now, failures, 1)
		}
	}
}

// patientCall makes a call with a 30 s deadline and counts it apart.
func patientCall(ctx context.Context, cc *grpc.ClientConn, s *series) {
	ctx, cancel := context.WithTimeout(ctx, patientDeadline)
	defer cancel()
	if err := cc.Invoke(ctx, method, &emptypb.Empty{}, &emptypb.Empty{}); err == nil {
		s.add(time.Now(), patientOK, 1)
	} else {
		s.add(time.Now(), patientFailed, 1)
	}
}

// dialOptions returns the retry options of client i of mix m: grpc-go's
// built-in retry, or a Retrier of this library's (one per client, as each
// client is a process of its own).
func dialOptions(m mix, i int) ([]grpc.DialOption, error) {
	if grpcRetry(m, i) {
		return []grpc.DialOption{grpc.WithDefaultServiceConfig(retryConfig)}, nil
	}
	if m != "ours" && m != "mixed" {
		return nil, fmt.Errorf("unknown mix %q: want grpc, ours or mixed", m)
	}
	sc, err := serviceconfig.Parse([]byte(retryConfig))
	if err != nil {
		return nil, err
	}
	r, err := interceptor.New(grpcbackoff.DefaultPolicy(), interceptor.WithServiceConfig(sc), interceptor.WithoutThrottle())
	if err != nil {
		return nil, err
	}
	return r.DialOptions(), nil
}

// grpcRetry reports whether client i of mix m is one of grpc-go's built-in
// retry.
func grpcRetry(m mix, i int) bool { return m == "grpc" || m == "mixed" && i%2 == 0 }
