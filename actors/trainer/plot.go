package trainer

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	messages "github.com/frognano/frognano/actors/messages/v1"
)

// PlotCurve draws a run's learning curve as a PNG at path: held-out pass@1
// per hint level (with its 95% interval), the training solve rate and
// effective-group fraction, the loss, and the batches' mix of hint levels,
// each against the step (left) and against the run's CPU seconds (right).
func PlotCurve(run *messages.Run, path string) error {
	c := curve{run.GetCurve()}
	rows := []func(x func(*messages.RunPoint) float64, xl string) (*plot.Plot, error){c.heldOut, c.training, c.loss, c.mix}
	xs := []struct {
		f     func(*messages.RunPoint) float64
		label string
	}{
		{func(p *messages.RunPoint) float64 { return float64(p.GetStep()) }, "step"},
		{func(p *messages.RunPoint) float64 { return p.GetCpuSeconds() }, "CPU seconds"},
	}
	plots := make([][]*plot.Plot, len(rows))
	for i, row := range rows {
		for _, x := range xs {
			p, err := row(x.f, x.label)
			if err != nil {
				return err
			}
			plots[i] = append(plots[i], p)
		}
	}
	plots[0][0].Title.Text = "run " + run.GetId() + ": held-out pass@1 (environments never trained on)"
	img := vgimg.New(vg.Points(1100), vg.Points(1200))
	dc := draw.New(img)
	t := draw.Tiles{Rows: len(rows), Cols: len(xs), PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(plots, t, dc)
	for i := range plots {
		for j := range plots[i] {
			plots[i][j].Draw(canvases[i][j])
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// curve is a run's points, drawn panel by panel.
type curve struct{ points []*messages.RunPoint }

func newPanel(title, xl, yl string) *plot.Plot {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, xl, yl
	p.Legend.Top = true
	return p
}

func (c curve) heldOut(x func(*messages.RunPoint) float64, xl string) (*plot.Plot, error) {
	p := newPanel("", xl, "held-out pass@1")
	p.Y.Min, p.Y.Max = 0, 1
	series := map[int32]plotter.XYs{}
	errs := map[int32]plotter.YErrors{}
	for _, pt := range c.points {
		for _, sc := range pt.GetHeldOut() {
			series[sc.GetHintLevel()] = append(series[sc.GetHintLevel()], plotter.XY{X: x(pt), Y: sc.GetPass1()})
			errs[sc.GetHintLevel()] = append(errs[sc.GetHintLevel()], struct{ Low, High float64 }{sc.GetPass1() - sc.GetPass1Low(), sc.GetPass1High() - sc.GetPass1()})
		}
	}
	levels := make([]int32, 0, len(series))
	for h := range series {
		levels = append(levels, h)
	}
	slices.Sort(levels)
	for i, h := range levels {
		name := "all"
		if h >= 0 {
			name = fmt.Sprintf("hint %d", h)
		}
		l, pts, err := plotter.NewLinePoints(series[h])
		if err != nil {
			return nil, err
		}
		l.Color, pts.Color = plotutil.Color(i), plotutil.Color(i)
		eb := &struct {
			plotter.XYs
			plotter.YErrors
		}{series[h], errs[h]}
		bars, err := plotter.NewYErrorBars(eb)
		if err != nil {
			return nil, err
		}
		bars.Color = plotutil.Color(i)
		p.Add(l, pts, bars)
		p.Legend.Add(name, l, pts)
	}
	return p, nil
}

// metricSeries is one training figure of the step points.
func (c curve) series(x func(*messages.RunPoint) float64, key string) plotter.XYs {
	var xy plotter.XYs
	for _, pt := range c.points {
		if pt.GetPhase() == PhaseStep {
			// A figure a step lacks (a level absent from its batch, no
			// update) is drawn as 0 for mixes and left out otherwise.
			v, ok := pt.GetMetrics()[key]
			if ok || strings.HasPrefix(key, batchHint) {
				xy = append(xy, plotter.XY{X: x(pt), Y: v})
			}
		}
	}
	return xy
}

func (c curve) lines(p *plot.Plot, x func(*messages.RunPoint) float64, keys, names []string) error {
	for i, k := range keys {
		xy := c.series(x, k)
		if len(xy) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(xy)
		if err != nil {
			return err
		}
		l.Color, pts.Color = plotutil.Color(i), plotutil.Color(i)
		p.Add(l, pts)
		p.Legend.Add(names[i], l, pts)
	}
	return nil
}

func (c curve) training(x func(*messages.RunPoint) float64, xl string) (*plot.Plot, error) {
	p := newPanel("", xl, "training")
	p.Y.Min, p.Y.Max = 0, 1
	return p, c.lines(p, x, []string{"solve_rate", "effective_fraction"}, []string{"solve rate", "effective groups"})
}

func (c curve) loss(x func(*messages.RunPoint) float64, xl string) (*plot.Plot, error) {
	p := newPanel("", xl, "GRPO loss, grad norm")
	return p, c.lines(p, x, []string{"loss", "grad_norm"}, []string{"loss", "grad norm"})
}

func (c curve) mix(x func(*messages.RunPoint) float64, xl string) (*plot.Plot, error) {
	p := newPanel("", xl, "batch share by hint level")
	p.Y.Min, p.Y.Max = 0, 1
	seen := map[string]bool{}
	for _, pt := range c.points {
		for k := range pt.GetMetrics() {
			if strings.HasPrefix(k, batchHint) {
				seen[k] = true
			}
		}
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = "hint " + strings.TrimPrefix(k, batchHint)
	}
	return p, c.lines(p, x, keys, names)
}

// batchHint prefixes a step's share of batch tasks at one hint level.
const batchHint = "batch_hint_"
