package trainer

// Comparing two arms of the learning benchmark: two runs with the same
// seed, budget and held-out settings that differ in how they pick their
// tasks (the frontier and the uniform sampler). Both measure the same
// held-out tasks with the same episode seeds (EvalSeed), so their end
// points are compared task by task (a paired bootstrap over tasks), and
// the cost at which the first arm reaches the second's final pass@1 is
// read off its curve in training rollouts.

import (
	"fmt"
	"io"
	"sort"

	"github.com/frognano/frognano/actors/rollout"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// Comparison is what Compare finds.
type Comparison struct {
	// Diff is arm A's end pass@1 minus arm B's, paired over the held-out
	// tasks both measured, with a 95% bootstrap interval.
	Diff rollout.Estimate
	// Target is B's final all-level pass@1; Reached says whether an
	// evaluation point of A reached it, at ReachRollouts training episodes
	// (the first such point), against BRollouts, B's episodes at its end.
	Target                   float64
	Reached                  bool
	ReachRollouts, BRollouts float64
	// Vacuous: B ended no better than A started, so reaching it says
	// nothing about A.
	Vacuous bool
}

// evalPoints is a run's points with held-out scores, in order.
func evalPoints(run *records.Run) []*records.RunPoint {
	var ps []*records.RunPoint
	for _, p := range run.GetCurve() {
		if len(p.GetHeldOut()) > 0 {
			ps = append(ps, p)
		}
	}
	return ps
}

// allPass1 is a point's pass@1 over all its tasks.
func allPass1(p *records.RunPoint) float64 {
	if len(p.GetTaskPass1()) == 0 {
		return 0
	}
	s := 0.0
	for _, v := range p.GetTaskPass1() {
		s += v
	}
	return s / float64(len(p.GetTaskPass1()))
}

// Compare compares arm a with arm b; ok is false unless both have two
// evaluation points on common tasks.
func Compare(a, b *records.Run, seed uint64) (c Comparison, ok bool) {
	pa, pb := evalPoints(a), evalPoints(b)
	if len(pa) < 2 || len(pb) < 2 {
		return c, false
	}
	ea, eb := pa[len(pa)-1], pb[len(pb)-1]
	var diffs []float64
	for id, x := range ea.GetTaskPass1() {
		if y, ok := eb.GetTaskPass1()[id]; ok {
			diffs = append(diffs, x-y)
		}
	}
	if len(diffs) == 0 {
		return c, false
	}
	sort.Float64s(diffs)
	c.Diff = rollout.Bootstrap(diffs, 2000, seed)
	c.Target = allPass1(eb)
	c.BRollouts = eb.GetMetrics()[PointRollouts]
	c.Vacuous = c.Target <= allPass1(pa[0])
	for _, p := range pa {
		if allPass1(p) >= c.Target {
			c.Reached, c.ReachRollouts = true, p.GetMetrics()[PointRollouts]
			break
		}
	}
	return c, true
}

// WriteComparison prints both arms' evaluation points (pass@1 against
// training rollouts and seconds) and Compare's findings.
func WriteComparison(w io.Writer, a, b *records.Run) error {
	for _, r := range []*records.Run{a, b} {
		s, _ := DecodeSettings(r)
		fmt.Fprintf(w, "arm %s (sampler %s, budget %.0fs):\n", r.GetId(), orDefault(s.Sampler, SamplerFrontier), s.BudgetSeconds)
		for _, p := range evalPoints(r) {
			fmt.Fprintf(w, "  %-10s step %3d  v%-3d  %6.0f train s  %5.0f rollouts  %s\n", p.GetPhase(), p.GetStep(), p.GetPolicyVersion(),
				p.GetMetrics()[PointTrainSeconds], p.GetMetrics()[PointRollouts], FormatScores(p.GetHeldOut()))
		}
		if g, _, _, ok := Gain(r, -1, EvalSeed); ok {
			fmt.Fprintf(w, "  end − start, paired over %d tasks: %+.3f [%+.3f, %+.3f]\n", g.Tasks, g.Mean, g.Low, g.High)
		}
	}
	c, ok := Compare(a, b, EvalSeed)
	if !ok {
		_, err := fmt.Fprintln(w, "no comparison: each arm needs two evaluation points on common held-out tasks")
		return err
	}
	fmt.Fprintf(w, "end pass@1, %s − %s, paired over %d tasks: %+.3f [%+.3f, %+.3f]\n", a.GetId(), b.GetId(), c.Diff.Tasks, c.Diff.Mean, c.Diff.Low, c.Diff.High)
	switch {
	case c.Vacuous:
		fmt.Fprintf(w, "%s ended at pass@1 %.3f, no better than %s's start: reaching it says nothing\n", b.GetId(), c.Target, a.GetId())
	case !c.Reached:
		fmt.Fprintf(w, "%s never reached %s's final pass@1 %.3f (%s: %.0f rollouts)\n", a.GetId(), b.GetId(), c.Target, b.GetId(), c.BRollouts)
	default:
		ratio := 0.0
		if c.BRollouts > 0 {
			ratio = c.ReachRollouts / c.BRollouts
		}
		fmt.Fprintf(w, "%s reached %s's final pass@1 %.3f at %.0f rollouts, %.2f× the %.0f %s used\n", a.GetId(), b.GetId(), c.Target, c.ReachRollouts, ratio, c.BRollouts, b.GetId())
	}
	return nil
}
