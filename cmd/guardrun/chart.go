package main

import (
	"fmt"
	"math"
	"os"
	"strings"
	"time"
)

// The chart: one column per scenario; in each, the goodput (calls that
// succeeded, per second) above the retries that reached the handler per
// second, with the guard (blue) and without (red), for one mix of clients;
// the trigger shaded.
const (
	cellW, cellH  = 250, 150
	padL, padT    = 52, 56
	gapX, gapY    = 28, 44
	guardColor    = "#1f77b4"
	noGuardColor  = "#d62728"
	triggerColour = "#eeeeee"
)

// writeChart writes the chart of the runs of mix m to path as SVG.
func writeChart(path string, scs []scenario, m mix, results []*result) error {
	width := padL + len(scs)*(cellW+gapX)
	height := padT + 2*(cellH+gapY) + 10
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	var offered float64
	for _, r := range results {
		offered = r.cfg.offered()
	}
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="14" font-weight="bold">A gRPC server with the retry guard (blue) and without (red): %s clients, %.0f calls/s offered</text>`+"\n",
		padL, m, offered)
	fmt.Fprintf(&b, `<text x="%d" y="36" fill="#555">grey: the trigger (flakiness, brownout, outage or pause); top: calls that succeeded per second; bottom: retries that reached the handler per second</text>`+"\n",
		padL)
	for col, sc := range scs {
		var guarded, plain *result
		for _, r := range results {
			if r.sc.name == sc.name && r.mix == m {
				if r.guarded {
					guarded = r
				} else {
					plain = r
				}
			}
		}
		if guarded == nil && plain == nil {
			continue
		}
		cfg := guarded.cfgOr(plain)
		x0 := padL + col*(cellW+gapX)
		for row, c := range []column{ok, retries} {
			y0 := padT + row*(cellH+gapY)
			title := sc.name + ": goodput"
			if c == retries {
				title = sc.name + ": retries at the handler"
			}
			top := cfg.offered() * 1.25
			for _, r := range []*result{guarded, plain} {
				if r != nil {
					top = math.Max(top, maxPerSecond(cfg, r.s, c))
				}
			}
			top = niceCeil(top)
			panel(&b, cfg, x0, y0, title, top)
			for _, l := range []struct {
				r     *result
				color string
			}{{plain, noGuardColor}, {guarded, guardColor}} {
				if l.r != nil {
					polyline(&b, cfg, x0, y0, top, perSecond(cfg, l.r.s, c), l.color)
				}
			}
		}
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// panel draws a cell's frame, trigger band, axes and title.
func panel(b *strings.Builder, cfg config, x0, y0 int, title string, top float64) {
	secs := cfg.length().Seconds()
	tx := func(s float64) float64 { return float64(x0) + s/secs*cellW }
	fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n",
		tx(cfg.warm.Seconds()), y0, tx((cfg.warm+cfg.trigger).Seconds())-tx(cfg.warm.Seconds()), cellH, triggerColour)
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", x0, y0, cellW, cellH)
	fmt.Fprintf(b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", x0, y0-6, title)
	for _, f := range []float64{0, 0.5, 1} {
		y := float64(y0+cellH) - f*cellH
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" fill="#555">%.0f</text>`+"\n", x0-4, y+4, f*top)
	}
	for s := 0.0; s <= secs; s += 10 {
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%.0fs</text>`+"\n", tx(s), y0+cellH+14, s)
	}
}

// polyline draws ys, one value a second, in cell (x0, y0).
func polyline(b *strings.Builder, cfg config, x0, y0 int, top float64, ys []float64, color string) {
	secs := cfg.length().Seconds()
	var pts []string
	for i, y := range ys {
		px := float64(x0) + (float64(i)+0.5)/secs*cellW
		py := float64(y0+cellH) - math.Min(y, top)/top*cellH
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", px, py))
	}
	fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.Join(pts, " "))
}

// perSecond returns column c of s summed over each second of the run.
func perSecond(cfg config, s *series, c column) []float64 {
	k := int(time.Second / cfg.step)
	var out []float64
	for i := 0; i+k <= s.bucket(cfg.length()); i += k {
		out = append(out, float64(s.sum(c, i, i+k)))
	}
	return out
}

func maxPerSecond(cfg config, s *series, c column) float64 {
	var m float64
	for _, v := range perSecond(cfg, s, c) {
		m = math.Max(m, v)
	}
	return m
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}
