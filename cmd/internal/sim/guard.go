package sim

import (
	"math"
	"time"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/internal/guardcore"
)

// The server's retry guard in RunFleet (Strategy.Guard): its own code,
// internal/guardcore, on the model's clock, counting each attempt the
// server starts, a connection per process, at RankDefault (the simulated
// clients say no criticality).

// FlakyOutage is a flaky but healthy server (far below its capacity, as
// DefaultFleet's): during the outage the share failing of the attempts
// (0.2 for 0 or less) is answered UNAVAILABLE at once, at random, and the
// others are served. A retry then is served as often as a first try: a
// retry guard that counts retries refuses calls their retries would have
// saved.
func FlakyOutage(failing float64) OutageKind {
	if failing <= 0 {
		failing = 0.2
	}
	return OutageKind{Name: "flaky", Of: func(sc Fleet) Fleet { sc.Unavailable, sc.Failing = true, failing; return sc }}
}

// guardFailed decides the UNAVAILABLE the server answers at once to client
// id's attempt, now, and returns the hint the client reads: the pushback
// wait of a failure paced, Stop for one refused, nothing without a guard.
// The call's deadline is its CallTimeout's, if any (gRPC sends it as
// grpc-timeout; an attempt timeout is not sent).
func (s *sim) guardFailed(id int32, now int64) grpcbackoff.Hint {
	if s.guard == nil {
		return grpcbackoff.Hint{}
	}
	var deadline time.Duration
	if s.st.CallTimeout > 0 {
		deadline = time.Duration(s.deadline(&s.clients[id]))
	}
	cl := s.guard.Client(s.proc(id).key)
	v, _ := s.guard.Failed(&s.method, cl, time.Duration(now), deadline, int64(s.clients[id].attempts)-1, guardcore.RankDefault, false)
	return grpcbackoff.Hint{Delay: v.Wait, Stop: v.Refused}
}

// guardServed counts the answer the server gives client id's attempt now,
// served while the client waits: a retry served is refunded.
func (s *sim) guardServed(id int32, now int64) {
	if s.guard == nil {
		return
	}
	c := &s.clients[id]
	s.guard.Served(&s.method, s.guard.Client(s.proc(id).key), time.Duration(now), int64(c.attempts)-1, guardcore.RankDefault)
}

// GuardBound bounds the retries that reach a server with st's guard, its
// clients without a budget, from the start of an outage of sc answered
// UNAVAILABLE to the end of the run, for processes processes making calls
// calls a second:
//
//	m·(T + W)/W + M·⌈(T + W)/W⌉,  m = s/(1−s)·F·W
//
// s is the guard's Share, W its Window, M its MinRetries, T the outage and
// F the calls per second. In the outage no retry is served, so each slot
// the guard's schedule hands out weighs a whole retry: it hands them out
// at Share of the attempts, m per window once retries are s of them, up to
// a Window ahead (so for T + W), and a retry comes only after a failure
// that took a slot, or one of the at most M a window that a quiet method
// lets through when no slot fits. Counting processes apart adds nothing:
// a client is refused sooner when noisy, never let through more.
func GuardBound(sc Fleet, st Strategy, processes int, calls float64) float64 {
	g, err := guardcore.New(*st.Guard) // for the defaults
	if err != nil {
		return math.NaN()
	}
	share, window := g.Params()
	min := st.Guard.MinRetries
	if min == 0 {
		min = guardcore.DefaultMinRetries
	}
	m := share / (1 - share) * calls * window.Seconds()
	span := (sc.Pause + window).Seconds() / window.Seconds()
	return m*span + float64(min)*math.Ceil(span)
}
