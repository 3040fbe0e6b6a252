package trainer

import (
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"

	"github.com/frognano/frognano/actors/frontier"
	messages "github.com/frognano/frognano/actors/messages/v1"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// plotRun is a run whose step points carry the Learner's clip fraction
// and the frontier's pool, converted as the trainer converts them.
func plotRun() *records.Run {
	run := &records.Run{Id: "pool"}
	for step := 1; step <= 5; step++ {
		m := map[string]float64{"solve_rate": 0.25, "effective_fraction": 0.5, batchHint + "3": 1}
		LearnerPointMetrics(m, &messages.LearnerStep{Step: int64(step), PolicyTokens: 100, ClipFraction: 0.1 * float64(step),
			MeanAbsLogRatio: 0.01 * float64(step), MaxAbsLogRatio: 0.25 * float64(step)})
		PoolPointMetrics(m, &messages.FrontierStateReply{Pool: []*messages.FrontierBand{
			{Name: frontier.BandTooHard, Tasks: int32(10 - step), HintTasks: map[int32]int32{3: int32(6 - step), 4: 4}},
			{Name: frontier.BandFrontier, Tasks: int32(2 + step), HintTasks: map[int32]int32{3: int32(step), 4: 2}},
			{Name: frontier.BandTooEasy, Tasks: 1, HintTasks: map[int32]int32{4: 1}},
			{Name: frontier.BandRetiredHopeless, Tasks: int32(step / 2), HintTasks: map[int32]int32{3: int32(step / 2)}},
			{Name: frontier.BandRetiredMastered},
		}})
		run.Curve = append(run.Curve, &records.RunPoint{Phase: PhaseStep, Step: int64(step), CpuSeconds: float64(60 * step), Metrics: m})
	}
	return run
}

func rowNames(c curve) []string {
	var names []string
	for _, r := range c.rows() {
		names = append(names, r.name)
	}
	return names
}

// The curve PNG gains a row for the clipped share, one for the sampler's
// mismatch and two for the pool
// (by band; the active pool and its frontier band by hint level) when the
// run's step points record them, and draws their lines.
func TestPlotCurveDrawsClipFractionAndPool(t *testing.T) {
	run := plotRun()
	c := curve{run.GetCurve()}
	if got, want := rowNames(c), []string{"held-out", "training", "loss", "mix", "clipped", "mismatch", "pool", "pool by hint"}; !slices.Equal(got, want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	if got := rowNames(curve{[]*records.RunPoint{{Phase: PhaseStep, Metrics: map[string]float64{"solve_rate": 1}}}}); len(got) != 4 {
		t.Errorf("a run without the figures draws rows %v", got)
	}

	step := func(p *records.RunPoint) float64 { return float64(p.GetStep()) }
	keys, names := c.poolLines()
	if want := []string{"pool_too_hard", "pool_frontier", "pool_too_easy", "pool_retired_hopeless", "pool_retired_mastered"}; !slices.Equal(keys, want) {
		t.Errorf("pool lines %v, want %v", keys, want)
	}
	if names[0] != "too hard" || names[4] != "retired mastered" {
		t.Errorf("pool line names %v", names)
	}
	if got := c.series(step, PointClipFraction); len(got) != 5 || got[4] != (plotter.XY{X: 5, Y: 0.5}) {
		t.Errorf("clip fraction series %v", got)
	}
	if got := c.series(step, PointLogRatioMax); len(got) != 5 || got[3] != (plotter.XY{X: 4, Y: 1}) {
		t.Errorf("largest |log ratio| series %v", got)
	}
	if got := c.poolLevels(); !slices.Equal(got, []int32{3, 4}) {
		t.Errorf("pool hint levels %v", got)
	}
	// Level 3: too hard 6-s, frontier s, too easy 0 → 6 active tasks.
	// Level 4: 4 + 2 + 1 → 7.
	for level, want := range map[int32]float64{3: 6, 4: 7} {
		xy := c.poolActive(step, level)
		if len(xy) != 5 {
			t.Fatalf("level %d: %v", level, xy)
		}
		for _, p := range xy {
			if p.Y != want {
				t.Errorf("level %d active pool %v, want %v at every step", level, xy, want)
				break
			}
		}
	}

	img := drawCurve(t, run)
	empty := drawCurve(t, &records.Run{Id: "empty"})
	if h, h0 := img.Bounds().Dy(), empty.Bounds().Dy(); h*4 != h0*8 {
		t.Fatalf("the figure is %d pixels high, the one of four rows %d: want eight rows", h, h0)
	}
	// Each new row's left panel (against the step) shows its first line
	// in the first color: the clip fraction, the mean mismatch, the
	// too-hard band, hint 3.
	first := plotutil.Color(0)
	rowH := img.Bounds().Dy() / 8
	for i, name := range []string{"clipped", "mismatch", "pool", "pool by hint"} {
		area := image.Rect(0, (4+i)*rowH, img.Bounds().Dx()/2, (5+i)*rowH)
		if n := countColor(img, area, first); n < 100 {
			t.Errorf("row %q: %d pixels of its first line's color, want a line", name, n)
		}
	}
}

func drawCurve(t *testing.T, run *records.Run) image.Image {
	t.Helper()
	path := filepath.Join(t.TempDir(), "curve.png")
	if err := PlotCurve(run, path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// countColor counts the pixels of area within a few levels of c in each
// channel (lines are anti-aliased).
func countColor(img image.Image, area image.Rectangle, c color.Color) int {
	near := func(a, b uint32) bool { d := int(a>>8) - int(b>>8); return d >= -24 && d <= 24 }
	r0, g0, b0, _ := c.RGBA()
	n := 0
	for y := area.Min.Y; y < area.Max.Y; y++ {
		for x := area.Min.X; x < area.Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			if near(r, r0) && near(g, g0) && near(b, b0) {
				n++
			}
		}
	}
	return n
}
