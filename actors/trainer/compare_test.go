package trainer

import (
	"bytes"
	"strings"
	"testing"

	records "github.com/frognano/frognano/persistence/records/v1"
)

// evalPoint is a curve point with held-out scores on tasks t0..tn-1 whose
// pass@1 are given, at the given rollouts.
func evalPoint(phase string, rollouts float64, pass ...float64) *records.RunPoint {
	p := &records.RunPoint{Phase: phase, Metrics: map[string]float64{PointRollouts: rollouts}, TaskPass1: map[string]float64{}, TaskHint: map[string]int32{}}
	sum := 0.0
	for i, v := range pass {
		id := string(rune('a' + i))
		p.TaskPass1[id], p.TaskHint[id] = v, 4
		sum += v
	}
	p.HeldOut = []*records.HeldOutScore{{HintLevel: -1, Tasks: int32(len(pass)), Pass1: sum / float64(len(pass))}}
	return p
}

func TestCompare(t *testing.T) {
	front := &records.Run{Id: "front", Curve: []*records.RunPoint{
		evalPoint(PhaseStart, 0, 0, 0, 0, 0),
		{Phase: PhaseStep, Step: 1}, // no held-out scores: not an evaluation point
		evalPoint(PhaseStep, 40, 0.5, 0, 0, 0),
		evalPoint(PhaseEnd, 80, 1, 0.5, 0.5, 0),
	}}
	uni := &records.Run{Id: "uni", Curve: []*records.RunPoint{
		evalPoint(PhaseStart, 0, 0, 0, 0, 0),
		evalPoint(PhaseEnd, 100, 0.5, 0, 0, 0),
	}}
	c, ok := Compare(front, uni, EvalSeed)
	if !ok {
		t.Fatal("no comparison of two arms with two evaluation points each")
	}
	if c.Diff.Tasks != 4 || c.Diff.Mean != 0.375 {
		t.Fatalf("paired end difference %+v, want mean 0.375 over 4 tasks", c.Diff)
	}
	if !c.Reached || c.ReachRollouts != 40 || c.BRollouts != 100 || c.Target != 0.125 || c.Vacuous {
		t.Fatalf("comparison %+v: want the frontier arm reaching 0.125 at 40 of the uniform arm's 100 rollouts", c)
	}
	// The other way round: uniform never reaches the frontier arm's 0.5.
	c, _ = Compare(uni, front, EvalSeed)
	if c.Reached {
		t.Fatalf("uniform arm counted as reaching pass@1 %.3f it never had", c.Target)
	}
	// An arm that ended where the other started makes the goal vacuous.
	flat := &records.Run{Id: "flat", Curve: []*records.RunPoint{evalPoint(PhaseStart, 0, 0, 0), evalPoint(PhaseEnd, 50, 0, 0)}}
	if c, _ := Compare(front, flat, EvalSeed); !c.Vacuous {
		t.Fatal("reaching an arm that never left 0 not flagged as vacuous")
	}
	if _, ok := Compare(front, &records.Run{Curve: []*records.RunPoint{evalPoint(PhaseStart, 0, 0)}}, EvalSeed); ok {
		t.Fatal("a comparison with an arm of one evaluation point")
	}
	var b bytes.Buffer
	if err := WriteComparison(&b, front, uni); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"arm front", "arm uni", "+0.375", "reached uni's final pass@1 0.125 at 40 rollouts, 0.40×"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("comparison output lacks %q:\n%s", want, b.String())
		}
	}
}
