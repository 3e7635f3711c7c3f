package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/adaptive"
	"github.com/platformkit/grpcbackoff/internal/budget"
	"github.com/platformkit/grpcbackoff/internal/decide"
	"github.com/platformkit/grpcbackoff/internal/guardcore"
	"github.com/platformkit/grpcbackoff/internal/lease"
)

// Client states.
const (
	thinking   uint8 = iota
	inFlight         // an attempt is in flight
	backingOff       // waiting to retry
)

// client is one client: 16 bytes, the simulator's main memory cost.
type client struct {
	seq      uint16 // number of the current attempt, across calls, modulo 2^16; stale events carry an older one
	attempts uint32 // attempts of the current call
	start    int32  // millisecond in which the current call started, for its deadline (Strategy.CallTimeout)
	state    uint8
	timedOut bool // the retry it waits for is of an attempt cut by its timeout (paid from the long-run allowance)
}

// process is the state shared by the clients of one process.
type process struct {
	budget   *budget.Budget
	adaptive *adaptive.Limiter
	// With a fleet budget (Strategy.LeasePeriod): the process's lease, and
	// the calls started and succeeded since its last renewal.
	lease              *lease.Local
	started, succeeded int64
	renewal            uint16 // the renewals scheduled, modulo 2^16; an evRenew of an older one is stale
	// key is the process's connection at the server's guard (a hash, as
	// the guard makes of a peer's address and port).
	key uint64
}

// Event kinds.
const (
	evCall    uint8 = iota // a client starts a call
	evRetry                // a client sends its next attempt
	evTimeout              // an attempt's timeout
	evDone                 // the server finishes a request
	evPause
	evResume
	evSample // the end of a second
	evRenew  // process id renews its lease of the fleet budget
)

// event is one entry of the queue; at is in nanoseconds of model time.
type event struct {
	at   int64
	id   int32
	seq  uint16 // the attempt's number (client.seq) or the renewal's, modulo 2^16
	kind uint8
}

// ref names an attempt: its client and sequence number, and whether it is
// a retry (it carries grpc-previous-rpc-attempts).
type ref struct {
	id    int32
	seq   uint16
	retry bool
}

// sim is one run.
type sim struct {
	sc      Fleet
	st      Strategy
	t0      time.Time
	end     int64 // ns
	rng     *rand.Rand
	clients []client
	procs   []process
	q       queue
	samples []Sample
	events  int64
	now     int64 // the time of the event being handled, ns

	// the server
	paused   bool
	accepted int   // requests whose work is under way
	held     []ref // work done during the pause, answered at the resume
	waiting  []ref // arrived during the pause
	peak     int
	calls    int // calls under way

	ledger lease.Ledger // the fleet budget, with Strategy.LeasePeriod
	leased float64      // long-run tokens the processes held when the outage began

	// receipts holds, for each client, what its process's own budget
	// paid for the retry it waits for or has in flight, given back if
	// the server serves it (budget.Budget.Refund); nil without budgets
	// of their own.
	receipts []budget.Receipt

	guard  *guardcore.Core // the server's retry guard, with Strategy.Guard
	method guardcore.Method
}

// t returns model time ns as a time.Time for the library's code.
func (s *sim) t(ns int64) time.Time { return s.t0.Add(time.Duration(ns)) }

func (s *sim) sample(ns int64) *Sample {
	i := int(ns / int64(time.Second))
	if i >= len(s.samples) {
		return nil
	}
	return &s.samples[i]
}

func (s *sim) inflight() int { return s.accepted + len(s.held) + len(s.waiting) }

// RunFleet simulates st in sc, on a virtual clock. progress, if not nil, is
// called about every million events with the model time reached. RunFleet
// stops with ctx's error if ctx ends.
func RunFleet(ctx context.Context, sc Fleet, st Strategy, progress func(modelTime time.Duration, events int64)) (Result, error) {
	if err := sc.Validate(); err != nil {
		return Result{}, err
	}
	if err := st.Policy.Validate(); err != nil {
		return Result{}, fmt.Errorf("sim: strategy %s: %w", st.Name, err)
	}
	if st.Policy.AttemptTimeout <= 0 && st.CallTimeout <= 0 {
		return Result{}, fmt.Errorf("sim: strategy %s: the Policy needs an AttemptTimeout, or the strategy a CallTimeout", st.Name)
	}
	if st.CallTimeout < 0 {
		return Result{}, fmt.Errorf("sim: strategy %s: CallTimeout (%v) must not be negative", st.Name, st.CallTimeout)
	}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	wall := time.Now()

	n := int(sc.Duration / time.Second)
	s := &sim{
		sc: sc, st: st,
		t0:      time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		end:     int64(time.Duration(n) * time.Second),
		rng:     rand.New(rand.NewPCG(sc.Seed, 0x5eed)),
		clients: make([]client, sc.Clients),
		samples: make([]Sample, n),
	}
	for i := range s.samples {
		s.samples[i].Second = i
	}
	nproc := (sc.Clients + sc.PerProcess - 1) / sc.PerProcess
	s.procs = make([]process, nproc)
	if st.Guard != nil {
		g, err := guardcore.New(*st.Guard)
		if err != nil {
			return Result{}, fmt.Errorf("sim: strategy %s: %w", st.Name, err)
		}
		s.guard = g
		keys := rand.New(rand.NewPCG(sc.Seed, 0x9a4d)) // apart from the think times
		for i := range s.procs {
			s.procs[i].key = keys.Uint64()
		}
	}
	for i := range s.procs {
		if st.Throttle != nil && st.LeasePeriod > 0 {
			p := &s.procs[i]
			p.lease = lease.NewLocal(*st.Throttle, st.LeasePeriod, nproc, s.t(0))
			p.lease.NoStock = st.NoStock
			s.q.push(event{at: s.rng.Int64N(int64(p.lease.Interval())), id: int32(i), kind: evRenew})
		} else if st.Throttle != nil {
			// The budget reads the model's clock: it dates successes
			// by it (the real clock would put the whole run in one Window).
			b, err := budget.NewWithClock(*st.Throttle, func() time.Time { return s.t(s.now) })
			if err != nil {
				return Result{}, fmt.Errorf("sim: strategy %s: %w", st.Name, err)
			}
			s.procs[i].budget = b
			if s.receipts == nil {
				s.receipts = make([]budget.Receipt, sc.Clients)
			}
		}
		if st.Adaptive != nil {
			a, err := adaptive.New(*st.Adaptive)
			if err != nil {
				return Result{}, fmt.Errorf("sim: strategy %s: %w", st.Name, err)
			}
			s.procs[i].adaptive = a
		}
	}
	for i := range s.clients {
		s.think(int32(i), int64(sc.Quiet))
	}
	s.q.push(event{at: int64(sc.PauseAt), kind: evPause})
	s.q.push(event{at: int64(sc.PauseAt + sc.Pause), kind: evResume})
	for i := 1; i <= n; i++ {
		s.q.push(event{at: int64(time.Duration(i) * time.Second), kind: evSample})
	}

	for s.q.len() > 0 {
		e := s.q.pop()
		if e.at > s.end {
			break
		}
		s.now = e.at
		s.events++
		if s.events%(1<<20) == 0 {
			if err := ctx.Err(); err != nil {
				return Result{}, err
			}
			if progress != nil {
				progress(time.Duration(e.at), s.events)
			}
		}
		s.handle(e)
	}

	res := s.summarize()
	res.Wall = time.Since(wall)
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	res.BytesPerClient = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(sc.Clients)
	runtime.KeepAlive(s)
	return res, nil
}

func (s *sim) handle(e event) {
	switch e.kind {
	case evCall:
		s.call(e.id, e.at)
	case evRetry:
		c := &s.clients[e.id]
		if c.state == backingOff && c.seq == e.seq && s.paid(e.id, e.at) {
			s.send(e.id, e.at)
		}
	case evTimeout:
		c := &s.clients[e.id]
		if c.state == inFlight && c.seq == e.seq {
			if b := s.sample(e.at); b != nil {
				b.TimedOut++
			}
			s.failed(e.id, e.at, true, grpcbackoff.Hint{})
		}
	case evDone:
		s.accepted--
		if s.paused && !s.sc.Unavailable { // a paused server cannot answer
			s.held = append(s.held, ref{id: e.id, seq: e.seq})
			return
		}
		s.answer(ref{id: e.id, seq: e.seq}, e.at)
	case evPause:
		s.paused = true
		for _, p := range s.procs {
			if p.lease != nil {
				if st := p.lease.State(s.t(e.at)); st.Joined {
					s.leased += st.LongRun
				}
			}
		}
	case evRenew:
		p := &s.procs[e.id]
		if e.seq != p.renewal {
			return // replaced by a renewal made early
		}
		now := s.t(e.at)
		r := p.lease.Request(now, p.started, p.succeeded)
		p.started, p.succeeded = 0, 0
		p.lease.Apply(now, now, s.ledger.Renew(now.UnixMicro(), p.lease.Params(), r))
		s.q.push(event{at: e.at + int64(p.lease.Interval()), id: e.id, seq: p.renewal, kind: evRenew})
	case evResume:
		s.paused = false
		w := s.waiting
		for i, r := range w {
			s.waiting = w[i+1:] // r leaves the backlog as it is accepted
			s.accept(r, e.at)
		}
		s.waiting = w[:0]
		for _, r := range s.held {
			s.answer(r, e.at)
		}
		s.held = s.held[:0]
	case evSample:
		if b := s.sample(e.at - 1); b != nil {
			b.Concurrency, b.Peak, b.Waiting = s.inflight(), max(s.peak, s.inflight()), s.calls
			s.peak = s.inflight()
		}
	}
}

// think schedules client id's next call after a think time from now.
func (s *sim) think(id int32, now int64) {
	s.clients[id].state = thinking
	at := now + int64(s.rng.ExpFloat64()*float64(s.sc.Interval))
	if at <= s.end {
		s.q.push(event{at: at, id: id, kind: evCall})
	}
}

func (s *sim) proc(id int32) *process { return &s.procs[int(id)/s.sc.PerProcess] }

// call starts a call of client id: adaptive throttling may reject it at
// once; otherwise the budget counts it and the first attempt goes out.
func (s *sim) call(id int32, now int64) {
	b := s.sample(now)
	if b == nil {
		return
	}
	b.Started++
	p := s.proc(id)
	if p.adaptive != nil && !p.adaptive.Allow(s.t(now), s.rng.Float64()) {
		b.Rejected++
		b.Failed++
		s.think(id, now)
		return
	}
	if p.budget != nil {
		p.budget.Started()
	}
	p.started++
	c := &s.clients[id]
	c.attempts, c.start = 0, int32(now/int64(time.Millisecond))
	s.calls++
	s.send(id, now)
}

// send sends client id's next attempt.
func (s *sim) send(id int32, now int64) {
	c := &s.clients[id]
	c.seq++
	c.attempts++
	c.state = inFlight
	if b := s.sample(now); b != nil {
		b.Attempts++
	}
	if s.paused && s.sc.Unavailable && (s.sc.Failing == 0 || s.rng.Float64() < s.sc.Failing) {
		// Answered at once with UNAVAILABLE, marked by the guard if it
		// paces or refuses.
		s.arrive(id, c.attempts > 1, now)
		s.failed(id, now, false, s.guardFailed(id, now))
		return
	}
	s.q.push(event{at: s.timeout(c, now), id: id, seq: c.seq, kind: evTimeout})
	r := ref{id: id, seq: c.seq, retry: c.attempts > 1}
	if s.paused && !s.sc.Unavailable {
		if s.sc.Backlog > 0 && len(s.waiting) >= s.sc.Backlog {
			if b := s.sample(now); b != nil {
				b.Lost++
			}
			return // lost: it never reaches the server; the client times out
		}
		s.waiting = append(s.waiting, r)
		s.peak = max(s.peak, s.inflight())
		return
	}
	s.accept(r, now)
}

// timeout returns when the attempt of c sent now times out: at its
// AttemptTimeout or its call's deadline, whichever comes first.
func (s *sim) timeout(c *client, now int64) int64 {
	at := int64(math.MaxInt64)
	if s.st.Policy.AttemptTimeout > 0 {
		at = now + int64(s.st.Policy.AttemptTimeout)
	}
	if s.st.CallTimeout > 0 {
		at = min(at, s.deadline(c))
	}
	return at
}

// deadline returns the deadline of c's call (Strategy.CallTimeout), in
// nanoseconds of model time.
func (s *sim) deadline(c *client) int64 {
	return int64(c.start)*int64(time.Millisecond) + int64(s.st.CallTimeout)
}

// accept starts the server's work on r; its latency is fixed from the
// concurrency at this moment, r included (the Model's AtStart rule).
func (s *sim) accept(r ref, now int64) {
	s.arrive(r.id, r.retry, now)
	s.accepted++
	s.peak = max(s.peak, s.inflight())
	if at := now + int64(s.sc.Model.Latency(s.accepted)); at <= s.end {
		s.q.push(event{at: at, id: r.id, seq: r.seq, kind: evDone})
	} // else it is still in the server when the run ends: no event needed
}

// arrive counts an attempt of client id, a retry or a first try, that
// reaches the server now, at the server's guard too.
func (s *sim) arrive(id int32, retry bool, now int64) {
	if b := s.sample(now); b != nil && retry {
		b.ServerRetries++
	}
	if s.guard != nil {
		s.guard.Count(&s.method, s.proc(id).key, time.Duration(now), retry, guardcore.RankDefault)
	}
}

// answer delivers the server's answer to r, if its client still waits.
func (s *sim) answer(r ref, now int64) {
	c := &s.clients[r.id]
	if c.state != inFlight || c.seq != r.seq {
		return // abandoned at its timeout; the work was done anyway
	}
	s.guardServed(r.id, now)
	p := s.proc(r.id)
	if p.budget != nil {
		p.budget.Succeeded() // feeds the reserve, as the interceptors do
	}
	if c.attempts > 1 {
		s.refund(r.id, now) // a retry the server served costs nothing
	}
	p.succeeded++
	if p.adaptive != nil {
		p.adaptive.Record(s.t(now), true)
	}
	if b := s.sample(now); b != nil {
		b.OK++
	}
	s.calls--
	s.think(r.id, now)
}

// failed handles the failure of client id's attempt with the library's
// decision: its timeout, or an UNAVAILABLE answered at once, with the
// guard's pushback as hint.
func (s *sim) failed(id int32, now int64, timedOut bool, hint grpcbackoff.Hint) {
	c := &s.clients[id]
	p := s.proc(id)
	if b := s.sample(now); b != nil && c.attempts > 1 {
		b.FailedRetries++
	}
	if p.adaptive != nil {
		p.adaptive.Record(s.t(now), false)
	}
	a := decide.Attempt{Number: int(c.attempts), MaxAttempts: s.st.Policy.MaxAttempts,
		Code: retried(timedOut), TimedOut: timedOut, Now: s.t(now)}
	if s.st.CallTimeout > 0 {
		a.Deadline = s.t(s.deadline(c))
	}
	if !timedOut {
		a.Hint = hint
	}
	c.timedOut = timedOut
	if s.payWhenDue(p) {
		// Decided now, paid when due (paid): the budget is told of it.
		d := decide.Decide(&s.st.Policy, a, nil, nil)
		if !d.Retry {
			s.gaveUp(id, now, d.Reason)
			return
		}
		c.state = backingOff
		if p.lease.WantCost(a.Now, a.Now.Add(d.Delay), timedOut, budget.Cost(a.Code)) {
			p.renewal++ // renew now: the next renewal's lease would come too late
			s.q.push(event{at: now, id: int32(int(id) / s.sc.PerProcess), seq: p.renewal, kind: evRenew})
		}
		s.q.push(event{at: now + int64(d.Delay), id: id, seq: c.seq, kind: evRetry})
		return
	}
	if p.adaptive != nil {
		a.U = s.rng.Float64()
	}
	// Decided, then paid at once (as the interceptors pay their own
	// budget), what the failure's code costs (gate.Budget's price).
	d := decide.Decide(&s.st.Policy, a, nil, p.adaptive)
	if d.Retry && !s.pay(id, a.Now, timedOut, budget.Cost(a.Code)) {
		d = decide.Decision{Reason: grpcbackoff.ReasonThrottled}
	}
	if d.Retry {
		c.state = backingOff
		s.q.push(event{at: now + int64(d.Delay), id: id, seq: c.seq, kind: evRetry})
		return
	}
	s.gaveUp(id, now, d.Reason)
}

// pay pays, from the budget of client id's process if it has one, a retry
// that costs cost µtokens, from the long-run allowance alone if longRun,
// keeping what paid for it (refund), and reports whether it may be sent.
func (s *sim) pay(id int32, now time.Time, longRun bool, cost int64) bool {
	p := s.proc(id)
	switch {
	case p.budget != nil:
		r, ok := p.budget.AllowCost(now, longRun, cost)
		s.receipts[id] = r
		return ok
	case p.lease != nil:
		return p.lease.AllowCost(now, longRun, cost)
	}
	return true
}

// refund gives back, at now, what client id's retry cost its process's
// budget: the server served it.
func (s *sim) refund(id int32, now int64) {
	p := s.proc(id)
	c := &s.clients[id]
	switch {
	case p.budget != nil:
		p.budget.Refund(s.t(now), s.receipts[id])
		s.receipts[id] = budget.Receipt{}
	case p.lease != nil:
		p.lease.Refund(s.t(now), c.timedOut, budget.Cost(retried(c.timedOut)))
	}
}

// retried returns the code of the failure a client's retry retries: the
// attempt's timeout, or an UNAVAILABLE answered.
func retried(timedOut bool) codes.Code {
	if timedOut {
		return codes.DeadlineExceeded
	}
	return codes.Unavailable
}

// payWhenDue reports whether p's retries are paid when due, after their
// backoff, rather than when decided: with the fleet budget, as the
// interceptors pay fleetbudget's (Strategy.PayWhenDue).
func (s *sim) payWhenDue(p *process) bool { return p.lease != nil && s.st.PayWhenDue }

// paid reports whether client id's retry, due now, may go: paid by its
// process's budget and let through by adaptive throttling, if they were not
// asked when it was decided. A retry refused ends its call.
func (s *sim) paid(id int32, now int64) bool {
	p := s.proc(id)
	if !s.payWhenDue(p) {
		return true
	}
	c := &s.clients[id]
	a := decide.Attempt{TimedOut: c.timedOut, Now: s.t(now)}
	if p.adaptive != nil {
		a.U = s.rng.Float64()
	}
	why := decide.Pay(nil, p.adaptive, a)
	if why == 0 && !p.lease.AllowCost(a.Now, c.timedOut, budget.Cost(retried(c.timedOut))) {
		why = grpcbackoff.ReasonThrottled
	}
	if why != 0 {
		s.gaveUp(id, now, why)
	}
	return why == 0
}

// gaveUp ends client id's call, failed for reason.
func (s *sim) gaveUp(id int32, now int64, reason grpcbackoff.Reason) {
	if b := s.sample(now); b != nil {
		b.Failed++
		switch reason {
		case grpcbackoff.ReasonThrottled:
			b.Throttled++
		case grpcbackoff.ReasonRejectedLocally:
			b.Rejected++
		case grpcbackoff.ReasonServerRefused:
			b.Refused++
		}
	}
	s.calls--
	s.think(id, now)
}

// summarize turns the samples into a Result.
func (s *sim) summarize() Result {
	res := Result{Strategy: s.st.Name, Samples: s.samples, Events: s.events, Leased: s.leased}
	res.summarize(s.sc.PauseAt, s.sc.PauseAt+s.sc.Pause, s.sc.Model.Limit, s.sc.Offered())
	return res
}
