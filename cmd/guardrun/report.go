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
	bound                                                       int64         // of the retries at the handler, for a guarded run
}

// Recovery: the first moment from the trigger's end on from which every
// second, for sustain, saw at least healthyOK of the offered calls succeed
// and at most healthyFailed of them fail.
const (
	sustain       = 2 * time.Second
	healthyOK     = 0.8
	healthyFailed = 0.05
)

func summarize(cfg config, r *result) summary {
	s := r.s
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
	if r.guarded {
		// Share × the calls, plus a window's worth: Share of the calls of
		// one Window, and MinRetries.
		u.bound = int64(guard.DefaultShare*float64(u.calls) +
			guard.DefaultShare*cfg.offered()*guard.DefaultWindow.Seconds() + guard.DefaultMinRetries)
	}
	return u
}

// writeTable writes the runs as a markdown table.
func writeTable(w io.Writer, cfg config, results []*result) {
	fmt.Fprintln(w, "| scenario | clients | guard | calls | first tries at the handler | retries at the handler | retry share | bound | failures marked −1 | failed calls | wasted work | goodput after (calls/s) | recovered after |")
	fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range results {
		u := summarize(cfg, r)
		guardCol, bound, marked := "none", "", ""
		if r.guarded {
			guardCol, marked = "guard", fmt.Sprint(r.state.Refused)
			mark := "✓"
			if u.retries > u.bound {
				mark = "✗"
			}
			bound = fmt.Sprintf("%d %s", u.bound, mark)
		}
		rec := "not in " + cfg.after.String()
		if u.recovered {
			rec = fmt.Sprintf("+%.2f s", u.recoverAfter.Seconds())
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d | %d | %d | %.0f%% | %s | %s | %d | %d | %.0f | %s |\n",
			r.sc.name, r.mix, guardCol, u.calls, u.first, u.retries, 100*u.share, bound, marked, u.failedCalls, u.wasted, u.goodputAfter, rec)
	}
}

// describe says what the runs were, for the table's caption.
func describe(cfg config, scs []scenario) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d clients, each starting %.3g calls a second on average (Poisson; %.0f in all), each call with a %v deadline; ",
		cfg.clients, cfg.rate, cfg.offered(), cfg.deadline)
	fmt.Fprintf(&b, "the trigger from %v to %v of %v. ", cfg.warm, cfg.warm+cfg.trigger, cfg.length())
	for _, sc := range scs {
		what := "outage (every request refused at once with UNAVAILABLE)"
		if sc.costly {
			what = "outage of a dependency (every request fails with UNAVAILABLE after its work)"
		}
		if sc.pause {
			what = "pause (the workers frozen; requests queue, and past the queue are refused with UNAVAILABLE)"
		}
		fmt.Fprintf(&b, "%s: %s; %d workers × %v per request (%.0f requests/s), at most %d queued, UNAVAILABLE for a request not served in %v (its work goes on). ",
			sc.name, what, sc.capacity.Workers, sc.capacity.Service, sc.capacity.Rate(), sc.capacity.Queue, sc.capacity.Timeout)
	}
	return strings.TrimSpace(b.String())
}
