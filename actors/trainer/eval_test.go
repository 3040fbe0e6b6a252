package trainer

import (
	"context"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
)

func heldOutTask(id string, hint int32) *records.Task {
	return &records.Task{Id: id, Difficulty: &records.DifficultyFeatures{HintLevel: hint}}
}

// The subset is a seeded draw at the asked hint levels, the same at every
// call (every evaluation point, every resume, every run).
func TestHeldOutSubset(t *testing.T) {
	var all []*records.Task
	for i := range 30 {
		all = append(all, heldOutTask(fmt.Sprintf("t%02d", i), int32(i%5)))
	}
	s := Settings{Seed: 7, EvalTasks: 5, EvalHints: []int{3, 4}}
	a, b := heldOutSubset(all, s), heldOutSubset(append([]*records.Task(nil), all[15:]...), s)
	if len(a) != 5 {
		t.Fatalf("%d tasks, want 5", len(a))
	}
	for _, x := range a {
		if h := x.GetDifficulty().GetHintLevel(); h != 3 && h != 4 {
			t.Fatalf("task %s at hint %d", x.GetId(), h)
		}
	}
	if fmt.Sprint(ids(a)) != fmt.Sprint(ids(heldOutSubset(all, s))) {
		t.Fatal("two draws of one run differ")
	}
	if fmt.Sprint(ids(a)) == fmt.Sprint(ids(b)) {
		t.Fatal("the draw does not depend on the set")
	}
	s.Seed = 8
	if fmt.Sprint(ids(a)) != fmt.Sprint(ids(heldOutSubset(all, s))) {
		t.Fatal("the draw depends on the run's seed: two arms would be measured on different tasks")
	}
}

func ids(ts []*records.Task) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.GetId())
	}
	return out
}

// The gain pairs tasks between the first and last evaluation points; a
// task missing from either is left out.
func TestGainAndCurve(t *testing.T) {
	run := &records.Run{Id: "r", Curve: []*records.RunPoint{
		{Phase: PhaseStart, HeldOut: []*records.HeldOutScore{{HintLevel: -1, Tasks: 3, Pass1: 0.25}},
			TaskPass1: map[string]float64{"a": 0, "b": 0.5, "c": 0.25}, TaskHint: map[string]int32{"a": 4, "b": 3, "c": 4}},
		{Phase: PhaseStep, Step: 1, Metrics: map[string]float64{"solve_rate": 0.5}},
		{Phase: PhaseStep, Step: 2, Metrics: map[string]float64{"solve_rate": 0.25}},
		{Phase: PhaseEnd, Step: 2, PolicyVersion: 2, HeldOut: []*records.HeldOutScore{{HintLevel: 4, Tasks: 2, Pass1: 0.75}},
			TaskPass1: map[string]float64{"a": 1, "b": 0.5, "d": 1}, TaskHint: map[string]int32{"a": 4, "b": 3, "d": 4}},
	}}
	g, from, to, ok := Gain(run, -1, 1)
	if !ok || from.GetPhase() != PhaseStart || to.GetPhase() != PhaseEnd || g.Tasks != 2 || g.Mean != 0.5 || g.Low > g.Mean || g.High < g.Mean {
		t.Fatalf("gain %+v from %s to %s (%v)", g, from.GetPhase(), to.GetPhase(), ok)
	}
	var b strings.Builder
	if err := WriteCurve(&b, run); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"start", "end", "0.375 (2 steps)", "hint 4 pass@1 0.750", "all +0.500", "hint 3 +0.000", "hint 4 +1.000 [+1.000, +1.000] (1)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the curve lacks %q:\n%s", want, b.String())
		}
	}
	if _, _, _, ok := Gain(&records.Run{Curve: run.Curve[:1]}, -1, 1); ok {
		t.Error("a gain from one point")
	}
	if !hasPoint(run, PhaseEnd, 2) || hasPoint(run, PhaseStep, 1) || hasPoint(run, PhaseEnd, 3) {
		t.Error("hasPoint")
	}
}

// The plot is a PNG of the curve's panels; an empty curve draws too.
func TestPlotCurve(t *testing.T) {
	run := &records.Run{Id: "r"}
	for step := range 6 {
		p := &records.RunPoint{Phase: PhaseStep, Step: int64(step), CpuSeconds: float64(100 * step),
			Metrics: map[string]float64{"solve_rate": float64(step) / 10, "effective_fraction": 0.5, "loss": 0.1, batchHint + "4": 1}}
		if step%2 == 0 {
			p.Phase = PhaseStart
			p.HeldOut = []*records.HeldOutScore{{HintLevel: 4, Pass1: float64(step) / 10, Pass1Low: 0, Pass1High: 0.8}, {HintLevel: -1, Pass1: 0.1, Pass1Low: 0, Pass1High: 0.3}}
		}
		run.Curve = append(run.Curve, p)
	}
	for _, r := range []*records.Run{run, {Id: "empty"}} {
		path := filepath.Join(t.TempDir(), "runs", r.GetId(), "curve.png")
		if err := PlotCurve(r, path); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < 1000 {
			t.Fatalf("a %v image", b)
		}
	}
}

// TestStartFrom: a run takes another run's start episodes only when both
// measure the same policy on the same selection; the ids it reads back are
// every start attempt of that run.
func TestStartFrom(t *testing.T) {
	ctx := context.Background()
	store := persistence.NewMemory().Runs()
	tr := &Trainer{runs: &Runs{Store: store}}
	s := Settings{Model: "qwen2.5-coder-0.5b", Mode: "patch", EvalTasks: 20, EvalK: 8, EvalHints: []int{4}, Sampler: SamplerFrontier, LR: 1e-5}
	src := s
	src.Sampler, src.LR, src.EvalK, src.Seed = SamplerUniform, 3e-5, 4, 9 // what does not change a start episode may differ
	if err := store.Put(ctx, &records.Run{Id: "arm-a", ConfigYaml: src.Encode(), Metrics: map[string]float64{MetricEvalAttempts: 2}}); err != nil {
		t.Fatal(err)
	}
	me := &records.Run{Id: "arm-b"}
	s.StartFrom = "arm-a"
	ids, err := tr.startFrom(ctx, me, s)
	if err != nil || strings.Join(ids, " ") != "arm-a/eval/start-0.1 arm-a/eval/start-0.2" {
		t.Fatalf("startFrom = %q, %v", ids, err)
	}
	for name, change := range map[string]func(*Settings){
		"model":      func(s *Settings) { s.Model = "smollm2-135m" },
		"mode":       func(s *Settings) { s.Mode = "agent" },
		"hints":      func(s *Settings) { s.EvalHints = []int{3, 4} },
		"tasks":      func(s *Settings) { s.EvalTasks = 12 },
		"turn limit": func(s *Settings) { s.MaxTurnTokens = 64 },
	} {
		other := s
		change(&other)
		if _, err := tr.startFrom(ctx, me, other); err == nil || !strings.Contains(err.Error(), "start_from") {
			t.Errorf("%s differs: startFrom = %v, want an error", name, err)
		}
	}
	// A chain: arm-c read its start point back from arm-a, and stored none
	// of it; a run from arm-c reads both.
	chained := src
	chained.StartFrom = "arm-a"
	if err := store.Put(ctx, &records.Run{Id: "arm-c", ConfigYaml: chained.Encode(), Metrics: map[string]float64{MetricEvalAttempts: 1}}); err != nil {
		t.Fatal(err)
	}
	s.StartFrom = "arm-c"
	if ids, err := tr.startFrom(ctx, me, s); err != nil || strings.Join(ids, " ") != "arm-c/eval/start-0.1 arm-a/eval/start-0.1 arm-a/eval/start-0.2" {
		t.Fatalf("startFrom through a chain = %q, %v", ids, err)
	}
	// A cycle is refused, not followed forever.
	loop := src
	loop.StartFrom = "arm-e"
	if err := store.Put(ctx, &records.Run{Id: "arm-d", ConfigYaml: loop.Encode()}); err != nil {
		t.Fatal(err)
	}
	loop.StartFrom = "arm-d"
	if err := store.Put(ctx, &records.Run{Id: "arm-e", ConfigYaml: loop.Encode()}); err != nil {
		t.Fatal(err)
	}
	s.StartFrom = "arm-d"
	if _, err := tr.startFrom(ctx, me, s); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("a cycle of start points: %v", err)
	}
	if err := (Settings{Mode: "patch", TasksPerStep: 1, Group: 2, LR: 1e-5, StartFrom: "arm-a"}).Validate(); err == nil || !strings.Contains(err.Error(), "evaluates nothing") {
		t.Errorf("--start-from without evaluation: %v", err)
	}
	// The weights the source's evaluation attempts were played on: an
	// attempt on q8_0 cannot stand for a node that serves f32, and a run
	// recorded before the weights were kept passes.
	s.StartFrom = "arm-a"
	tr.weights = "f32"
	if _, err := tr.startFrom(ctx, me, s); err != nil {
		t.Errorf("a start point without recorded weights: %v", err)
	}
	if err := store.Put(ctx, &records.Run{Id: "arm-a", ConfigYaml: src.Encode(),
		Metrics: map[string]float64{MetricEvalAttempts: 2, MetricEvalWeights + "f32": 1, MetricEvalWeights + "q8_0": 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.startFrom(ctx, me, s); err == nil || !strings.Contains(err.Error(), "q8_0 weights") {
		t.Errorf("a start point played partly on q8_0 for an f32 sampler: %v", err)
	}
	if err := store.Put(ctx, &records.Run{Id: "arm-a", ConfigYaml: src.Encode(),
		Metrics: map[string]float64{MetricEvalAttempts: 2, MetricEvalWeights + "q8_0": 1}}); err != nil {
		t.Fatal(err)
	}
	tr.weights = "q8_0"
	if _, err := tr.startFrom(ctx, me, s); err != nil {
		t.Errorf("a start point played on the same weights: %v", err)
	}
	s.StartFrom = "no-such-run"
	if _, err := tr.startFrom(ctx, me, s); err == nil || !strings.Contains(err.Error(), "no-such-run") {
		t.Errorf("a missing run: %v", err)
	}
	s.StartFrom = "arm-b"
	if _, err := tr.startFrom(ctx, me, s); err == nil || !strings.Contains(err.Error(), "itself") {
		t.Errorf("a run from itself: %v", err)
	}
}
