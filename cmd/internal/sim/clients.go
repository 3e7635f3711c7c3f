package sim

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
)

// bucket counts the events of one model second.
type bucket struct {
	started, ok, failed, throttled, attempts, timedOut atomic.Int64
}

// Recorder counts the events of a real-time run by the model second in
// which they happen: the Population's calls, and the attempts and retries
// its interceptors see. It is safe for concurrent use.
type Recorder struct {
	t0      time.Time
	second  time.Duration // real length of a model second
	buckets []bucket
}

// NewRecorder returns a Recorder of n model seconds, each second long in
// real time, starting at t0.
func NewRecorder(t0 time.Time, second time.Duration, n int) *Recorder {
	return &Recorder{t0: t0, second: second, buckets: make([]bucket, n)}
}

// at returns the bucket for time now, or nil after the end of the run.
func (r *Recorder) at(now time.Time) *bucket {
	i := int(now.Sub(r.t0) / r.second)
	if i < 0 || i >= len(r.buckets) {
		return nil
	}
	return &r.buckets[i]
}

func (r *Recorder) count(field func(*bucket) *atomic.Int64) {
	if b := r.at(time.Now()); b != nil {
		field(b).Add(1)
	}
}

// CountAttempts returns the interceptor to chain after the Retrier: it
// counts each attempt, and those its AttemptTimeout cut (the attempt's
// context, which carries that timeout, ended by its deadline; the calls
// themselves have none).
func (rec *Recorder) CountAttempts() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		rec.count(func(b *bucket) *atomic.Int64 { return &b.attempts })
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err != nil && ctx.Err() == context.DeadlineExceeded {
			rec.count(func(b *bucket) *atomic.Int64 { return &b.timedOut })
		}
		return err
	}
}

// Client is client id of pop: until end, it thinks for an exponentially
// distributed time, then calls Method on cc and waits for the call's end,
// counting it in rec. It returns the latencies of its successful calls, in
// model time (scale is the real length of a model second, in seconds).
func Client(ctx context.Context, cc *grpc.ClientConn, rec *Recorder, pop Population, scale float64, id uint64, end time.Time) []time.Duration {
	rng := rand.New(rand.NewPCG(pop.Seed, id))
	mean := float64(scaled(pop.Interval, scale))
	var lat []time.Duration
	var in, out emptypb.Empty
	for {
		think := time.Duration(rng.ExpFloat64() * mean)
		if time.Now().Add(think).After(end) || !sleepUntil(ctx, time.Now().Add(think)) {
			return lat
		}
		start := time.Now()
		b := rec.at(start)
		if b == nil {
			return lat
		}
		b.started.Add(1)
		err := cc.Invoke(ctx, Method, &in, &out)
		now := time.Now()
		if ctx.Err() != nil {
			return lat // the run is over; the call does not count
		}
		if b := rec.at(now); b != nil {
			if err == nil {
				b.ok.Add(1)
				lat = append(lat, time.Duration(float64(now.Sub(start))/scale))
			} else {
				b.failed.Add(1)
			}
		}
	}
}

// sleepUntil waits until t, and reports false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Sample returns the Sample of second i, with the server's concurrency and
// peak, and the calls waiting at its end, as given.
func (r *Recorder) Sample(i, concurrency, peak, waiting int) Sample {
	b := &r.buckets[i]
	return Sample{
		Second: i, Started: int(b.started.Load()), OK: int(b.ok.Load()), Failed: int(b.failed.Load()),
		Throttled: int(b.throttled.Load()), Attempts: int(b.attempts.Load()), TimedOut: int(b.timedOut.Load()),
		Concurrency: concurrency, Peak: peak, Waiting: waiting,
	}
}
