package trainer

import (
	"fmt"
	"maps"
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

	"github.com/frognano/frognano/actors/frontier"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// PlotCurve draws a run's learning curve as a PNG at path: held-out pass@1
// per hint level (with its 95% interval), the training solve rate and
// effective-group fraction, the loss, the batches' mix of hint levels and,
// where the run's step points record them, the share of policy tokens the
// trust region clipped or masked, the FrontierEstimator's pool by band and
// the active pool and its frontier band by hint level; each against the
// step (left) and against the run's CPU seconds (right).
func PlotCurve(run *records.Run, path string) error {
	c := curve{run.GetCurve()}
	var rows []panelFunc
	for _, r := range c.rows() {
		rows = append(rows, r.draw)
	}
	xs := []struct {
		f     func(*records.RunPoint) float64
		label string
	}{
		{func(p *records.RunPoint) float64 { return float64(p.GetStep()) }, "step"},
		{func(p *records.RunPoint) float64 { return p.GetCpuSeconds() }, "CPU seconds"},
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
	img := vgimg.New(vg.Points(1100), vg.Points(rowHeight*float64(len(rows))))
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
type curve struct{ points []*records.RunPoint }

// rowHeight is the height of one row of panels, in points.
const rowHeight = 300

// panelFunc draws one panel of the curve against x.
type panelFunc func(x func(*records.RunPoint) float64, xl string) (*plot.Plot, error)

// row is one row of the figure.
type row struct {
	name string
	draw panelFunc
}

// rows are the figure's rows: the four every run has, then those for the
// figures its step points record (a run recorded before they existed
// draws none of them).
func (c curve) rows() []row {
	rows := []row{{"held-out", c.heldOut}, {"training", c.training}, {"loss", c.loss}, {"mix", c.mix}}
	if c.has(func(k string) bool { return k == PointClipFraction }) {
		rows = append(rows, row{"clipped", c.clipped})
	}
	if c.has(func(k string) bool { return k == PointLogRatioMean }) {
		rows = append(rows, row{"mismatch", c.mismatch})
	}
	if keys, _ := c.poolLines(); len(keys) > 0 {
		rows = append(rows, row{"pool", c.pool})
	}
	if len(c.poolLevels()) > 0 {
		rows = append(rows, row{"pool by hint", c.poolHints})
	}
	return rows
}

// has reports whether any step point has a metric whose key matches.
func (c curve) has(match func(string) bool) bool {
	for _, pt := range c.points {
		if pt.GetPhase() != PhaseStep {
			continue
		}
		for k := range pt.GetMetrics() {
			if match(k) {
				return true
			}
		}
	}
	return false
}

func newPanel(title, xl, yl string) *plot.Plot {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, xl, yl
	p.Legend.Top = true
	return p
}

func (c curve) heldOut(x func(*records.RunPoint) float64, xl string) (*plot.Plot, error) {
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
func (c curve) series(x func(*records.RunPoint) float64, key string) plotter.XYs {
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

func (c curve) lines(p *plot.Plot, x func(*records.RunPoint) float64, keys, names []string) error {
	for i, k := range keys {
		if _, err := c.line(p, x, k, names[i], i, nil); err != nil {
			return err
		}
	}
	return nil
}

// line draws the series of key in the i-th color (dashed: dashes, nil for
// a solid line); false when no step point has it.
func (c curve) line(p *plot.Plot, x func(*records.RunPoint) float64, key, name string, i int, dashes []vg.Length) (bool, error) {
	xy := c.series(x, key)
	if len(xy) == 0 {
		return false, nil
	}
	l, pts, err := plotter.NewLinePoints(xy)
	if err != nil {
		return false, err
	}
	l.Color, pts.Color = plotutil.Color(i), plotutil.Color(i)
	l.Dashes = dashes
	p.Add(l, pts)
	p.Legend.Add(name, l, pts)
	return true, nil
}

func (c curve) training(x func(*records.RunPoint) float64, xl string) (*plot.Plot, error) {
	p := newPanel("", xl, "training")
	p.Y.Min, p.Y.Max = 0, 1
	return p, c.lines(p, x, []string{"solve_rate", "effective_fraction"}, []string{"solve rate", "effective groups"})
}

func (c curve) loss(x func(*records.RunPoint) float64, xl string) (*plot.Plot, error) {
	p := newPanel("", xl, "GRPO loss, grad norm")
	return p, c.lines(p, x, []string{"loss", "grad_norm"}, []string{"loss", "grad norm"})
}

func (c curve) mix(x func(*records.RunPoint) float64, xl string) (*plot.Plot, error) {
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

// clipped draws the share of each step's policy tokens the GRPO trust
// region clipped or masked (PointClipFraction).
func (c curve) clipped(x func(*records.RunPoint) float64, xl string) (*plot.Plot, error) {
	p := newPanel("", xl, "tokens clipped or masked")
	p.Y.Min, p.Y.Max = 0, 1
	return p, c.lines(p, x, []string{PointClipFraction}, []string{"share of policy tokens"})
}

// mismatch draws the mean and largest |log-prob of the policy − the
// Sampler's| over each step's policy tokens (PointLogRatioMean, Max).
func (c curve) mismatch(x func(*records.RunPoint) float64, xl string) (*plot.Plot, error) {
	p := newPanel("", xl, "|Δ log-prob|, nats")
	p.Y.Min = 0
	return p, c.lines(p, x, []string{PointLogRatioMean, PointLogRatioMax}, []string{"mean over policy tokens", "largest token"})
}

// poolBands are the FrontierEstimator's bands in the order the pool
// panel draws them.
var poolBands = append(slices.Clone(ActiveBands), frontier.BandRetiredHopeless, frontier.BandRetiredMastered)

// poolLines are the keys and names of the pool panel's lines: every band
// some step point records.
func (c curve) poolLines() (keys, names []string) {
	for _, band := range poolBands {
		k := PoolKey(band)
		if c.has(func(m string) bool { return m == k }) {
			keys = append(keys, k)
			names = append(names, strings.ReplaceAll(band, "_", " "))
		}
	}
	return keys, names
}

// pool draws the pool's task count in each band after each step.
func (c curve) pool(x func(*records.RunPoint) float64, xl string) (*plot.Plot, error) {
	p := newPanel("", xl, "pool by band (tasks)")
	p.Y.Min = 0
	keys, names := c.poolLines()
	return p, c.lines(p, x, keys, names)
}

// poolLevels are the hint levels of the pool_hint_<N>_<band> figures some
// step point records, in order.
func (c curve) poolLevels() []int32 {
	seen := map[int32]bool{}
	c.has(func(k string) bool {
		if level, _, ok := ParsePoolHintKey(k); ok {
			seen[level] = true
		}
		return false
	})
	return slices.Sorted(maps.Keys(seen))
}

// poolActive is the series of the active pool's tasks at one hint level:
// the sum of its active bands, at each step point that records any.
func (c curve) poolActive(x func(*records.RunPoint) float64, level int32) plotter.XYs {
	var xy plotter.XYs
	for _, pt := range c.points {
		if pt.GetPhase() != PhaseStep {
			continue
		}
		sum, found := 0.0, false
		for _, band := range ActiveBands {
			if v, ok := pt.GetMetrics()[PoolHintKey(level, band)]; ok {
				sum, found = sum+v, true
			}
		}
		if found {
			xy = append(xy, plotter.XY{X: x(pt), Y: sum})
		}
	}
	return xy
}

// poolHints draws, per hint level, the active pool (solid) and its
// frontier band (dashed) after each step.
func (c curve) poolHints(x func(*records.RunPoint) float64, xl string) (*plot.Plot, error) {
	p := newPanel("", xl, "active pool (solid), frontier (dashed) by hint")
	p.Y.Min = 0
	for i, level := range c.poolLevels() {
		l, pts, err := plotter.NewLinePoints(c.poolActive(x, level))
		if err != nil {
			return nil, err
		}
		l.Color, pts.Color = plotutil.Color(i), plotutil.Color(i)
		p.Add(l, pts)
		p.Legend.Add(fmt.Sprintf("hint %d", level), l, pts)
		if _, err := c.line(p, x, PoolHintKey(level, frontier.BandFrontier), fmt.Sprintf("hint %d frontier", level), i, []vg.Length{vg.Points(4), vg.Points(3)}); err != nil {
			return nil, err
		}
	}
	return p, nil
}
