package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	redis "cloud.google.com/go/redis/apiv1"
	"cloud.google.com/go/redis/apiv1/redispb"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/gaxretry"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/redistest"
)

// The story's times at scale 1; runFake multiplies them by -scale.
const (
	// retryInfoDelay is the RetryInfo the server sends with
	// RESOURCE_EXHAUSTED: longer than the policy's first wait (1–2 s), so
	// that honouring it shows.
	retryInfoDelay = 3 * time.Second
	// downFor is how long the server is down in step 3. The attempts of a
	// call start at 0, 1–2 s, 3–5 s and 7–10 s, so 6 s always takes exactly
	// three retries whatever the jitter.
	downFor = 6 * time.Second
	// shortDeadline is the deadline of step 7: the second attempt starts at
	// 1–2 s and the third could not start before 3 s.
	shortDeadline = 2500 * time.Millisecond
	// exhaustAttempts is the MaxAttempts of the call of step 6, which fails
	// every attempt. The policy's 8 would wait 95–100 s at scale 1.
	exhaustAttempts = 3
)

const (
	project  = "demo-project"
	location = "us-central1"
	parent   = "projects/" + project + "/locations/" + location
)

// scaledPolicy returns DefaultPolicy with every duration multiplied by scale.
func scaledPolicy(scale float64) (grpcbackoff.Policy, error) {
	p := grpcbackoff.DefaultPolicy()
	p.Initial = scaled(p.Initial, scale)
	p.Max = scaled(p.Max, scale)
	p.Jitter = scaled(p.Jitter, scale)
	if err := p.Validate(); err != nil {
		return p, fmt.Errorf("redisv1: invalid -scale %v: %w", scale, err)
	}
	return p, nil
}

func scaled(d time.Duration, scale float64) time.Duration {
	return time.Duration(float64(d) * scale)
}

// describe says in words which policy is in use and at which time scale.
func describe(p grpcbackoff.Policy, scale float64) string {
	var b strings.Builder
	if scale == 1 {
		b.WriteString("policy: grpcbackoff.DefaultPolicy(), the Memorystore recipe at real time:\n")
	} else {
		fmt.Fprintf(&b, "policy: the Memorystore recipe (grpcbackoff.DefaultPolicy()) at %s time scale (-scale %v; -scale 1 for real time):\n", fraction(scale), scale)
	}
	var cs []string
	for _, c := range p.Codes {
		cs = append(cs, codeName(c))
	}
	fmt.Fprintf(&b, "        wait min(%v·%v^n + U[0, %v], %v) before retry n+1, at most %d attempts, on %s\n",
		p.Initial, p.Multiplier, p.Jitter, p.Max, p.MaxAttempts, strings.Join(cs, ", "))
	return b.String()
}

// fraction writes 0.1 as "1/10" and 0.37 as "0.37×".
func fraction(scale float64) string {
	inv := 1 / scale
	if n := float64(int(inv + 0.5)); n > 1 && (inv-n)*(inv-n) < 1e-12 {
		return fmt.Sprintf("1/%d", int(n))
	}
	return fmt.Sprintf("%v×", scale)
}

// runFake runs the story against a fresh in-process fake.
func runFake(ctx context.Context, scale float64, out io.Writer) error {
	srv := redistest.NewServer()
	defer srv.Close()
	if err := story(ctx, srv, scale, out); err != nil {
		return err
	}
	p, err := scaledPolicy(scale)
	if err != nil {
		return err
	}
	return beyond(ctx, p, scale, out)
}

// story runs the scripted story against srv, which must be fresh, with the
// policy at the given time scale, and prints it to out.
func story(ctx context.Context, srv *redistest.Server, scale float64, out io.Writer) error {
	p, err := scaledPolicy(scale)
	if err != nil {
		return err
	}
	rep := newReporter(out)
	retrier, err := interceptor.New(p, interceptor.WithOnRetry(rep.onRetry))
	if err != nil {
		return err
	}
	// The platform's standard options (both interceptors, one budget per
	// backend), plus the options that point the client at the fake.
	opts := append(srv.ClientOptions(), gaxretry.RetrierClientOptions(retrier)...)
	c, err := redis.NewCloudRedisClient(ctx, opts...)
	if err != nil {
		return fmt.Errorf("redisv1: creating the Cloud Redis client: %w", err)
	}
	defer c.Close()

	fmt.Fprintln(out, "Cloud Redis v1 client (cloud.google.com/go/redis/apiv1) against the in-process fake (redistest),")
	fmt.Fprintln(out, "with the platform's options, gaxretry.RetrierClientOptions(retrier).")
	fmt.Fprint(out, describe(p, scale))
	s := &teller{out: out, srv: srv, c: c, r: retrier, scale: scale, start: time.Now()}
	steps := []func(context.Context) error{
		s.createWithRetryInfo,
		s.createWithoutRetryInfo,
		s.getWhileDown,
		s.listPaged,
		s.getMissing,
		s.exhaust,
		s.deadline,
		s.writeNotResent,
		s.deleteAll,
	}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
	}
	fmt.Fprintln(out)
	rep.summary(srv.Attempts(), time.Since(s.start))
	return nil
}

// teller runs the steps of the story and prints them.
type teller struct {
	out   io.Writer
	srv   *redistest.Server
	c     *redis.CloudRedisClient
	r     *interceptor.Retrier // the client's
	scale float64
	start time.Time // of the story

	n         int       // the current step
	stepStart time.Time // of the current step
	seen      int       // attempts of the server already shown
}

func (s *teller) d(d time.Duration) time.Duration { return scaled(d, s.scale) }

// step starts step n+1 with a line saying what it does.
func (s *teller) step(format string, args ...any) {
	s.n++
	s.stepStart = time.Now()
	s.seen = len(s.srv.Attempts())
	fmt.Fprintf(s.out, "\n%d. %s\n", s.n, fmt.Sprintf(format, args...))
}

// since returns the time since the step started.
func (s *teller) since() time.Duration { return time.Since(s.stepStart) }

// answered prints what the server answered to each attempt of the step, and
// when (from the start of the step).
func (s *teller) answered() {
	all := s.srv.Attempts()
	var parts []string
	for _, a := range all[s.seen:] {
		parts = append(parts, fmt.Sprintf("%s %s at %s", path.Base(a.Method), codeName(a.Code), secs(a.Time.Sub(s.stepStart))))
	}
	s.seen = len(all)
	fmt.Fprintf(s.out, "   server answered: %s\n", strings.Join(parts, ", "))
}

func (s *teller) result(format string, args ...any) {
	fmt.Fprintf(s.out, "   -> %s\n", fmt.Sprintf(format, args...))
}

func (s *teller) inject(f redistest.Fault) error {
	if err := s.srv.Inject(f); err != nil {
		return fmt.Errorf("redisv1: step %d: %w", s.n, err)
	}
	return nil
}

// failed wraps an error the story did not expect.
func (s *teller) failed(what string, err error) error {
	return fmt.Errorf("redisv1: step %d: %s: %w", s.n, what, err)
}

func (s *teller) create(ctx context.Context, id string) error {
	op, err := s.c.CreateInstance(ctx, &redispb.CreateInstanceRequest{
		Parent:     parent,
		InstanceId: id,
		Instance:   &redispb.Instance{Tier: redispb.Instance_BASIC, MemorySizeGb: 1},
	})
	if err != nil {
		return s.failed("CreateInstance "+id, err)
	}
	inst, err := op.Wait(ctx)
	if err != nil {
		return s.failed("waiting for CreateInstance "+id, err)
	}
	s.answered()
	s.result("created %s: %s, %s %d GB at %s:%d, after %s",
		path.Base(inst.GetName()), inst.GetState(), inst.GetTier(), inst.GetMemorySizeGb(), inst.GetHost(), inst.GetPort(), secs(s.since()))
	return nil
}

func (s *teller) createWithRetryInfo(ctx context.Context) error {
	delay := s.d(retryInfoDelay)
	s.step("CreateInstance cache-a, then op.Wait. The server answers RESOURCE_EXHAUSTED once, with RetryInfo retry_delay %s.", secs(delay))
	if err := s.inject(redistest.Fault{Method: redistest.MethodCreateInstance, Code: codes.ResourceExhausted, Count: 1,
		Message: "quota exceeded for instance creation", RetryDelay: delay}); err != nil {
		return err
	}
	if err := s.create(ctx, "cache-a"); err != nil {
		return err
	}
	s.result("the retry waited the %s the server asked for, not the policy's %s–%s", secs(delay), secs(s.d(time.Second)), secs(s.d(2*time.Second)))
	return nil
}

func (s *teller) createWithoutRetryInfo(ctx context.Context) error {
	s.step("CreateInstance cache-b, then op.Wait. The server answers RESOURCE_EXHAUSTED once, without RetryInfo.")
	if err := s.inject(redistest.Fault{Method: redistest.MethodCreateInstance, Code: codes.ResourceExhausted, Count: 1,
		Message: "quota exceeded for instance creation"}); err != nil {
		return err
	}
	return s.create(ctx, "cache-b")
}

func (s *teller) getWhileDown(ctx context.Context) error {
	s.step("GetInstance cache-a while the server is down for %s.", secs(s.d(downFor)))
	s.srv.Down()
	up := time.AfterFunc(s.d(downFor), s.srv.Up)
	defer func() {
		if up.Stop() { // only if the story failed before the server came up
			s.srv.Up()
		}
	}()
	inst, err := s.c.GetInstance(ctx, &redispb.GetInstanceRequest{Name: parent + "/instances/cache-a"})
	if err != nil {
		return s.failed("GetInstance cache-a", err)
	}
	s.answered()
	s.result("got %s (%s) after %s: the server was back up at %s", path.Base(inst.GetName()), inst.GetState(), secs(s.since()), secs(s.d(downFor)))
	return nil
}

func (s *teller) listPaged(ctx context.Context) error {
	s.step("ListInstances with page size 1. The server answers UNAVAILABLE once, when page 2 is fetched.")
	it := s.c.ListInstances(ctx, &redispb.ListInstancesRequest{Parent: parent, PageSize: 1})
	var names []string
	for page := 1; ; page++ {
		inst, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			return s.failed(fmt.Sprintf("ListInstances page %d", page), err)
		}
		names = append(names, path.Base(inst.GetName()))
		if page == 1 {
			if err := s.inject(redistest.Fault{Method: redistest.MethodListInstances, Code: codes.Unavailable, Count: 1}); err != nil {
				return err
			}
		}
	}
	s.answered()
	s.result("listed %s in %d pages after %s; the iterator never saw the failure", strings.Join(names, ", "), len(names), secs(s.since()))
	return nil
}

func (s *teller) getMissing(ctx context.Context) error {
	s.step("GetInstance missing: an instance that does not exist.")
	_, err := s.c.GetInstance(ctx, &redispb.GetInstanceRequest{Name: parent + "/instances/missing"})
	if status.Code(err) != codes.NotFound {
		return s.failed("GetInstance missing", fmt.Errorf("got %v, want NOT_FOUND", err))
	}
	s.answered()
	var be *grpcbackoff.Error
	kind := "the server's own, not a *grpcbackoff.Error"
	if errors.As(err, &be) {
		kind = fmt.Sprintf("a *grpcbackoff.Error (%d attempts)", be.Attempts)
	}
	s.result("%s after %s, not retried: the policy does not retry NOT_FOUND; the error is %s", codeName(status.Code(err)), secs(s.since()), kind)
	return nil
}

func (s *teller) exhaust(ctx context.Context) error {
	s.step("GetInstance cache-b with interceptor.CallMaxAttempts(%d) (through gax.WithGRPCOptions).\n"+
		"   The server answers UNAVAILABLE %d times: every attempt the call has.", exhaustAttempts, exhaustAttempts)
	if err := s.inject(redistest.Fault{Method: redistest.MethodGetInstance, Code: codes.Unavailable, Count: exhaustAttempts}); err != nil {
		return err
	}
	_, err := s.c.GetInstance(ctx, &redispb.GetInstanceRequest{Name: parent + "/instances/cache-b"},
		gax.WithGRPCOptions(interceptor.CallMaxAttempts(exhaustAttempts)))
	var be *grpcbackoff.Error
	if !errors.As(err, &be) {
		return s.failed("GetInstance cache-b", fmt.Errorf("got %v, want a *grpcbackoff.Error", err))
	}
	s.answered()
	s.result("gave up after %s with status.Code(err) = %s; *grpcbackoff.Error: Attempts %d, Elapsed %s, Reason %q",
		secs(s.since()), codeName(status.Code(err)), be.Attempts, secs(be.Elapsed), be.Reason)
	s.result("err: %v", err)
	return nil
}

func (s *teller) deadline(ctx context.Context) error {
	dl := s.d(shortDeadline)
	s.step("GetInstance cache-b with a %s deadline while the server is down.", secs(dl))
	s.srv.Down()
	defer s.srv.Up()
	cctx, cancel := context.WithTimeout(ctx, dl)
	defer cancel()
	_, err := s.c.GetInstance(cctx, &redispb.GetInstanceRequest{Name: parent + "/instances/cache-b"})
	took := s.since()
	var be *grpcbackoff.Error
	if !errors.As(err, &be) {
		return s.failed("GetInstance cache-b", fmt.Errorf("got %v, want a *grpcbackoff.Error", err))
	}
	s.answered()
	s.result("returned after %s, %s before the %s deadline, with %s (not DEADLINE_EXCEEDED):",
		secs(took), secs(dl-took), secs(dl), codeName(status.Code(err)))
	s.result("%d attempts, Reason %q", be.Attempts, be.Reason)
	return nil
}

func (s *teller) writeNotResent(ctx context.Context) error {
	s.step("FailoverInstance cache-a. The server answers UNAVAILABLE once, after the request reached it.")
	if err := s.inject(redistest.Fault{Method: redistest.MethodFailoverInstance, Code: codes.Unavailable, Count: 1}); err != nil {
		return err
	}
	_, err := s.c.FailoverInstance(ctx, &redispb.FailoverInstanceRequest{Name: parent + "/instances/cache-a"})
	var be *grpcbackoff.Error
	if status.Code(err) != codes.Unavailable || errors.As(err, &be) {
		return s.failed("FailoverInstance cache-a", fmt.Errorf("got %v, want the server's UNAVAILABLE, not resent", err))
	}
	s.answered()
	d := s.r.Explain(redistest.MethodFailoverInstance)
	s.result("%s after 1 attempt, not resent: a write the server may have applied; the error is the server's own", codeName(status.Code(err)))
	s.result("Explain: %s (%s)", d.Safety, d.Source)
	return nil
}

func (s *teller) deleteAll(ctx context.Context) error {
	s.step("DeleteInstance cache-a and cache-b, then op.Wait.")
	for _, id := range []string{"cache-a", "cache-b"} {
		op, err := s.c.DeleteInstance(ctx, &redispb.DeleteInstanceRequest{Name: parent + "/instances/" + id})
		if err != nil {
			return s.failed("DeleteInstance "+id, err)
		}
		if err := op.Wait(ctx); err != nil {
			return s.failed("waiting for DeleteInstance "+id, err)
		}
	}
	it := s.c.ListInstances(ctx, &redispb.ListInstancesRequest{Parent: parent})
	left := 0
	for _, err := range it.All() {
		if err != nil {
			return s.failed("ListInstances", err)
		}
		left++
	}
	s.answered()
	s.result("deleted both; ListInstances now finds %d instances", left)
	return nil
}
