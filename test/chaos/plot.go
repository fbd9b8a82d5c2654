package main

import (
	"image/color"
	"math"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// takeoverPlot writes the distribution of takeover times per scenario to
// path (PNG): every takeover of every round a point (fault → the
// simulator's next subscribe of the bot), the median a bar, on a log
// scale (a graceful handover takes milliseconds, a deposition seconds).
// No takeover in the run: no file.
func takeoverPlot(path string, rounds []*RoundResult) error {
	var order []string
	ms := map[string][]float64{}
	for _, r := range rounds {
		for _, t := range r.Takeovers {
			if t.Err != "" {
				continue
			}
			if _, ok := ms[r.Scenario]; !ok {
				order = append(order, r.Scenario)
			}
			ms[r.Scenario] = append(ms[r.Scenario], max(float64(t.D.Microseconds())/1000, 1))
		}
	}
	if len(order) == 0 {
		return nil
	}
	p := plot.New()
	p.Title.Text = "Takeover time per chaos scenario (fault → next subscribe of the bot)"
	p.Y.Label.Text = "takeover (ms, log scale)"
	for i, s := range order {
		vals := ms[s]
		pts := make(plotter.XYs, len(vals))
		for j, v := range vals {
			// Spread the points of one scenario a little, so that equal
			// times stay visible.
			pts[j] = plotter.XY{X: float64(i) + 0.25*(float64(j%5)-2)/2, Y: v}
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return err
		}
		sc.GlyphStyle.Radius = vg.Points(2.5)
		sc.GlyphStyle.Shape = draw.CircleGlyph{}
		sc.GlyphStyle.Color = color.RGBA{B: 180, A: 200}
		p.Add(sc)
		sort.Float64s(vals)
		med := vals[len(vals)/2] // the upper median of an even count
		bar, err := plotter.NewLine(plotter.XYs{{X: float64(i) - 0.35, Y: med}, {X: float64(i) + 0.35, Y: med}})
		if err != nil {
			return err
		}
		bar.Color, bar.Width = color.RGBA{R: 200, A: 255}, vg.Points(2)
		p.Add(bar)
		if i == 0 {
			p.Legend.Add("one takeover", sc)
			p.Legend.Add("median", bar)
		}
	}
	p.NominalX(order...)
	p.X.Tick.Label.Rotation = math.Pi / 6
	p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XRight, draw.YCenter
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Max *= 3 // room for the legend above the points
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p.Save(10*vg.Inch, 6*vg.Inch, path)
}
