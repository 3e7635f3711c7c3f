package main

import (
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	codepb "google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/redistest"
)

// reporter prints each retry decision the interceptor reports and keeps the
// totals for the summary. It is safe for concurrent use.
type reporter struct {
	mu     sync.Mutex
	out    io.Writer
	byName map[string]*retryStats // by short method name, e.g. "GetInstance"
	total  retryStats
}

type retryStats struct {
	retries   int // retries that were made
	throttled int // retries the throttle refused
	waited    time.Duration
}

func newReporter(out io.Writer) *reporter {
	return &reporter{out: out, byName: make(map[string]*retryStats)}
}

// onRetry is the interceptor's WithOnRetry hook. It prints one line:
//
//	retry  GetInstance     UNAVAILABLE         attempt 1 failed  waiting 1.42s
//
// and, when the server sent a RetryInfo, whether the wait honours it.
func (r *reporter) onRetry(x interceptor.Retry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	name := path.Base(x.Method)
	st := r.byName[name]
	if st == nil {
		st = new(retryStats)
		r.byName[name] = st
	}
	line := fmt.Sprintf("retry  %-14s  %-18s  attempt %d failed", name, codeName(x.Code), x.Attempt)
	if x.Throttled {
		st.throttled++
		r.total.throttled++
		fmt.Fprintf(r.out, "%s  not retried: the retry throttle refused\n", line)
		return
	}
	st.retries++
	st.waited += x.Delay
	r.total.retries++
	r.total.waited += x.Delay
	line += "  waiting " + secs(x.Delay)
	// The hook is not told what the server asked for; read the RetryInfo
	// again from the error (a pushback trailer cannot be seen here).
	if h := grpcbackoff.ServerHint(status.Convert(x.Err), nil); h.Delay > 0 {
		verdict := "honoured"
		if x.Delay < h.Delay {
			verdict = "NOT honoured"
		}
		line += fmt.Sprintf("  (RetryInfo asked for %s: %s)", secs(h.Delay), verdict)
	}
	fmt.Fprintln(r.out, line)
}

// totals returns the retries made, refused and the time waited, overall.
func (r *reporter) totals() retryStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

// summary prints a table of what the fake saw, per method, next to what the
// interceptor reported. A call is an attempt without the
// grpc-previous-rpc-attempts header (which the interceptor sets on retries),
// so for every method ATTEMPTS = CALLS + RETRIES unless something retried
// without telling the hook.
func (r *reporter) summary(attempts []redistest.Attempt, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	type row struct {
		name                     string
		calls, attempts, retries int
		waited                   time.Duration
		answers                  []codes.Code // in order of first appearance
		count                    map[codes.Code]int
	}
	var rows []*row
	index := make(map[string]*row)
	get := func(name string) *row {
		if w := index[name]; w != nil {
			return w
		}
		w := &row{name: name, count: make(map[codes.Code]int)}
		if st := r.byName[name]; st != nil {
			w.retries, w.waited = st.retries, st.waited
		}
		index[name] = w
		rows = append(rows, w)
		return w
	}
	total := &row{name: "TOTAL", count: make(map[codes.Code]int), retries: r.total.retries, waited: r.total.waited}
	for _, a := range attempts {
		w := get(path.Base(a.Method))
		for _, x := range []*row{w, total} {
			x.attempts++
			if len(a.Metadata.Get(interceptor.PreviousAttemptsKey)) == 0 {
				x.calls++
			}
			if x.count[a.Code] == 0 {
				x.answers = append(x.answers, a.Code)
			}
			x.count[a.Code]++
		}
	}
	for _, name := range slices.Sorted(maps.Keys(r.byName)) { // retried but never seen by the server
		get(name)
	}

	fmt.Fprintf(r.out, "summary: %d calls, %d attempts seen by the server, %d retries, %s spent waiting to retry, %s in all\n",
		total.calls, total.attempts, total.retries, secs(total.waited), secs(took))
	if r.total.throttled > 0 {
		fmt.Fprintf(r.out, "         %d retries refused by the retry throttle\n", r.total.throttled)
	}
	tw := tabwriter.NewWriter(r.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "METHOD\tCALLS\tATTEMPTS\tRETRIES\tWAITED\tSERVER ANSWERS")
	for _, w := range append(rows, total) {
		var ans []string
		for _, c := range w.answers {
			ans = append(ans, fmt.Sprintf("%d %s", w.count[c], codeName(c)))
		}
		check := ""
		if w.attempts != w.calls+w.retries {
			check = "  MISMATCH: attempts ≠ calls + retries"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s%s\n", w.name, w.calls, w.attempts, w.retries, secs(w.waited), strings.Join(ans, ", "), check)
	}
	tw.Flush()
}

// codeName returns the canonical name of c, as the API documentation spells
// it: UNAVAILABLE, RESOURCE_EXHAUSTED, CANCELLED.
func codeName(c codes.Code) string { return codepb.Code(c).String() }

// secs formats d in seconds with two decimals: 1.42s.
func secs(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }
