// Command backoffplan chooses the parameters of a grpcbackoff.Policy from
// what you want, and shows what a Policy does: its schedule of retries, the
// retry that follows a given elapsed time, and how it fits a deadline.
//
// After a total elapsed time T the next wait is a + (r-1)·T (a: -initial,
// r: -multiplier), so a retry about every 10% of the time already waited is
// -ratio 0.1, which sets r = 1.1.
//
// Usage:
//
//	backoffplan [-initial 1s] [-multiplier 2 | -ratio 0.1] [-max 32s] [-jitter 1s]
//	            [-jitter-factor 0.2] [-attempts 8] [-rows n] [-at 1000s] [-deadline 600s]
//	            [-service google.cloud.redis.v1.CloudRedis [-nonidempotent-retries]
//	             [-conn-config service-config.json] [-xds]]
//
// -service prints, for every method of a gRPC service that googleapis'
// service configs or the pinned Google Cloud clients know (whatever this
// build links), or that this build registers, the policy the interceptor
// package carries out for it and why (interceptor.Retrier.Explain): which
// methods are retried after UNAVAILABLE, which, not idempotent, only after
// a failure that proves the request was not applied, and, code by code,
// which a Google Cloud client retries by itself; for a service configured
// whole, what its other methods get; for a service nobody knows, what the
// library does with its calls.
//
// The defaults are grpcbackoff.DefaultPolicy. Times are from the start of
// the first attempt and count the delays only, not the attempts themselves.
// The exit status is 0, 1 when -deadline finds the policy does not suit the
// deadline, and 2 for invalid flags (a -service that is no service's full
// name, or that this build registers as something else).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"

	"github.com/platformkit/grpcbackoff"
	"github.com/platformkit/grpcbackoff/interceptor"
	"github.com/platformkit/grpcbackoff/plan"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// defaultRows is the most rows the table shows unless -rows asks for more.
const defaultRows = 100

// run is the command with its arguments (without the program name) and its
// output, and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	def := grpcbackoff.DefaultPolicy()
	fs := flag.NewFlagSet("backoffplan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	initial := fs.Duration("initial", def.Initial, "delay before the first retry (a)")
	multiplier := fs.Float64("multiplier", def.Multiplier, "growth of the delay per retry (r), at least 1")
	maxDelay := fs.Duration("max", def.Max, "cap on every delay, jitter included")
	jitter := fs.Duration("jitter", def.Jitter, "most random delay added to each wait (0: none)")
	jitterFactor := fs.Float64("jitter-factor", def.JitterFactor, "spread f of a multiplicative jitter: each wait times U[1-f, 1+f], after -max (grpc-go: 0.2; 0: none)")
	attempts := fs.Int("attempts", def.MaxAttempts, "MaxAttempts: attempts in all, the first included")
	ratio := fs.Float64("ratio", 0, "choose the multiplier for a wait of about ratio times the elapsed time: r = 1 + ratio (overrides -multiplier)")
	rows := fs.Int("rows", 0, fmt.Sprintf("retries in the table (default attempts-1, at most %d)", defaultRows))
	at := fs.Duration("at", 0, "an elapsed time T: print the retry that follows it and its wait")
	deadline := fs.Duration("deadline", 0, "check the policy against this deadline (e.g. 600s): attempts that fit, and warnings (exit status 1)")
	service := fs.String("service", "", "a gRPC service (e.g. google.pubsub.v1.Publisher): print the effective policy of each of its methods, per code who retries, and why")
	unsafeRetries := fs.Bool("nonidempotent-retries", false, "with -service: as interceptor.WithNonIdempotentRetries")
	connConfig := fs.String("conn-config", "", "with -service: a file holding the service config a connection's resolver publishes (JSON): explain each method on such a connection")
	xds := fs.Bool("xds", false, "with -service: explain each method on an xDS channel dialed with interceptor.XDSDialOptions")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: backoffplan [flags]\n\n"+
			"Shows the schedule of an exponential backoff policy (defaults: grpcbackoff.DefaultPolicy),\n"+
			"the retry after an elapsed time, and how the policy fits a deadline.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2 // the flag package has printed the error and the usage
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	bad := func(format string, args ...any) int {
		fmt.Fprintf(stderr, "backoffplan: "+format+"\n", args...)
		return 2
	}
	if fs.NArg() > 0 {
		return bad("unexpected argument %q: all input is given by flags", fs.Arg(0))
	}
	p := def
	p.Initial, p.Multiplier, p.Max, p.Jitter, p.MaxAttempts = *initial, *multiplier, *maxDelay, *jitter, *attempts
	p.JitterFactor = *jitterFactor
	switch {
	case p.Initial <= 0:
		return bad("-initial %v: must be positive", p.Initial)
	case math.IsNaN(p.Multiplier) || math.IsInf(p.Multiplier, 0) || p.Multiplier < 1:
		return bad("-multiplier %v: must be a finite number of at least 1", p.Multiplier)
	case p.Max < p.Initial:
		return bad("-max %v: must not be less than -initial %v", p.Max, p.Initial)
	case p.Jitter < 0:
		return bad("-jitter %v: must not be negative", p.Jitter)
	case !(p.JitterFactor >= 0 && p.JitterFactor < 1):
		return bad("-jitter-factor %v: must be a number in [0, 1)", p.JitterFactor)
	case p.MaxAttempts < 1:
		return bad("-attempts %d: must be at least 1", p.MaxAttempts)
	case set["rows"] && (*rows < 0 || *rows == math.MaxInt):
		return bad("-rows %d: must be between 0 and %d", *rows, math.MaxInt-1)
	case set["at"] && *at < 0:
		return bad("-at %v: must not be negative", *at)
	case set["deadline"] && *deadline <= 0:
		return bad("-deadline %v: must be positive", *deadline)
	}
	if set["ratio"] {
		r, err := plan.MultiplierForRatio(*ratio)
		if err != nil {
			return bad("-ratio %v: %v", *ratio, err)
		}
		p.Multiplier = r
	}
	if err := p.Validate(); err != nil { // not expected after the checks above
		return bad("%v", err)
	}
	var svc serviceLines
	if set["service"] {
		var err error
		if svc, err = serviceMethods(*service); err != nil {
			return bad("%v", err)
		}
	}
	var cc *grpc.ClientConn
	switch {
	case (set["conn-config"] || set["xds"]) && !set["service"]:
		return bad("-conn-config and -xds explain the methods of a -service: give one")
	case set["conn-config"] || set["xds"]:
		var sc []byte
		if set["conn-config"] {
			var err error
			if sc, err = os.ReadFile(*connConfig); err != nil {
				return bad("-conn-config: %v", err)
			}
		}
		var err error
		if cc, err = connWith(string(sc), *xds); err != nil {
			return bad("-conn-config %s: %v", *connConfig, err)
		}
		defer cc.Close()
	}

	pr := printer{w: stdout, prec: precision(p)}
	fmt.Fprintf(stdout, "policy: initial %v, multiplier %v, max %v, jitter %v, attempts %d\n",
		p.Initial, p.Multiplier, p.Max, p.Jitter, p.MaxAttempts)
	if p.JitterFactor > 0 {
		fmt.Fprintf(stdout, "jitter factor %v: each wait times U[%v, %v]\n", p.JitterFactor, 1-p.JitterFactor, 1+p.JitterFactor)
	}
	if set["ratio"] {
		fmt.Fprintf(stdout, "ratio %v: r = %v: after a long time T, each wait is about %v·T\n", *ratio, p.Multiplier, *ratio)
		if k, err := plan.RetryCountRatio(*multiplier, p.Multiplier); err == nil {
			fmt.Fprintf(stdout, "retries: about %.2f times as many as with r = %v over the same time (log %v / log %v)\n",
				k, *multiplier, *multiplier, p.Multiplier)
		}
	}

	if set["service"] {
		var opts []interceptor.Option
		if *unsafeRetries {
			opts = append(opts, interceptor.WithNonIdempotentRetries())
		}
		fmt.Fprintln(stdout)
		if err := explainService(stdout, p, svc, cc, opts...); err != nil {
			return bad("%v", err)
		}
	}

	n := min(p.MaxAttempts-1, defaultRows)
	if set["rows"] {
		n = *rows
	}
	fmt.Fprintln(stdout)
	pr.table(p, n)
	if !set["rows"] && n < p.MaxAttempts-1 {
		fmt.Fprintf(stdout, "(the first %d of %d retries; -rows shows more)\n", n, p.MaxAttempts-1)
	}

	status := 0
	if set["at"] {
		fmt.Fprintln(stdout)
		pr.at(p, *at)
	}
	if set["deadline"] {
		fmt.Fprintln(stdout)
		if !pr.deadline(p, *deadline) {
			status = 1
		}
	}
	return status
}

// printer writes times in seconds with a fixed number of decimals.
type printer struct {
	w    io.Writer
	prec int
}

// precision returns the decimals that show p's durations exactly: 3 (ms),
// as the tables of the derivation do, unless p needs finer.
func precision(p grpcbackoff.Policy) int {
	prec := 3
	for _, d := range []time.Duration{p.Initial, p.Max, p.Jitter} {
		switch {
		case d%time.Microsecond != 0:
			return 9
		case d%time.Millisecond != 0:
			prec = 6
		}
	}
	return prec
}

// sec formats d in seconds, without a unit, for the table: "1057.190".
func (pr printer) sec(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', pr.prec, 64)
}

// s formats d in seconds with the unit and without trailing zeros, for
// sentences: "1057.19s", "600s".
func (pr printer) s(d time.Duration) string {
	return trim(pr.sec(d)) + "s"
}

// trim removes the trailing zeros of a decimal number, and a trailing point.
func trim(f string) string {
	if !strings.Contains(f, ".") {
		return f
	}
	return strings.TrimSuffix(strings.TrimRight(f, "0"), ".")
}

// span formats the range from a to b, or a alone when they are equal.
func (pr printer) span(a, b time.Duration) string {
	if a == b {
		return pr.s(a)
	}
	return pr.s(a) + " to " + pr.s(b)
}

// table prints retries 0 (the first attempt) to n of p.
func (pr printer) table(p grpcbackoff.Policy, n int) {
	jitter := p.Jitter > 0 || p.JitterFactor > 0
	tw := tabwriter.NewWriter(pr.w, 0, 0, 2, ' ', tabwriter.AlignRight)
	cols := []string{"retry", "delay", "elapsed"}
	if jitter {
		cols = []string{"retry", "delay", "with jitter", "elapsed", "worst elapsed"}
	}
	fmt.Fprintln(tw, strings.Join(cols, "\t")+"\t")
	row := func(cells ...string) { fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t") }
	if jitter {
		row("0", "-", "-", pr.sec(0), pr.sec(0))
	} else {
		row("0", "-", pr.sec(0))
	}
	beyond := false
	q := p
	q.MaxAttempts = n + 1 // n < math.MaxInt
	for s := range plan.Schedule(q) {
		cells := []string{strconv.Itoa(s.Retry), pr.sec(s.Delay)}
		if jitter {
			low := time.Duration(float64(s.Delay) * (1 - p.JitterFactor)) // the shortest wait
			span := pr.sec(low)
			if s.MaxDelay > low {
				span += "–" + pr.sec(s.MaxDelay)
			}
			cells = append(cells, span, pr.sec(s.Elapsed), pr.sec(s.MaxElapsed))
		} else {
			cells = append(cells, pr.sec(s.Elapsed))
		}
		if s.Retry >= p.MaxAttempts {
			// A column of its own, on these rows only: the others end unpadded.
			cells[len(cells)-1] += "\t *"
			beyond = true
		}
		row(cells...)
	}
	tw.Flush()
	fmt.Fprintln(pr.w, "retry n is attempt n+1; times in seconds from the start of the first attempt, delays only")
	if beyond {
		fmt.Fprintf(pr.w, "* beyond -attempts %d: the policy gives up after retry %d\n", p.MaxAttempts, p.MaxAttempts-1)
	}
}

// at prints the retry that follows elapsed time t.
func (pr printer) at(p grpcbackoff.Policy, t time.Duration) {
	next := plan.NextAfter(p, t)
	made := "no retry yet"
	if next.Retry > 1 {
		made = fmt.Sprintf("%d retries made, the last at %s", next.Retry-1, pr.s(plan.Retry(p, next.Retry-1).Elapsed))
	}
	fmt.Fprintf(pr.w, "at %s: %s; next is retry %d after %s, at %s (without jitter)\n",
		pr.s(t), made, next.Retry, pr.s(next.Delay), pr.s(next.Elapsed))
	// The derivation's closed form: exact at a retry's start, below the cap.
	a, r := p.Initial.Seconds(), p.Multiplier
	est := min(a+(r-1)*t.Seconds(), p.Max.Seconds())
	fmt.Fprintf(pr.w, "t(T) = min(a + (r-1)·T, max) = %ss\n", trim(strconv.FormatFloat(est, 'f', pr.prec, 64)))
	switch {
	case p.MaxAttempts == 1:
		fmt.Fprintln(pr.w, "but -attempts 1 makes no retry")
	case next.Retry >= p.MaxAttempts:
		last := plan.Retry(p, p.MaxAttempts-1)
		fmt.Fprintf(pr.w, "but -attempts %d gives up after retry %d, at %s\n",
			p.MaxAttempts, last.Retry, pr.span(last.Elapsed, last.MaxElapsed))
	}
}

// deadline prints how p fits deadline d, and reports whether it suits it.
func (pr printer) deadline(p grpcbackoff.Policy, d time.Duration) bool {
	fewest, most := plan.AttemptsWithin(p, d)
	fit := strconv.Itoa(most)
	if fewest != most {
		fit = fmt.Sprintf("%d (with the most jitter) to %d", fewest, most)
	}
	last := plan.Retry(p, p.MaxAttempts-1)
	fmt.Fprintf(pr.w, "deadline %s: %s of %d attempts start in time; the last is due at %s\n",
		pr.s(d), fit, p.MaxAttempts, pr.span(last.Elapsed, last.MaxElapsed))
	if err := plan.CheckDeadline(p, d); err != nil {
		fmt.Fprintf(pr.w, "warning: %s\n", strings.TrimPrefix(err.Error(), "grpcbackoff: "))
		return false
	}
	fmt.Fprintln(pr.w, "ok: the policy uses all its attempts and at least a tenth of the deadline")
	return true
}
