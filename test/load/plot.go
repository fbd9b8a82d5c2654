package main

import (
	"fmt"
	"image/color"
	"sort"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// rampPlots writes base-receipt.png (receipt p50/p99 against the new
// message rate) and base-pushlag.png (push lag p50/p99 against peak live
// conversations), three-node botctl steps as lines, the naive bot as
// marks.
func rampPlots(base string, rs []*stepResult) error {
	var bot, naive []*stepResult
	for _, r := range rs {
		switch {
		case r.kind == "naive":
			naive = append(naive, r)
		case r.nodes == 3:
			bot = append(bot, r)
		}
	}
	msOf := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

	// Receipt against rate: steps at the same rate are separate points.
	p := plot.New()
	p.Title.Text = "Receipt latency against new-message rate (3 nodes, default config)"
	p.X.Label.Text = "new messages per second"
	p.Y.Label.Text = "receipt latency (ms)"
	sort.SliceStable(bot, func(i, j int) bool { return bot[i].rate < bot[j].rate })
	if err := addLines(p, bot, func(r *stepResult) float64 { return r.rate }, []string{"botctl p50", "botctl p99"},
		func(r *stepResult) float64 { return msOf(r.receipt.pct(.5)) }, func(r *stepResult) float64 { return msOf(r.receipt.pct(.99)) }); err != nil {
		return err
	}
	if err := addMarks(p, naive, func(r *stepResult) float64 { return r.rate }, "naive bot p99", func(r *stepResult) float64 { return msOf(r.receipt.pct(.99)) }); err != nil {
		return err
	}
	labelPoints(p, bot, func(r *stepResult) float64 { return r.rate }, func(r *stepResult) float64 { return msOf(r.receipt.pct(.99)) },
		func(r *stepResult) string { return fmt.Sprintf("%d conv", r.conversations) })
	logY(p, 0.1)
	target := plotter.NewFunction(func(float64) float64 { return 20 })
	target.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	target.Color = color.RGBA{R: 200, A: 255}
	p.Add(target)
	p.Legend.Add("target p99 20 ms", target)
	p.Y.Max = max(p.Y.Max, 40)
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	if err := p.Save(8*vg.Inch, 5*vg.Inch, base+"-receipt.png"); err != nil {
		return err
	}

	// Push lag against live conversations.
	p = plot.New()
	p.Title.Text = "Push lag against live conversations (3 nodes, default config)"
	p.X.Label.Text = "peak live conversations"
	p.Y.Label.Text = "push lag (s)"
	sort.SliceStable(bot, func(i, j int) bool { return bot[i].peakLive < bot[j].peakLive })
	sec := func(d time.Duration) float64 { return d.Seconds() }
	if err := addLines(p, bot, func(r *stepResult) float64 { return float64(r.peakLive) }, []string{"progress p50", "progress p99", "final p99"},
		func(r *stepResult) float64 { return sec(r.progressLag.pct(.5)) }, func(r *stepResult) float64 { return sec(r.progressLag.pct(.99)) },
		func(r *stepResult) float64 { return sec(r.finalLag.pct(.99)) }); err != nil {
		return err
	}
	labelPoints(p, bot, func(r *stepResult) float64 { return float64(r.peakLive) }, func(r *stepResult) float64 { return sec(r.progressLag.pct(.99)) },
		func(r *stepResult) string { return fmt.Sprintf("%.0f/s, %s", r.rate, r.answer) })
	logY(p, 0.01)
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	target = plotter.NewFunction(func(float64) float64 { return 3 })
	target.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	target.Color = color.RGBA{R: 200, A: 255}
	p.Add(target)
	p.Legend.Add("target p99 3 s", target)
	p.Y.Max = max(p.Y.Max, 6)
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	return p.Save(8*vg.Inch, 5*vg.Inch, base+"-pushlag.png")
}

func addLines(p *plot.Plot, rs []*stepResult, x func(*stepResult) float64, names []string, ys ...func(*stepResult) float64) error {
	for k, y := range ys {
		pts := make(plotter.XYs, len(rs))
		for i, r := range rs {
			pts[i] = plotter.XY{X: x(r), Y: max(y(r), floorY)}
		}
		l, s, err := plotter.NewLinePoints(pts)
		if err != nil {
			return fmt.Errorf("plot %s: %w", names[k], err)
		}
		l.Color, s.Color = plotutil.Color(k), plotutil.Color(k)
		s.Shape = plotutil.Shape(k)
		p.Add(l, s)
		p.Legend.Add(names[k], l, s)
	}
	return nil
}

func addMarks(p *plot.Plot, rs []*stepResult, x func(*stepResult) float64, name string, y func(*stepResult) float64) error {
	if len(rs) == 0 {
		return nil
	}
	pts := make(plotter.XYs, len(rs))
	for i, r := range rs {
		pts[i] = plotter.XY{X: x(r), Y: max(y(r), floorY)}
	}
	s, err := plotter.NewScatter(pts)
	if err != nil {
		return err
	}
	s.Shape = draw.CrossGlyph{}
	s.Radius = vg.Points(5)
	s.Color = color.Black
	p.Add(s)
	p.Legend.Add(name, s)
	return nil
}

// floorY is the least value plotted: the Y axes are logarithmic, and a
// step with nothing measured (0) would have no place on them.
const floorY = 0.01

// logY makes p's Y axis logarithmic from min up.
func logY(p *plot.Plot, min float64) {
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min = min
	if p.Y.Max < 10*min {
		p.Y.Max = 10 * min
	}
}

// labelPoints writes a label beside each step's point.
func labelPoints(p *plot.Plot, rs []*stepResult, x, y func(*stepResult) float64, text func(*stepResult) string) {
	if len(rs) == 0 {
		return
	}
	xy := plotter.XYLabels{}
	for _, r := range rs {
		xy.XYs = append(xy.XYs, plotter.XY{X: x(r), Y: max(y(r), floorY)})
		xy.Labels = append(xy.Labels, text(r))
	}
	l, err := plotter.NewLabels(xy)
	if err != nil {
		return
	}
	for i := range l.TextStyle {
		l.TextStyle[i].XAlign = draw.XLeft
		l.Offset = vg.Point{X: vg.Points(6), Y: vg.Points(2)}
	}
	p.Add(l)
}
