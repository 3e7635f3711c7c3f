package sim

import (
	"math"
	"time"
)

// Sample is what happened in one second of model time, [Second, Second+1).
type Sample struct {
	Second int
	// Started is the number of calls started; OK those that succeeded (the
	// goodput), Failed those that ended in an error (given up, refused by
	// the budget or rejected locally).
	Started, OK, Failed int
	// Rejected is the calls and retries rejected locally by adaptive
	// throttling (RunFleet only); Throttled the retries refused by the
	// budget.
	Rejected, Throttled int
	// Attempts is the attempts sent, first ones included; TimedOut those
	// abandoned at the attempt timeout.
	Attempts, TimedOut int
	// Concurrency is the requests in the server at the end of the second,
	// the paused server's backlog and held answers included; Peak the most
	// during the second.
	Concurrency, Peak int
	// Waiting is the calls under way at the end of the second: clients
	// stuck in a call rather than thinking.
	Waiting int
	// Lost is the attempts that found the paused server's backlog full
	// (RunFleet only).
	Lost int
	// FailedRetries is the retries that failed (timed out, or answered
	// UNAVAILABLE), counted in the second they failed (RunFleet only).
	FailedRetries int
	// ServerRetries is the retries that reached the server (attempts after
	// the first of their call), counted in the second in which the server
	// started them or answered them UNAVAILABLE (RunFleet only).
	ServerRetries int
	// Refused is the calls ended by the server's pushback −1: its retry
	// guard's (Strategy.Guard; RunFleet only).
	Refused int
}

// Result is what one Strategy did in one run.
type Result struct {
	Strategy string
	Samples  []Sample
	// Recovered says whether goodput came back after the resume, and
	// RecoveredAfter how long after it: see Recovery.
	Recovered      bool
	RecoveredAfter time.Duration
	// Settled says whether the server and its clients settled after the
	// resume, and SettledAfter how long after it: see Settled.
	Settled      bool
	SettledAfter time.Duration
	// PeakConcurrency is the most requests in the server at once.
	PeakConcurrency int
	// AmplificationOutage and AmplificationAfter are attempts sent per call
	// started during the pause and after it; NaN when no call started.
	AmplificationOutage, AmplificationAfter float64
	// Totals over the run.
	OK, Failed, Rejected, Throttled, Started, Attempts, Lost, ServerRetries, Refused int
	// WaitingAtEnd is the calls still under way at the end of the run.
	WaitingAtEnd int
	// GoodputAfter is the mean goodput, in calls per second, over the last
	// third of the run.
	GoodputAfter float64
	// P50 and P99 are the latencies of the successful calls, retries
	// included, in model time (RunStorm only).
	P50, P99 time.Duration
	// Events is the number of events simulated, Wall the time it took, and
	// BytesPerClient the heap held at the end of the run divided by the
	// number of clients (RunFleet only).
	Events         int64
	Wall           time.Duration
	BytesPerClient float64
	// Leased is the long-run tokens the processes held in leases of the
	// fleet budget when the outage began, beyond the Burst the Ledger may
	// hold (RunFleet, Strategy.LeasePeriod only). Leases of the reserve are
	// not counted: the reserve paid them, as it pays a retry.
	Leased float64
}

// summarize fills the measures of res from its Samples, for a run whose
// pause started at pauseAt and ended at resumeAt, against a server of the
// given concurrency limit, with clients offering offered calls per second.
func (res *Result) summarize(pauseAt, resumeAt time.Duration, limit int, offered float64) {
	for _, x := range res.Samples {
		res.OK += x.OK
		res.Failed += x.Failed
		res.Rejected += x.Rejected
		res.Throttled += x.Throttled
		res.Started += x.Started
		res.Attempts += x.Attempts
		res.Lost += x.Lost
		res.ServerRetries += x.ServerRetries
		res.Refused += x.Refused
		res.PeakConcurrency = max(res.PeakConcurrency, x.Peak)
	}
	n := len(res.Samples)
	if n == 0 {
		return
	}
	res.WaitingAtEnd = res.Samples[n-1].Waiting
	pause := min(int(pauseAt/time.Second), n)
	resume := min(int(math.Ceil(resumeAt.Seconds())), n)
	res.AmplificationOutage = amplification(res.Samples[pause:resume])
	res.AmplificationAfter = amplification(res.Samples[resume:])
	res.Recovered, res.RecoveredAfter = Recovery(res.Samples, resume, limit, offered)
	res.Settled, res.SettledAfter = Settled(res.Samples, resume, limit)
	last := res.Samples[n-n/3:]
	ok := 0
	for _, x := range last {
		ok += x.OK
	}
	if len(last) > 0 {
		res.GoodputAfter = float64(ok) / float64(len(last))
	}
}

// Settled says whether, and how long after second resume, the server and
// its clients settled: every second from then to the end of the run ended
// with at most limit requests in the server and limit calls waiting.
func Settled(samples []Sample, resume, limit int) (bool, time.Duration) {
	first := -1
	for i := len(samples) - 1; i >= resume; i-- {
		if x := samples[i]; x.Concurrency > limit || x.Waiting > limit {
			break
		}
		first = i
	}
	if first < 0 {
		return false, 0
	}
	return true, time.Duration(first-resume) * time.Second
}

// recoveryRun is the number of seconds in a row that make a recovery.
const recoveryRun = 5

// Recovery says whether, and how long after second resume, goodput
// recovered: the first recoveryRun seconds in a row begin in which every
// second ended with at most limit requests in the server and the mean
// goodput reached 90% of offered (calls per second).
func Recovery(samples []Sample, resume, limit int, offered float64) (bool, time.Duration) {
	for i := resume; i+recoveryRun <= len(samples); i++ {
		ok := 0
		healthy := true
		for _, x := range samples[i : i+recoveryRun] {
			ok += x.OK
			healthy = healthy && x.Concurrency <= limit
		}
		if healthy && float64(ok) >= 0.9*offered*recoveryRun {
			return true, time.Duration(i-resume) * time.Second
		}
	}
	return false, 0
}

// amplification is attempts per call started over the samples; NaN when
// no call started.
func amplification(samples []Sample) float64 {
	var attempts, started int
	for _, x := range samples {
		attempts += x.Attempts
		started += x.Started
	}
	if started == 0 {
		return math.NaN()
	}
	return float64(attempts) / float64(started)
}

// percentile returns the q-quantile of sorted (nearest rank), or 0.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}
