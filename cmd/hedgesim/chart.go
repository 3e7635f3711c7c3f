package hedgesim

import (
	"fmt"
	"math"
	"os"
	"time"

	chart "github.com/wcharczuk/go-chart/v2"
	"github.com/wcharczuk/go-chart/v2/drawing"
)

var palette = []drawing.Color{
	{R: 120, G: 120, B: 120, A: 255}, // grey: no hedging
	{R: 214, G: 39, B: 40, A: 255},   // red
	{R: 255, G: 127, B: 14, A: 255},  // orange
	{R: 44, G: 160, B: 44, A: 255},   // green
	{R: 31, G: 119, B: 180, A: 255},  // blue
	{R: 148, G: 103, B: 189, A: 255}, // purple
	{R: 23, G: 190, B: 207, A: 255},  // cyan
}

// WriteChart writes to path a PNG of the latency tail of results: the share
// of calls slower than each latency (1 − CDF), both axes on a log scale, so
// that p99 and p99.9 read off the 10⁻² and 10⁻³ lines. (go-chart's
// logarithmic range does not take values below 1: the axes hold the
// logarithms, with ticks labelled in the values.)
func WriteChart(path, title string, results []Result) error {
	var series []chart.Series
	maxLat := 0.0
	for i, r := range results {
		// A step down at each latency, from the share of calls slower than
		// the one before it to the share slower than it; 0 draws to the floor.
		var x, y []float64
		n := float64(len(r.Latencies))
		prev := 0.0 // log10 of the share slower than the latencies so far
		for j := 0; j < len(r.Latencies); j++ {
			if j+1 < len(r.Latencies) && r.Latencies[j+1] == r.Latencies[j] {
				continue // the last call of each run of equal latencies
			}
			share := math.Max(math.Log10((n-float64(j+1))/n), chartFloor)
			lx := math.Log10(ms64(r.Latencies[j]))
			x, y = append(x, lx, lx), append(y, prev, share)
			prev = share
		}
		maxLat = math.Max(maxLat, ms64(r.Latencies[len(r.Latencies)-1]))
		series = append(series, chart.ContinuousSeries{
			Name: r.Strategy, XValues: x, YValues: y,
			Style: chart.Style{StrokeColor: palette[i%len(palette)], StrokeWidth: 2},
		})
	}
	var yTicks []chart.Tick
	for e := 0; e <= 5; e++ {
		v := math.Pow(10, -float64(e))
		yTicks = append(yTicks, chart.Tick{Value: math.Log10(v), Label: fmt.Sprintf("1e-%d", e)})
	}
	var xTicks []chart.Tick
	for _, v := range []float64{5, 10, 20, 50, 100, 200, 500, 1000, 2000} {
		if v <= maxLat*1.5 {
			xTicks = append(xTicks, chart.Tick{Value: math.Log10(v), Label: fmt.Sprintf("%g", v)})
		}
	}
	c := chart.Chart{
		Title:      title,
		TitleStyle: chart.Style{FontSize: 11, Padding: chart.Box{Top: 6}},
		Width:      1100,
		Height:     500,
		Background: chart.Style{Padding: chart.Box{Top: 40, Left: 190, Right: 20, Bottom: 10}},
		XAxis: chart.XAxis{
			Name:  "latency (ms, log scale)",
			Range: &chart.ContinuousRange{Min: math.Log10(5), Max: math.Log10(maxLat * 1.5)},
			Ticks: xTicks,
		},
		YAxis: chart.YAxis{
			Range: &chart.ContinuousRange{Min: chartFloor, Max: 0},
			Ticks: yTicks,
		},
		YAxisSecondary: chart.YAxis{Style: chart.Hidden()},
		Series:         series,
	}
	c.Elements = []chart.Renderable{chart.LegendLeft(&c, chart.Style{FontSize: 9})}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := c.Render(chart.PNG, f); err != nil {
		f.Close()
		return fmt.Errorf("chart: %w", err)
	}
	return f.Close()
}

// chartFloor is the bottom of the chart: log10 of the least share shown.
const chartFloor = -5

func ms64(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
