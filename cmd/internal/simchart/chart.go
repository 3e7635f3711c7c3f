// Package simchart draws the runs of package sim: the server's concurrency
// and the goodput over time, one line per strategy, as PNG or SVG.
package simchart

import (
	"bytes"
	"fmt"
	"image"
	"image/draw"
	"image/png"
	"math"
	"os"
	"strings"
	"time"

	chart "github.com/wcharczuk/go-chart/v2"
	"github.com/wcharczuk/go-chart/v2/drawing"

	"github.com/platformkit/grpcbackoff/cmd/internal/sim"
)

// The size of a chart: two panels of PanelHeight, one above the other.
const (
	Width       = 1000
	PanelHeight = 420
)

// palette gives each strategy the same colour in both panels.
var palette = []drawing.Color{
	{R: 214, G: 39, B: 40, A: 255},   // red
	{R: 255, G: 127, B: 14, A: 255},  // orange
	{R: 31, G: 119, B: 180, A: 255},  // blue
	{R: 44, G: 160, B: 44, A: 255},   // green
	{R: 148, G: 103, B: 189, A: 255}, // purple
	{R: 140, G: 86, B: 75, A: 255},   // brown
	{R: 227, G: 119, B: 194, A: 255}, // pink
	{R: 23, G: 190, B: 207, A: 255},  // cyan
}

// Frame is what the chart marks beside the runs: the server's limit, the
// offered load, the pause and the length of the run, and a description of
// the clients for the title.
type Frame struct {
	Limit          int
	Offered        float64 // calls per second
	PauseAt, Pause time.Duration
	Duration       time.Duration
	Clients        string // e.g. "100000 clients"
}

// StormFrame is the Frame of a RunStorm experiment.
func StormFrame(sc sim.Storm) Frame {
	return Frame{Limit: sc.Model.Limit, Offered: sc.Population.Offered(), PauseAt: sc.PauseAt, Pause: sc.Pause,
		Duration: sc.Duration, Clients: fmt.Sprintf("%d clients, latency rule %v", sc.Population.Clients, sc.Model.Rule)}
}

// FleetFrame is the Frame of a RunFleet experiment.
func FleetFrame(sc sim.Fleet) Frame {
	return Frame{Limit: sc.Model.Limit, Offered: sc.Offered(), PauseAt: sc.PauseAt, Pause: sc.Pause,
		Duration: sc.Duration, Clients: fmt.Sprintf("%d clients, %d per process", sc.Clients, sc.PerProcess)}
}

var grey = drawing.Color{R: 120, G: 120, B: 120, A: 255}

// Write writes two panels, one above the other, to path (PNG or SVG by
// its extension): the server's concurrency (at the end of each second, on a
// log scale) and the goodput (successful calls per second), one line per
// strategy, with the limit, the offered load and the pause marked.
func Write(path string, sc Frame, results []sim.Result) error {
	svg := strings.HasSuffix(path, ".svg")
	provider := chart.PNG
	if svg {
		provider = chart.SVG
	}
	var panels [][]byte
	for _, c := range []chart.Chart{concurrencyChart(sc, results), goodputChart(sc, results)} {
		var b bytes.Buffer
		if err := c.Render(provider, &b); err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		panels = append(panels, b.Bytes())
	}
	var out []byte
	var err error
	if svg {
		out = stackSVG(panels)
	} else if out, err = stackPNG(panels); err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}

func concurrencyChart(sc Frame, results []sim.Result) chart.Chart {
	top := float64(sc.Limit)
	var series []chart.Series
	for i, r := range results {
		x, y := make([]float64, len(r.Samples)), make([]float64, len(r.Samples))
		for j, s := range r.Samples {
			x[j], y[j] = float64(s.Second+1), math.Max(float64(s.Concurrency), 1)
			top = math.Max(top, y[j])
		}
		series = append(series, line(r.Strategy, x, y, palette[i%len(palette)], false))
	}
	limit := float64(sc.Limit)
	series = append(series, line(fmt.Sprintf("limit (%d)", sc.Limit), span(sc), []float64{limit, limit}, grey, true))
	top = math.Pow(10, math.Ceil(math.Log10(top)))
	series = append(series, pauseBand(sc, top)...)
	return panel(sc, fmt.Sprintf("Server concurrency (requests in flight at the end of each second, log scale; 1 stands for 0) - %s", sc.Clients),
		series, &chart.LogarithmicRange{Min: 0, Max: top})
}

func goodputChart(sc Frame, results []sim.Result) chart.Chart {
	offered := sc.Offered
	top := offered * 1.5
	var series []chart.Series
	for i, r := range results {
		x, y := make([]float64, len(r.Samples)), make([]float64, len(r.Samples))
		for j, s := range r.Samples {
			x[j], y[j] = float64(s.Second+1), float64(s.OK)
			top = math.Max(top, y[j])
		}
		series = append(series, line(r.Strategy, x, y, palette[i%len(palette)], false))
	}
	series = append(series, line(fmt.Sprintf("offered (%.0f/s)", offered), span(sc), []float64{offered, offered}, grey, true))
	step := niceStep(top / 6)
	top = math.Ceil(top/step) * step
	series = append(series, pauseBand(sc, top)...)
	c := panel(sc, "Goodput (successful calls per second)", series, &chart.ContinuousRange{Min: 0, Max: top})
	for y := 0.0; y <= top; y += step {
		c.YAxis.Ticks = append(c.YAxis.Ticks, chart.Tick{Value: y, Label: fmt.Sprintf("%.0f", y)})
	}
	return c
}

// niceStep returns the least of 1, 2 or 5 times a power of ten that is at
// least x.
func niceStep(x float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(math.Max(x, 1))))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

func panel(sc Frame, title string, series []chart.Series, yRange chart.Range) chart.Chart {
	end := sc.Duration.Seconds()
	step := math.Max(1, math.Round(end/12))
	var ticks []chart.Tick
	for x := 0.0; x <= end; x += step {
		ticks = append(ticks, chart.Tick{Value: x, Label: fmt.Sprintf("%.0f", x)})
	}
	c := chart.Chart{
		Title:      title,
		TitleStyle: chart.Style{FontSize: 11, Padding: chart.Box{Top: 6}},
		Width:      Width,
		Height:     PanelHeight,
		Background: chart.Style{Padding: chart.Box{Top: 70, Left: 20, Right: 20, Bottom: 10}},
		XAxis: chart.XAxis{
			Name:  "model time (s)", // no name on the Y axes: go-chart's SVG output rotates the text drawn after a rotated one
			Range: &chart.ContinuousRange{Min: 0, Max: end},
			Ticks: ticks,
		},
		YAxis: chart.YAxis{
			Range:          yRange,
			ValueFormatter: func(v any) string { return fmt.Sprintf("%.0f", v.(float64)) },
		},
		YAxisSecondary: chart.YAxis{Style: chart.Hidden()}, // unused: no stray ticks
		Series:         series,
	}
	c.Elements = []chart.Renderable{chart.LegendThin(&c, chart.Style{FontSize: 9})}
	return c
}

func line(name string, x, y []float64, color drawing.Color, dashed bool) chart.ContinuousSeries {
	st := chart.Style{StrokeColor: color, StrokeWidth: 2}
	if dashed {
		st.StrokeWidth = 1
		st.StrokeDashArray = []float64{5, 5}
	}
	return chart.ContinuousSeries{Name: name, XValues: x, YValues: y, Style: st}
}

// span is the x extent of the run.
func span(sc Frame) []float64 {
	return []float64{0, sc.Duration.Seconds()}
}

// pauseBand marks the start and end of the pause with vertical lines.
func pauseBand(sc Frame, top float64) []chart.Series {
	from, to := sc.PauseAt.Seconds(), (sc.PauseAt + sc.Pause).Seconds()
	st := chart.Style{StrokeColor: grey, StrokeWidth: 1, StrokeDashArray: []float64{2, 4}}
	return []chart.Series{
		chart.ContinuousSeries{Name: fmt.Sprintf("pause %v–%v", sc.PauseAt, sc.PauseAt+sc.Pause), XValues: []float64{from, from}, YValues: []float64{1, top}, Style: st},
		chart.ContinuousSeries{XValues: []float64{to, to}, YValues: []float64{1, top}, Style: st},
	}
}

// stackPNG draws the PNG panels one above the other.
func stackPNG(panels [][]byte) ([]byte, error) {
	var imgs []image.Image
	h := 0
	for _, p := range panels {
		img, err := png.Decode(bytes.NewReader(p))
		if err != nil {
			return nil, fmt.Errorf("chart: %w", err)
		}
		imgs = append(imgs, img)
		h += img.Bounds().Dy()
	}
	out := image.NewRGBA(image.Rect(0, 0, Width, h))
	y := 0
	for _, img := range imgs {
		b := img.Bounds()
		draw.Draw(out, image.Rect(0, y, b.Dx(), y+b.Dy()), img, b.Min, draw.Src)
		y += b.Dy()
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, out); err != nil {
		return nil, fmt.Errorf("chart: %w", err)
	}
	return buf.Bytes(), nil
}

// stackSVG nests the SVG panels, one above the other, in one document.
func stackSVG(panels [][]byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" width="%d" height="%d">`+"\n",
		Width, PanelHeight*len(panels))
	for i, p := range panels {
		s := string(p)
		s = strings.Replace(s, "<svg ", fmt.Sprintf(`<svg x="0" y="%d" width="%d" height="%d" `, i*PanelHeight, Width, PanelHeight), 1)
		b.WriteString(s)
		b.WriteString("\n")
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// Color returns the i-th colour of the palette: red, orange, blue, green,
// purple, brown, pink, cyan.
func Color(i int) drawing.Color { return palette[i%len(palette)] }

// Line is a line of the given colour, dashed or not.
func Line(name string, x, y []float64, color drawing.Color, dashed bool) chart.ContinuousSeries {
	s := line(name, x, y, color, dashed)
	s.Style.DotWidth, s.Style.DotColor = 4, color
	return s
}

// A Key is an entry of WriteGrid's legend: a line's name, colour and dash.
type Key struct {
	Name   string
	Color  drawing.Color
	Dashed bool
}

// legendHeight is the height of WriteGrid's legend.
const legendHeight = 26

// WriteGrid writes a PNG of panels in rows, each row's panels side by side,
// under a title and, if keys are given, a legend of the lines (the panels
// have none).
func WriteGrid(path, title string, keys []Key, rows [][]chart.Chart) error {
	var imgs [][]image.Image
	w, h := 0, 30
	if len(keys) > 0 {
		h += legendHeight
	}
	for _, row := range rows {
		var line []image.Image
		rw, rh := 0, 0
		for _, c := range row {
			var b bytes.Buffer
			if err := c.Render(chart.PNG, &b); err != nil {
				return fmt.Errorf("chart: %w", err)
			}
			img, err := png.Decode(&b)
			if err != nil {
				return fmt.Errorf("chart: %w", err)
			}
			line = append(line, img)
			rw, rh = rw+img.Bounds().Dx(), max(rh, img.Bounds().Dy())
		}
		imgs = append(imgs, line)
		w, h = max(w, rw), h+rh
	}
	out := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(out, out.Bounds(), image.White, image.Point{}, draw.Src)
	himg, err := strip(w, 30, func(r chart.Renderer) {
		r.SetFontSize(11)
		r.Text(title, max((w-r.MeasureText(title).Width())/2, 0), 20)
	})
	if err != nil {
		return err
	}
	draw.Draw(out, image.Rect(0, 0, w, 30), himg, image.Point{}, draw.Src)
	y := 30
	if len(keys) > 0 {
		limg, err := legend(w, keys)
		if err != nil {
			return err
		}
		draw.Draw(out, image.Rect(0, y, w, y+legendHeight), limg, image.Point{}, draw.Src)
		y += legendHeight
	}
	for _, line := range imgs {
		x, rh := 0, 0
		for _, img := range line {
			b := img.Bounds()
			draw.Draw(out, image.Rect(x, y, x+b.Dx(), y+b.Dy()), img, b.Min, draw.Src)
			x, rh = x+b.Dx(), max(rh, b.Dy())
		}
		y += rh
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, out); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// legend draws keys in a row, centred in width w: for each a short line as
// the panels draw it (Line), then its name.
func legend(w int, keys []Key) (image.Image, error) {
	return strip(w, legendHeight, func(r chart.Renderer) {
		r.SetFontSize(10)
		const sample, gap, space = 36, 6, 28 // the line, the space before its name, and between keys
		total := 0
		for _, k := range keys {
			total += sample + gap + r.MeasureText(k.Name).Width() + space
		}
		x, mid := max((w-total+space)/2, 0), legendHeight/2
		for _, k := range keys {
			st := Line(k.Name, nil, nil, k.Color, k.Dashed).Style
			r.SetStrokeColor(k.Color)
			r.SetStrokeWidth(st.StrokeWidth)
			r.SetStrokeDashArray(st.StrokeDashArray)
			r.MoveTo(x, mid)
			r.LineTo(x+sample, mid)
			r.Stroke()
			r.SetFillColor(k.Color)
			r.Circle(st.DotWidth, x+sample/2, mid)
			r.Fill()
			x += sample + gap
			r.Text(k.Name, x, mid+4)
			x += r.MeasureText(k.Name).Width() + space
		}
	})
}

// strip is a white image of w × h on which drawn draws, with the default
// font in black.
func strip(w, h int, drawn func(chart.Renderer)) (image.Image, error) {
	r, err := chart.PNG(w, h)
	if err != nil {
		return nil, fmt.Errorf("chart: %w", err)
	}
	font, err := chart.GetDefaultFont()
	if err != nil {
		return nil, fmt.Errorf("chart: %w", err)
	}
	r.SetFillColor(drawing.ColorWhite)
	r.MoveTo(0, 0)
	r.LineTo(w, 0)
	r.LineTo(w, h)
	r.LineTo(0, h)
	r.Close()
	r.Fill()
	r.SetFont(font)
	r.SetFontColor(drawing.ColorBlack)
	drawn(r)
	var b bytes.Buffer
	if err := r.Save(&b); err != nil {
		return nil, fmt.Errorf("chart: %w", err)
	}
	img, err := png.Decode(&b)
	if err != nil {
		return nil, fmt.Errorf("chart: %w", err)
	}
	return img, nil
}
