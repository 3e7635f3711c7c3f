package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/platformkit/grpcbackoff/guard"
)

// summary is what a run's table row says.
type summary struct {
	calls, first, retries, okCalls, failedCalls, served, wasted int64
	share                                                       float64 // retries over attempts at the handler
	goodputAfter                                                float64 // calls a second that succeeded after the trigger
	recovered                                                   bool
	recoverAfter                                                time.Duration // from the trigger's end
	// The densest step of retries at the handler while the guard was over
	// (its State.Over sampled once a step), and twice its share's rate in a
	// step then: 2 · Share/(1−Share) of the first tries a step, on average
	// over those steps. Guarded runs only.
	overSteps, densest int64
	densestSheddable   int64 // the same of the retries of sheddable calls (brownout)
	twiceShare         float64
	patientOK          int64   // patient calls served
	sheddable          float64 // failed share of the sheddable calls (brownout)
	critical           float64 // ... of the critical calls
}

// Recovery: the first moment from the trigger's end on from which every
// second, for sustain, saw at least healthyOK of the offered calls succeed
// and at most healthyFailed of them fail.
const (
	sustain       = 2 * time.Second
	healthyOK     = 0.8
	healthyFailed = 0.05
)

func summarize(r *result) summary {
	cfg, s := r.cfg, r.s
	n := len(s.b)                    // the totals count the series' tail: calls started in the run end in it
	runEnd := s.bucket(cfg.length()) // the rest stops at the run's end
	var u summary
	u.calls = s.sum(offered, 0, n)
	u.first, u.retries = s.sum(firstTries, 0, n), s.sum(retries, 0, n)
	u.okCalls, u.failedCalls = s.sum(ok, 0, n), s.sum(failed, 0, n)
	u.served, u.wasted = s.sum(served, 0, n), s.sum(wasted, 0, n)
	if u.first+u.retries > 0 {
		u.share = float64(u.retries) / float64(u.first+u.retries)
	}
	endTrigger := s.bucket(cfg.warm + cfg.trigger)
	u.goodputAfter = float64(s.sum(ok, endTrigger, runEnd)) / cfg.after.Seconds()
	perSecond := int(time.Second / cfg.step)
	healthy := func(k int) bool {
		o, f := float64(s.sum(ok, k, k+perSecond)), float64(s.sum(failed, k, k+perSecond))
		return o >= healthyOK*cfg.offered() && f <= healthyFailed*cfg.offered()
	}
	for b := endTrigger; b+int(sustain/cfg.step)+perSecond <= runEnd; b++ {
		all := true
		for k := b; k <= b+int(sustain/cfg.step) && all; k++ {
			all = healthy(k)
		}
		if all {
			u.recovered, u.recoverAfter = true, time.Duration(b-endTrigger)*cfg.step
			break
		}
	}
	var firstOver int64
	for i := range n {
		if s.get(i, over) > 0 {
			u.overSteps++
			u.densest = max(u.densest, s.get(i, retries))
			u.densestSheddable = max(u.densestSheddable, s.get(i, sheddableRetries))
			firstOver += s.get(i, firstTries)
		}
	}
	if u.overSteps > 0 {
		u.twiceShare = 2 * guard.DefaultShare / (1 - guard.DefaultShare) * float64(firstOver) / float64(u.overSteps)
	}
	u.patientOK = s.sum(patientOK, 0, n)
	if c := s.sum(sheddable, 0, n); c > 0 {
		u.sheddable = float64(s.sum(sheddableFailed, 0, n)) / float64(c)
	}
	if c := s.sum(critical, 0, n); c > 0 {
		u.critical = float64(s.sum(criticalFailed, 0, n)) / float64(c)
	}
	return u
}

// writeTable writes the runs as a markdown table.
func writeTable(w io.Writer, results []*result) {
	fmt.Fprintln(w, "| scenario | clients | guard | calls | retries at the handler | failed calls | paced | refused | goodput after (calls/s) | recovered after | densest 100 ms of retries while over (2× share) | patient calls served | failed: sheddable, critical |")
	fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range results {
		u := summarize(r)
		guardCol, paced, refused, densest := "none", "", "", ""
		if r.guarded {
			guardCol = "guard"
			paced, refused = fmt.Sprint(r.state.Paced), fmt.Sprint(r.state.Refused)
			switch {
			case u.overSteps > 0 && r.sc.brownout > 0:
				densest = fmt.Sprintf("%d, sheddable %d (%.1f) in %d", u.densest, u.densestSheddable, u.twiceShare, u.overSteps)
			case u.overSteps > 0:
				densest = fmt.Sprintf("%d (%.1f) in %d", u.densest, u.twiceShare, u.overSteps)
			default:
				densest = "never over"
			}
		}
		rec := "not in " + r.cfg.after.String()
		if u.recovered {
			rec = fmt.Sprintf("+%.2f s", u.recoverAfter.Seconds())
		}
		patient, classes := "", ""
		if r.sc.patient {
			patient = fmt.Sprintf("%d of %d", u.patientOK, patientCalls)
		}
		if r.sc.brownout > 0 {
			classes = fmt.Sprintf("%.1f%%, %.1f%%", 100*u.sheddable, 100*u.critical)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d | %d | %d | %s | %s | %.0f | %s | %s | %s | %s |\n",
			r.sc.name, r.mix, guardCol, u.calls, u.retries, u.failedCalls, paced, refused, u.goodputAfter, rec, densest, patient, classes)
	}
}

// describe says what the runs were, for the table's caption.
func describe(cfg config, scs []scenario) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d clients, each starting %.3g calls a second on average (Poisson; %.0f in all), each call with a %v deadline. ",
		cfg.clients, cfg.rate, cfg.offered(), cfg.deadline)
	for _, sc := range scs {
		var what string
		switch {
		case sc.flaky > 0:
			what = fmt.Sprintf("%.0f%% of the requests fail at once with UNAVAILABLE, at random", 100*sc.flaky)
		case sc.brownout > 0:
			what = fmt.Sprintf("%.0f%% of the requests shed at once with RESOURCE_EXHAUSTED, every other call SHEDDABLE, the others CRITICAL_PLUS", 100*sc.brownout)
		case sc.pause:
			what = "the workers frozen; requests queue, and past the queue are refused"
		case sc.costly:
			what = "an outage of a dependency: every request fails with UNAVAILABLE after its work"
		default:
			what = "an outage: every request refused at once with UNAVAILABLE"
		}
		if sc.patient {
			what += fmt.Sprintf(", and %d calls with %v deadlines start in it, 0.5 s apart", patientCalls, patientDeadline)
		}
		fmt.Fprintf(&b, "%s: %s, from %v to %v of %v; %d workers × %v per request (%.0f requests/s), at most %d queued, %v past that or for a request not served in %v (its work goes on). ",
			sc.name, what, sc.timing.warm, sc.timing.warm+sc.timing.trigger, sc.timing.warm+sc.timing.trigger+sc.timing.after,
			sc.capacity.Workers, sc.capacity.Service, sc.capacity.Rate(), sc.capacity.Queue, sc.capacity.Shed, sc.capacity.Timeout)
	}
	return strings.TrimSpace(b.String())
}
