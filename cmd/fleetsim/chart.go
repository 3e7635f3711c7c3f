package main

import (
	"fmt"
	"os"
	"time"

	chart "github.com/wcharczuk/go-chart/v2"
	"github.com/wcharczuk/go-chart/v2/drawing"

	"github.com/platformkit/grpcbackoff/cmd/internal/sim"
)

// Layout of the grid chart, in pixels.
const (
	panelCols = 3
	cellW     = 64
	cellH     = 34
	marginL   = 70 // load labels
	marginT   = 56 // title and outage labels
	panelGap  = 24
	legendH   = 60
)

var (
	white   = drawing.Color{R: 255, G: 255, B: 255, A: 255}
	black   = drawing.Color{R: 0, G: 0, B: 0, A: 255}
	downRed = drawing.Color{R: 222, G: 90, B: 80, A: 255}
)

// recoveredColor shades from dark green (recovered at once) to pale yellow
// (recovered at the end of the window).
func recoveredColor(d, window time.Duration) drawing.Color {
	f := min(d.Seconds()/window.Seconds(), 1)
	lerp := func(a, b uint8) uint8 { return uint8(float64(a) + f*(float64(b)-float64(a))) }
	return drawing.Color{R: lerp(40, 240), G: lerp(160, 225), B: lerp(70, 130), A: 255}
}

// writeGridChart draws one panel per strategy: a cell per load (rows) and
// outage (columns), green shaded by the time to recover, red where goodput
// did not come back.
func writeGridChart(path string, res sim.GridResult) error {
	g := res.Grid
	nl, no := len(g.Loads), len(g.Outages)
	panelW := marginL + no*cellW
	panelH := marginT + nl*cellH
	rows := (len(g.Strategies) + panelCols - 1) / panelCols
	cols := min(panelCols, len(g.Strategies))
	width := cols*panelW + (cols+1)*panelGap
	height := rows*panelH + (rows+1)*panelGap + legendH
	r, err := chart.PNG(width, height)
	if err != nil {
		return err
	}
	font, err := chart.GetDefaultFont()
	if err != nil {
		return err
	}
	r.SetFont(font)
	rect(r, 0, 0, width, height, white)

	text := func(s string, x, y int, size float64, center bool) {
		r.SetFontSize(size)
		r.SetFontColor(black)
		if center {
			x -= r.MeasureText(s).Width() / 2
		}
		r.Text(s, x, y)
	}
	for s, st := range g.Strategies {
		px := panelGap + (s%panelCols)*(panelW+panelGap)
		py := panelGap + (s/panelCols)*(panelH+panelGap)
		title := st.Name
		if st.Name == sim.DefaultStrategy {
			title += " (default)"
		}
		text(title, px+marginL+no*cellW/2, py+16, 12, true)
		text("outage", px+marginL/2, py+marginT-8, 9, true)
		for o, outage := range g.Outages {
			text(fmt.Sprintf("%gs", outage.Seconds()), px+marginL+o*cellW+cellW/2, py+marginT-8, 9, true)
		}
		for l, load := range g.Loads {
			y := py + marginT + l*cellH
			text(fmt.Sprintf("load %.0f%%", load*100), px+4, y+cellH/2+4, 9, false)
			for o := range g.Outages {
				x := px + marginL + o*cellW
				c := res.Cells[s][l][o].Result
				label, color := "down", downRed
				if c.Recovered {
					label, color = fmt.Sprintf("+%ds", int(c.RecoveredAfter/time.Second)), recoveredColor(c.RecoveredAfter, g.After)
				}
				rect(r, x+1, y+1, cellW-2, cellH-2, color)
				text(label, x+cellW/2, y+cellH/2+4, 10, true)
			}
		}
	}
	ly := height - legendH + 10
	backlog := "no bound on the requests waiting for the paused server"
	if g.Base.Backlog > 0 {
		backlog = fmt.Sprintf("at most %d requests wait for the paused server", g.Base.Backlog)
	}
	text(fmt.Sprintf("%d clients, %.0f calls/s offered, %s; load = offered / (server limit / base latency).",
		g.Base.Clients, g.Base.Offered(), backlog), panelGap, ly, 10, false)
	text(fmt.Sprintf("Cell: seconds from the resume until goodput >= 90%% of offered and concurrency <= limit for 5 s in a row; red \"down\": not within %v.", g.After),
		panelGap, ly+16, 10, false)

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := r.Save(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func rect(r chart.Renderer, x, y, w, h int, c drawing.Color) {
	r.SetFillColor(c)
	r.SetStrokeColor(c)
	r.SetStrokeWidth(0)
	r.MoveTo(x, y)
	r.LineTo(x+w, y)
	r.LineTo(x+w, y+h)
	r.LineTo(x, y+h)
	r.Close()
	r.Fill()
}
