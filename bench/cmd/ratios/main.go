// Command ratios reads the results of the bench module's benchmarks (the
// output of go test -bench, many rounds of it) and prints, for every target
// of the performance issue, the medians it compares, their ratio or
// difference, and PASS or MISS.
//
//	go run ./cmd/ratios results.txt
//
// Every figure is a median over the rounds, with benchstat's statistics
// (golang.org/x/perf/benchmath): a ratio's range goes from the lowest to the
// highest ratio that the two medians' 95% confidence intervals allow. A
// ratio over its limit whose range still reaches the limit is reported as
// "MISS (noise)": the rounds cannot tell it from a PASS. "ours never slower
// than the best peer" passes when ours is faster, or when a Mann-Whitney U
// test (as benchstat's) finds no difference at α = 0.05.
package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"golang.org/x/perf/benchfmt"
	"golang.org/x/perf/benchmath"
)

// The mechanism names of the benchmarks (bench/mech_test.go).
const (
	bare       = "bare"
	ours       = "ours"
	oursAll    = "ours+all"
	oursHedge  = "ours+hedge"
	middleware = "middleware"
)

var (
	oursVariants = []string{"ours", "ours+hook", "ours+noop", "ours+sdk", "ours+all"}
	oursOthers   = []string{"ours-pushback", oursHedge}
	peers        = []string{"grpcretry", "middleware", "gax"}
)

func main() {
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: ratios results.txt...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	d, err := read(flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "ratios:", err)
		os.Exit(1)
	}
	r := &report{d: d}
	r.ratios(os.Stdout)
	fmt.Println()
	r.targets()
	r.print(os.Stdout)
}

// data holds the samples: row (the benchmark name without its mech= part)
// → mech → unit (as printed by go test) → one value per round.
type data struct {
	rows []string // in the order first seen
	m    map[string]map[string]map[string][]float64
}

func read(files []string) (*data, error) {
	d := &data{m: map[string]map[string]map[string][]float64{}}
	fs := benchfmt.Files{Paths: files, AllowStdin: true}
	for fs.Scan() {
		res, ok := fs.Result().(*benchfmt.Result)
		if !ok {
			continue // syntax errors and unit metadata: benchstat reports them
		}
		base, parts := res.Name.Parts()
		row, mech, procs := string(base), "", "1"
		for _, p := range parts {
			s := string(p)
			if v, ok := strings.CutPrefix(s, "/mech="); ok {
				mech = v
				continue
			}
			if v, ok := strings.CutPrefix(s, "-"); ok { // GOMAXPROCS, absent for 1
				procs = v
				continue
			}
			row += s
		}
		if procs != "1" || strings.Contains(row, "Parallel") {
			// Runs at -cpu 1 and 2 are rows of their own, so that
			// parallel rows can be compared across them.
			row += "/cpu=" + procs
		}
		if mech == "" {
			continue
		}
		if d.m[row] == nil {
			d.m[row] = map[string]map[string][]float64{}
			d.rows = append(d.rows, row)
		}
		if d.m[row][mech] == nil {
			d.m[row][mech] = map[string][]float64{}
		}
		for _, v := range res.Values {
			unit, val := v.Unit, v.Value
			if v.OrigUnit != "" {
				unit, val = v.OrigUnit, v.OrigValue
			}
			d.m[row][mech][unit] = append(d.m[row][mech][unit], val)
		}
	}
	return d, fs.Err()
}

// summary returns the median of row/mech/unit with its 95% confidence
// interval, and the sample; ok is false if there is none.
func (d *data) summary(row, mech, unit string) (benchmath.Summary, *benchmath.Sample, bool) {
	vals := d.m[row][mech][unit]
	if len(vals) == 0 {
		return benchmath.Summary{}, nil, false
	}
	s := benchmath.NewSample(vals, &benchmath.DefaultThresholds)
	return benchmath.AssumeNothing.Summary(s, 0.95), s, true
}

// rowsWith returns the rows whose name starts with prefix.
func (d *data) rowsWith(prefix string) []string {
	var rows []string
	for _, r := range d.rows {
		if r == prefix || strings.HasPrefix(r, prefix+"/") {
			rows = append(rows, r)
		}
	}
	return rows
}

type check struct {
	target, row, mech string
	value, limit      string
	verdict           string
}

type report struct {
	d      *data
	checks []check
}

func (r *report) add(c check) { r.checks = append(r.checks, c) }

// ratio checks that mech's median of unit in row is at most limit times
// bare's; a limit of 0 reports it for information.
func (r *report) ratio(target, row, mech, unit string, limit float64) {
	o, _, ok1 := r.d.summary(row, mech, unit)
	b, _, ok2 := r.d.summary(row, bare, unit)
	if !ok1 || !ok2 {
		return
	}
	ratio := o.Center / b.Center
	lo, hi := o.Lo/b.Hi, o.Hi/b.Lo
	verdict, lim := "PASS", fmt.Sprintf("≤ %.2f×", limit)
	switch {
	case limit == 0:
		verdict, lim = "INFO", "—"
	case ratio > limit && !(lo > limit):
		verdict = "MISS (noise)"
	case ratio > limit:
		verdict = "MISS"
	}
	rng := fmt.Sprintf("[%.3f–%.3f]", lo, hi)
	if math.IsNaN(lo) || math.IsNaN(hi) || math.IsInf(lo, 0) || math.IsInf(hi, 0) {
		rng = "[too few rounds for a range]"
	}
	r.add(check{target, row, mech,
		fmt.Sprintf("%.3f× %s (%s vs %s %s)", ratio, rng, num(o.Center), num(b.Center), unit),
		lim, verdict})
}

// paired checks that mech's median x-bare (its time over bare's, measured
// in pairs: see bench/paired_test.go) in row is at most limit; a limit of 0
// reports it for information.
func (r *report) paired(target, row, mech string, limit float64) {
	o, _, ok := r.d.summary(row, mech, "x-bare")
	if !ok {
		return
	}
	verdict, lim := "PASS", fmt.Sprintf("≤ %.2f×", limit)
	switch {
	case limit == 0:
		verdict, lim = "INFO", "—"
	case o.Center > limit && !(o.Lo > limit):
		verdict = "MISS (noise)"
	case o.Center > limit:
		verdict = "MISS"
	}
	rng := fmt.Sprintf("[%.3f–%.3f]", o.Lo, o.Hi)
	if math.IsInf(o.Lo, 0) || math.IsInf(o.Hi, 0) || math.IsNaN(o.Lo) {
		rng = "[too few rounds for a range]"
	}
	self := ""
	if b, _, ok := r.d.summary(row, bare, "x-bare"); ok {
		self = fmt.Sprintf(", bare/bare %.3f", b.Center)
	}
	ns, _, _ := r.d.summary(row, mech, "ns/call")
	bns, _, _ := r.d.summary(row, mech, "bare-ns/call")
	r.add(check{target, row, mech,
		fmt.Sprintf("%.3f× %s paired (%s vs %s ns%s)", o.Center, rng, num(ns.Center), num(bns.Center), self),
		lim, verdict})
}

// time checks a time ratio: paired if the row was measured in pairs too.
func (r *report) time(target, row, mech, unit string, limit float64) {
	if _, ok := r.d.m["Paired"+row]; ok {
		r.paired(target, "Paired"+row, mech, limit)
		return
	}
	r.ratio(target, row, mech, unit, limit)
}

// delta checks that mech's median of unit in row exceeds bare's by at most
// limit.
func (r *report) delta(target, row, mech, unit string, limit float64) {
	r.deltaFrom(target, row, mech, bare, unit, limit)
}

// deltaFrom checks that mech's median of unit in row exceeds base's by at
// most limit.
func (r *report) deltaFrom(target, row, mech, base, unit string, limit float64) {
	o, _, ok1 := r.d.summary(row, mech, unit)
	b, _, ok2 := r.d.summary(row, base, unit)
	if !ok1 || !ok2 {
		return
	}
	diff := o.Center - b.Center
	verdict := "PASS"
	switch {
	case diff > limit && !(o.Lo-b.Hi > limit):
		verdict = "MISS (noise)"
	case diff > limit:
		verdict = "MISS"
	}
	r.add(check{target, row, mech,
		fmt.Sprintf("%+.4g %s (%s vs %s)", diff, unit, num(o.Center), num(b.Center)),
		fmt.Sprintf("≤ %+g", limit), verdict})
}

// overhead checks that mech's overhead over bare (median ns/op) in row is
// at most limit times peer's.
func (r *report) overhead(target, row, mech, peer string, limit float64) {
	o, _, ok1 := r.d.summary(row, mech, "ns/op")
	p, _, ok2 := r.d.summary(row, peer, "ns/op")
	b, _, ok3 := r.d.summary(row, bare, "ns/op")
	if !ok1 || !ok2 || !ok3 || p.Center <= b.Center {
		return
	}
	ratio := (o.Center - b.Center) / (p.Center - b.Center)
	verdict := "PASS"
	switch {
	case ratio > limit && !((o.Lo-b.Hi)/(p.Hi-b.Lo) > limit):
		verdict = "MISS (noise)"
	case ratio > limit:
		verdict = "MISS"
	}
	r.add(check{target, row, mech,
		fmt.Sprintf("%.2f× (%+.4g vs %s's %+.4g ns/op)", ratio, o.Center-b.Center, peer, p.Center-b.Center),
		fmt.Sprintf("≤ %.2f×", limit), verdict})
}

// scaling checks that mech's median ns/op in row is at most limit times
// its median in base (the same benchmark at another -cpu).
func (r *report) scaling(target, base, row, mech string, limit float64) {
	o, _, ok1 := r.d.summary(row, mech, "ns/op")
	b, _, ok2 := r.d.summary(base, mech, "ns/op")
	if !ok1 || !ok2 {
		return
	}
	ratio := o.Center / b.Center
	verdict := "PASS"
	switch {
	case ratio > limit && !(o.Lo/b.Hi > limit):
		verdict = "MISS (noise)"
	case ratio > limit:
		verdict = "MISS"
	}
	r.add(check{target, row, mech,
		fmt.Sprintf("%.2f× (%s vs %s ns/op)", ratio, num(o.Center), num(b.Center)),
		fmt.Sprintf("≤ %.2f×", limit), verdict})
}

// info reports mech's median of unit in row beside bare's, without a
// target: a figure too noisy to judge, shown for the record.
func (r *report) info(target, row, mech, unit string) {
	o, _, ok1 := r.d.summary(row, mech, unit)
	b, _, ok2 := r.d.summary(row, bare, unit)
	if !ok1 || !ok2 {
		return
	}
	r.add(check{target, row, mech,
		fmt.Sprintf("%+.4g %s (%s vs %s)", o.Center-b.Center, unit, num(o.Center), num(b.Center)), "—", "INFO"})
}

// bestPeer checks that mech is not slower (unit: lower is better) than the
// best peer measured in row, beyond noise.
func (r *report) bestPeer(row, mech, unit string) {
	o, os, ok := r.d.summary(row, mech, unit)
	if !ok {
		return
	}
	best, bestName := math.Inf(1), ""
	var bs *benchmath.Sample
	for _, p := range peers {
		if s, sample, ok := r.d.summary(row, p, unit); ok && s.Center < best {
			best, bestName, bs = s.Center, p, sample
		}
	}
	if bestName == "" {
		return
	}
	cmp := benchmath.AssumeNothing.Compare(bs, os)
	verdict := "PASS"
	switch {
	case o.Center <= best:
	case cmp.P >= cmp.Alpha:
		verdict = fmt.Sprintf("PASS (noise, p=%.2f)", cmp.P)
	default:
		verdict = fmt.Sprintf("MISS (p=%.3f)", cmp.P)
	}
	r.add(check{"never slower than the best peer", row, mech,
		fmt.Sprintf("%.3f× %s (%s vs %s %s)", o.Center/best, bestName, num(o.Center), num(best), unit),
		"≤ best", verdict})
}

// targets are the issues': the isolated success path (no call options) at
// most 3× the middleware's overhead over bare in the same run, with no
// allocation, and, in parallel, at most 0.6× its -cpu 1 time at -cpu 2
// (issue 28); a unary call over bufconn, paired, at most 1.01× bare and 4
// allocations over it (issue 34: grpc-go's copies for grpc.Header and
// grpc.Trailer); one retry, isolated, at most 7 allocations; a
// hedged call whose first attempt is fast at most 1.01× bare and 3
// allocations over an unhedged one. Streams and parallel calls over
// bufconn are reported for information.
func (r *report) targets() {
	d := r.d
	for _, row := range d.rowsWith("Unary") {
		for _, m := range oursVariants {
			r.time("unary success time", row, m, "ns/op", 1.01)
			r.delta("unary success allocs over bare", row, m, "allocs/op", 4)
		}
	}
	for _, row := range d.rowsWith("PairedUnaryHedged") {
		r.paired("hedged unary, fast first attempt: time", row, oursHedge, 1.01)
		r.paired("hedged unary: unhedged ours, same run", row, ours, 0)
		r.deltaFrom("hedged unary: allocs over unhedged ours (2 calls/op)", row, oursHedge, ours, "allocs/op", 3)
	}
	for _, row := range d.rowsWith("IsolatedHedged") {
		r.deltaFrom("isolated hedged: allocs over unhedged ours", row, oursHedge, ours, "allocs/op", 3)
		r.info("isolated hedged: ns over bare", row, oursHedge, "ns/op")
	}
	for _, row := range d.rowsWith("UnaryParallel") {
		for _, m := range oursVariants {
			r.time("parallel unary time", row, m, "ns/op", 0)
			r.info("parallel unary allocs", row, m, "allocs/op")
		}
	}
	for _, kind := range []string{"ServerStream", "ClientStream", "BidiStream"} {
		for _, row := range d.rowsWith(kind) {
			for _, m := range []string{ours, oursAll} {
				r.time("stream time per message", row, m, "ns/msg", 0)
				r.info("stream allocs per stream", row, m, "allocs/op")
			}
		}
	}
	for _, row := range d.rowsWith("UnaryRetry") {
		for _, m := range oursVariants {
			r.time("one retry vs two bare calls", row, m, "ns/op", 0)
			r.info("one retry: allocs over two bare calls", row, m, "allocs/op")
		}
	}
	for _, row := range d.rowsWith("Isolated") {
		if strings.Contains(row, "opts=none") {
			r.overhead("isolated success: overhead over middleware's", row, ours, middleware, 3)
		}
		for _, m := range append(oursVariants, "ours-pushback") {
			r.delta("isolated success allocs", row, m, "allocs/op", 0)
		}
	}
	for _, row := range d.rowsWith("IsolatedParallel") {
		if one, ok := strings.CutSuffix(row, "/cpu=2"); ok {
			for _, m := range []string{ours, middleware} {
				r.scaling("isolated parallel: -cpu 2 over -cpu 1", one+"/cpu=1", row, m, 0.6)
			}
		}
	}
	for _, row := range d.rowsWith("IsolatedRetry") {
		for _, m := range oursVariants {
			r.delta("isolated one retry allocs", row, m, "allocs/op", 7)
		}
	}
	for _, row := range d.rows {
		unit := "ns/op"
		switch {
		case strings.HasPrefix(row, "Paired"):
			continue // with its unpaired row
		case strings.HasPrefix(row, "Waiting"):
			unit = "B/wait"
		case d.m["Paired"+row] != nil:
			row, unit = "Paired"+row, "x-bare"
		}
		for _, m := range []string{ours, oursAll} {
			r.bestPeer(row, m, unit)
		}
	}
}

func (r *report) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tcase\tmech\tmeasured\tlimit\tverdict")
	for _, c := range r.checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.target, c.row, c.mech, c.value, c.limit, c.verdict)
	}
	tw.Flush()
	var pass, miss, noise, info int
	for _, c := range r.checks {
		switch {
		case c.verdict == "INFO":
			info++
		case strings.HasPrefix(c.verdict, "MISS (noise"):
			noise++
		case strings.HasPrefix(c.verdict, "MISS"):
			miss++
		default:
			pass++
		}
	}
	fmt.Fprintf(w, "\ntargets: %d met, %d missed, %d missed within noise (%d figures for information)\n", pass, miss, noise, info)
}

// ratios prints, for every case, each mechanism's median time and allocs
// relative to bare's: the table the README shows.
func (r *report) ratios(w io.Writer) {
	d := r.d
	var mechs []string
	for _, row := range d.rows {
		for m := range d.m[row] {
			if !slices.Contains(mechs, m) {
				mechs = append(mechs, m)
			}
		}
	}
	order := slices.Concat([]string{bare}, oursVariants, oursOthers, peers)
	slices.SortStableFunc(mechs, func(a, b string) int {
		return index(order, a) - index(order, b)
	})
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "ratio to bare (time) / allocs over bare\t")
	for _, m := range mechs {
		fmt.Fprintf(tw, "%s\t", m)
	}
	fmt.Fprintln(tw)
	for _, row := range d.rows {
		unit := "ns/op"
		if _, ok := d.m[row][bare]; !ok || strings.HasPrefix(row, "Paired") {
			continue // Waiting: no bare column; Paired: below
		}
		if strings.Contains(row, "Stream") {
			unit = "ns/msg"
		}
		b, _, _ := d.summary(row, bare, unit)
		ba, _, _ := d.summary(row, bare, "allocs/op")
		fmt.Fprintf(tw, "%s (%s %s, %s allocs)\t", row, num(b.Center), unit, num(ba.Center))
		for _, m := range mechs {
			s, _, ok := d.summary(row, m, unit)
			a, _, _ := d.summary(row, m, "allocs/op")
			switch {
			case !ok:
				fmt.Fprint(tw, "—\t")
			case m == bare:
				fmt.Fprint(tw, "1\t")
			case strings.HasPrefix(row, "Isolated"):
				fmt.Fprintf(tw, "%+.1fns %+g\t", s.Center-b.Center, a.Center-ba.Center)
			default:
				fmt.Fprintf(tw, "%.3f× %+g\t", s.Center/b.Center, a.Center-ba.Center)
			}
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintln(w, "(Isolated rows: ns over bare instead of a ratio. Streams: ns/msg.)")

	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "\nmeasured in pairs with bare (median time over bare's; bare/bare is the method's error):\n")
	fmt.Fprintf(tw, "x-bare\t")
	for _, m := range mechs {
		fmt.Fprintf(tw, "%s\t", m)
	}
	fmt.Fprintln(tw)
	for _, row := range d.rows {
		if !strings.HasPrefix(row, "Paired") {
			continue
		}
		fmt.Fprintf(tw, "%s\t", row)
		for _, m := range mechs {
			if s, _, ok := d.summary(row, m, "x-bare"); ok {
				fmt.Fprintf(tw, "%.3f×\t", s.Center)
			} else {
				fmt.Fprint(tw, "—\t")
			}
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()

	// Memory: no bare column.
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := false
	for _, row := range d.rowsWith("Waiting") {
		if !header {
			fmt.Fprintf(w, "\nmemory held per call waiting in backoff (heap B/wait + goroutine stack-B/wait):\n")
			header = true
		}
		fmt.Fprintf(tw, "%s\t", row)
		for _, m := range mechs {
			h, _, ok := d.summary(row, m, "B/wait")
			s, _, _ := d.summary(row, m, "stack-B/wait")
			if ok {
				fmt.Fprintf(tw, "%s: %s + %s\t", m, num(h.Center), num(s.Center))
			}
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

func index(order []string, m string) int {
	if i := slices.Index(order, m); i >= 0 {
		return i
	}
	return len(order)
}

// num formats a median compactly.
func num(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6:
		return fmt.Sprintf("%.3gM", v/1e6)
	case a >= 1e4:
		return fmt.Sprintf("%.3gk", v/1e3)
	case a >= 100 || a == math.Trunc(a):
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}
