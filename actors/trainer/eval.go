package trainer

// Evaluation points: the run's policy on a fixed, seeded subset of the
// held-out set (tasks from environments the run never trains on) at the
// start, after the warm start, every Settings.EvalEvery steps and at the
// end. Held-out episodes are stored as trajectories of run RUN/eval; their
// outcomes never reach the frontier and are never trained on. Every point
// of the curve, evaluated or not, is kept in the run record (Run.curve),
// so the curve survives the process and a resumed run does not evaluate a
// point twice.

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/frognano/frognano/actors/harness"
	"github.com/frognano/frognano/actors/learner"
	"github.com/frognano/frognano/actors/rollout"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// Keys of a curve point's metrics that say what the run had spent at
// that point.
const (
	PointRollouts     = "rollouts"      // training episodes played so far
	PointTrainSeconds = "train_seconds" // TrainSeconds at the point
)

// EvalRunID prefixes the run ids of a run's held-out episodes.
func EvalRunID(runID string) string { return runID + "/eval" }

// evalAttemptRunID is the run id attempt n at the point (phase, step) of
// run runID stores its held-out episodes under.
func evalAttemptRunID(runID, phase string, step int64, n int) string {
	return fmt.Sprintf("%s/%s-%d.%d", EvalRunID(runID), phase, step, n)
}

// Phases of curve points.
const (
	PhaseStart     = "start"
	PhaseWarmStart = "warm_start"
	PhaseStep      = "step"
	PhaseEnd       = "end"
)

// EvalSeed seeds the held-out subset, its episodes and its intervals: a
// constant, not the run's seed, so that every run (the frontier and the
// uniform arm of a comparison, runs of other seeds) is measured on the same
// tasks and episode seeds.
const EvalSeed = 0x5eed_e7a1

// heldOutSubset is the run's evaluation tasks: those of cfg.HeldOut at
// the settings' hint levels, a draw of s.EvalTasks seeded by EvalSeed, the
// same at every point of every run with these settings.
func heldOutSubset(all []*records.Task, s Settings) []*records.Task {
	var tasks []*records.Task
	for _, t := range all {
		if len(s.EvalHints) == 0 || slices.Contains(s.EvalHints, int(t.GetDifficulty().GetHintLevel())) {
			tasks = append(tasks, t)
		}
	}
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].GetId() < tasks[j].GetId() })
	r := rand.New(rand.NewPCG(EvalSeed, 0))
	r.Shuffle(len(tasks), func(i, j int) { tasks[i], tasks[j] = tasks[j], tasks[i] })
	if s.EvalTasks > 0 && len(tasks) > s.EvalTasks {
		tasks = tasks[:s.EvalTasks]
	}
	return tasks
}

// evaluating says whether the run measures held-out points at all.
func (t *Trainer) evaluating(s Settings) bool { return s.EvalTasks > 0 && len(t.cfg.HeldOut) > 0 }

// hasPoint says whether the curve already holds a point of this phase at
// this step with held-out scores.
func hasPoint(run *records.Run, phase string, step int64) bool {
	for _, p := range run.GetCurve() {
		if p.GetPhase() == phase && p.GetStep() == step && len(p.GetHeldOut()) > 0 {
			return true
		}
	}
	return false
}

// point adds a point of the curve to the run record (not yet stored):
// the run's figures now, and the held-out scores when eval is set. A
// step's evaluation fills that step's point rather than adding one.
func (t *Trainer) point(ctx context.Context, run *records.Run, s Settings, lim harness.Limits, phase string, eval bool, stepMetrics map[string]float64) error {
	m := run.GetMetrics()
	p := &records.RunPoint{
		Step: run.GetStep(), Phase: phase, PolicyVersion: int64(m[MetricPolicyVersion]),
		WallSeconds: t.clock.wall(), CpuSeconds: t.clock.cpu(), Metrics: stepMetrics,
	}
	if n := len(run.GetCurve()); phase == PhaseStep && n > 0 {
		if last := run.Curve[n-1]; last.GetPhase() == phase && last.GetStep() == p.Step {
			p = last
		}
	}
	// The run's cost so far, for comparisons at equal cost: training
	// episodes played (demonstrations and held-out episodes not counted)
	// and training seconds (TrainSeconds).
	if p.Metrics == nil {
		p.Metrics = map[string]float64{}
	}
	p.Metrics[PointRollouts] = m[MetricEpisodes]
	p.Metrics[PointTrainSeconds] = t.clock.wall() - m[MetricEvalSeconds]
	if eval && t.evaluating(s) {
		if hasPoint(run, phase, p.Step) {
			return nil
		}
		if err := t.evaluate(ctx, run, s, lim, p); err != nil {
			return err
		}
		p.WallSeconds, p.CpuSeconds = t.clock.wall(), t.clock.cpu()
	}
	if n := len(run.GetCurve()); n == 0 || run.Curve[n-1] != p {
		run.Curve = append(run.Curve, p)
	}
	return nil
}

// evaluate plays s.EvalK episodes of every task of the held-out subset
// with the current policy and fills p's scores.
func (t *Trainer) evaluate(ctx context.Context, run *records.Run, s Settings, lim harness.Limits, p *records.RunPoint) error {
	tasks := heldOutSubset(t.cfg.HeldOut, s)
	if len(tasks) == 0 {
		return fmt.Errorf("held-out set: no task at hint levels %v", s.EvalHints)
	}
	start := time.Now()
	tag := fmt.Sprintf("held-out (%s, step %d)", p.GetPhase(), p.GetStep())
	t.printf("%s: %d task(s) × %d episodes at policy v%d%s", tag, len(tasks), s.EvalK, p.GetPolicyVersion(), onWeights(t.weights))
	es := s
	es.Group = s.EvalK
	// The same episode seeds at every point (common random numbers for the
	// paired differences); each attempt at a point stores its episodes
	// under a run of its own, so no trajectory id is used twice. An
	// attempt after an interrupted one (a resumed run) reads back the
	// episodes the earlier attempts at this point finished at this policy
	// version, and plays only the others.
	seed := uint64(EvalSeed)
	attempt := int(run.GetMetrics()[MetricEvalAttempts])
	runID := evalAttemptRunID(run.GetId(), p.GetPhase(), p.GetStep(), attempt)
	var earlier []string
	for a := 1; a < attempt; a++ {
		earlier = append(earlier, evalAttemptRunID(run.GetId(), p.GetPhase(), p.GetStep(), a))
	}
	p.SamplerWeights = t.weights
	if p.GetPhase() == PhaseStart && s.StartFrom != "" {
		from, err := t.startFrom(ctx, run, s)
		if err != nil {
			return err
		}
		earlier = append(earlier, from...)
	}
	results, err := t.rollouts(ctx, tag, runID, tasks, es, lim, p.GetPolicyVersion(), seed, earlier)
	if err != nil {
		return err
	}
	if s.StartFrom != "" && p.GetPhase() == PhaseStart {
		reused, all := 0, 0
		for _, r := range results {
			for _, e := range r.Episodes {
				all++
				if e.Reused {
					reused++
				}
			}
		}
		t.printf("%s: %d of %d episodes read back from run %s's start point, the rest played", tag, reused, all, s.StartFrom)
	}
	// A point whose every episode failed in the infrastructure measures
	// nothing: it is an error, never a pass@1 of 0.
	graded, played := 0, 0
	for _, r := range results {
		for _, e := range r.Episodes {
			played++
			if !e.Infra {
				graded++
			}
		}
	}
	if played > 0 && graded == 0 {
		return fmt.Errorf("%s: every one of its %d episodes failed in the infrastructure (the first: %s); no held-out point is recorded",
			tag, played, firstInfra(results))
	}
	outs := make([]*rollout.TaskOutcome, 0, len(results))
	p.TaskPass1, p.TaskHint = map[string]float64{}, map[string]int32{}
	for i, r := range results {
		o := &rollout.TaskOutcome{TaskID: r.TaskID, Environment: tasks[i].GetEnvironment(), HintLevel: int(tasks[i].GetDifficulty().GetHintLevel()), Mode: s.Mode}
		for _, e := range r.Episodes {
			o.Add(e)
		}
		o.Finish(s.EvalK)
		outs = append(outs, o)
		if o.Samples > 0 {
			p.TaskPass1[r.TaskID] = o.PassAt1
			p.TaskHint[r.TaskID] = int32(o.HintLevel)
		}
	}
	for _, b := range rollout.Buckets(outs, s.EvalK, EvalSeed) {
		h := int32(-1)
		if b.HintLevel != nil {
			h = int32(*b.HintLevel)
		}
		p.HeldOut = append(p.HeldOut, &records.HeldOutScore{HintLevel: h, Mode: b.Mode, Tasks: int32(b.Tasks), Episodes: int32(b.Episodes),
			Pass1: b.PassAt1.Mean, Pass1Low: b.PassAt1.Low, Pass1High: b.PassAt1.High})
	}
	t.printf("%s: %s in %.0fs", tag, FormatScores(p.GetHeldOut()), time.Since(start).Seconds())
	return nil
}

// Sharing a start point. Every run's start point is its base model's (the
// start comes before any warm start or update) on the held-out subset its
// settings select, with the episode seeds of EvalSeed: two runs of one
// model and one selection measure the same policy on the same tasks with
// the same seeds, and the learning benchmark's two arms computed that
// point twice (1,090 and 1,125 s side by side on 2 cores, against 593 s
// for one alone). With Settings.StartFrom, a run reads back the other
// run's start episodes instead, as a resumed evaluation reads back its own
// earlier attempts, and both arms' paired differences are taken from one
// start. The runs must agree on the model, the mode, the episode limits
// and the held-out selection, and the start point must have been played
// on the weights this node's Sampler reads (its quantization, which every
// evaluation attempt marks in its run's metrics, MetricEvalWeights; a run
// recorded before that passes unchecked).

// startFrom checks that s.StartFrom names a run whose start point can
// stand for this one's and returns the run ids its start episodes are
// stored under. A run that read its own start point back from another
// stored none of those episodes again, so the chain is followed: the ids
// of every run along it, each checked the same way.
func (t *Trainer) startFrom(ctx context.Context, run *records.Run, s Settings) ([]string, error) {
	type key struct {
		Model, Mode                                    string
		MaxTurns, MaxTurnTokens, MaxContext, EvalTasks int
		WallSeconds                                    float64
		EvalHints                                      string
	}
	k := func(s Settings) key {
		return key{s.Model, s.Mode, s.MaxTurns, s.MaxTurnTokens, s.MaxContext, s.EvalTasks, s.WallSeconds, fmt.Sprint(s.EvalHints)}
	}
	var ids []string
	seen := map[string]bool{run.GetId(): true}
	for from := s.StartFrom; from != ""; {
		if from == run.GetId() {
			return nil, fmt.Errorf("start_from: run %s cannot take its start point from itself", from)
		}
		if seen[from] {
			return nil, fmt.Errorf("start_from: run %s comes twice in the chain of start points from %s", from, s.StartFrom)
		}
		seen[from] = true
		src, err := t.runs.Get(ctx, from)
		if err != nil {
			return nil, fmt.Errorf("start_from: run %s: %w", from, err)
		}
		ss, err := DecodeSettings(src)
		if err != nil {
			return nil, fmt.Errorf("start_from: run %s: %w", from, err)
		}
		if a, b := k(s), k(ss); a != b {
			return nil, fmt.Errorf("start_from: run %s's start point measured another policy or selection (%+v; this run %+v)", from, b, a)
		}
		if w := otherWeights(src, t.weights); w != "" {
			return nil, fmt.Errorf("start_from: run %s's held-out episodes were played on %s weights, this node's Sampler serves %s (node policy.quantization): they measured another policy", from, w, t.weights)
		}
		for a := 1; a <= int(src.GetMetrics()[MetricEvalAttempts]); a++ {
			ids = append(ids, evalAttemptRunID(src.GetId(), PhaseStart, 0, a))
		}
		from = ss.StartFrom
	}
	return ids, nil
}

func onWeights(w string) string {
	if w == "" {
		return ""
	}
	return " (sampler weights " + w + ")"
}

// otherWeights names weights other than w that run's held-out evaluation
// attempts were played on ("" if none, or where w is unknown; a run
// recorded before the weights were kept has none).
func otherWeights(run *records.Run, w string) string {
	if w == "" {
		return ""
	}
	for _, k := range slices.Sorted(maps.Keys(run.GetMetrics())) {
		if got, ok := strings.CutPrefix(k, MetricEvalWeights); ok && got != w && run.GetMetrics()[k] > 0 {
			return got
		}
	}
	return ""
}

// FormatScores prints held-out scores on one line, in Buckets' order.
func FormatScores(scores []*records.HeldOutScore) string {
	var parts []string
	for _, sc := range scores {
		name := "all"
		if sc.GetHintLevel() >= 0 {
			name = fmt.Sprintf("hint %d", sc.GetHintLevel())
		}
		parts = append(parts, fmt.Sprintf("%s pass@1 %.3f [%.3f, %.3f] (%d tasks)", name, sc.GetPass1(), sc.GetPass1Low(), sc.GetPass1High(), sc.GetTasks()))
	}
	return strings.Join(parts, "; ")
}

// Keys of the run record's metrics the curve's clock keeps.
const (
	MetricWallSeconds = "wall_seconds" // the run's wall time, summed over the processes that ran it
	MetricCPUSeconds  = "cpu_seconds"  // their CPU time, the same way
	// MetricEvalAttempts counts evaluations started; attempt n of a point
	// stores its episodes under RUN/eval/PHASE-STEP.n.
	MetricEvalAttempts = "eval_attempts"
	// MetricEvalSeconds is the wall time the run's held-out evaluations
	// took, over every process (a budget does not count it).
	MetricEvalSeconds = "eval_seconds"
	// MetricEvalWeights + W is 1 once an evaluation attempt of the run was
	// played with the Sampler reading weights W (f32, q8_0, q8_0-f32).
	MetricEvalWeights = "eval_weights/"
)

// clock measures a run's time across resumes: what earlier processes
// recorded plus what this one has spent since Train began.
type clock struct {
	wall0, cpu0 float64 // the record's values when Train began
	start       time.Time
	startCPU    time.Duration
}

func (c *clock) reset(run *records.Run) {
	m := run.GetMetrics()
	c.wall0, c.cpu0, c.start, c.startCPU = m[MetricWallSeconds], m[MetricCPUSeconds], time.Now(), learner.CPUTime()
}

func (c *clock) wall() float64 { return c.wall0 + time.Since(c.start).Seconds() }
func (c *clock) cpu() float64 {
	return c.cpu0 + (learner.CPUTime() - c.startCPU).Seconds()
}

// tick writes the clock into the record.
func (c *clock) tick(run *records.Run) {
	run.Metrics[MetricWallSeconds], run.Metrics[MetricCPUSeconds] = c.wall(), c.cpu()
}

// record adds a point with held-out scores for phase (once: a resumed run
// skips points it has) and stores the run.
func (t *Trainer) record(ctx context.Context, run *records.Run, s Settings, lim harness.Limits, phase string) error {
	if !t.evaluating(s) || hasPoint(run, phase, run.GetStep()) {
		return nil
	}
	run.Metrics[MetricEvalAttempts]++
	if t.weights != "" {
		run.Metrics[MetricEvalWeights+t.weights] = 1
	}
	if err := t.runs.Put(ctx, run); err != nil {
		return fmt.Errorf("recording the %s evaluation: %w", phase, err)
	}
	start := time.Now()
	if err := t.point(ctx, run, s, lim, phase, true, nil); err != nil {
		return fmt.Errorf("held-out evaluation: %w", err)
	}
	run.Metrics[MetricEvalSeconds] += time.Since(start).Seconds()
	t.clock.tick(run)
	run.UpdatedUnixNano = time.Now().UnixNano()
	if err := t.runs.Put(ctx, run); err != nil {
		return fmt.Errorf("recording the %s evaluation: %w", phase, err)
	}
	return nil
}

// WriteCurve prints a run's learning curve: one row per point with
// held-out scores (every evaluation) and the training figures of the steps
// between them.
func WriteCurve(w io.Writer, run *records.Run) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PHASE\tSTEP\tPOLICY\tWALL s\tCPU s\tTRAIN SOLVE RATE\tHELD-OUT PASS@1 [95% CI]")
	var solved, steps float64
	for _, p := range run.GetCurve() {
		if p.GetPhase() == PhaseStep {
			solved += p.GetMetrics()["solve_rate"]
			steps++
		}
		if len(p.GetHeldOut()) == 0 {
			continue
		}
		train := "-"
		if steps > 0 {
			train = fmt.Sprintf("%.3f (%d steps)", solved/steps, int(steps))
		}
		fmt.Fprintf(tw, "%s\t%d\tv%d\t%.0f\t%.0f\t%s\t%s\n", p.GetPhase(), p.GetStep(), p.GetPolicyVersion(), p.GetWallSeconds(), p.GetCpuSeconds(), train, FormatScores(p.GetHeldOut()))
		solved, steps = 0, 0
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	g, from, to, ok := Gain(run, -1, EvalSeed)
	if !ok {
		return nil
	}
	fmt.Fprintf(w, "held-out pass@1, %s (v%d) − %s (v%d), paired over tasks, 95%% bootstrap interval: all %+.3f [%+.3f, %+.3f] (%d tasks)",
		to.GetPhase(), to.GetPolicyVersion(), from.GetPhase(), from.GetPolicyVersion(), g.Mean, g.Low, g.High, g.Tasks)
	levels := map[int32]bool{}
	for _, h := range to.GetTaskHint() {
		levels[h] = true
	}
	for _, h := range slices.Sorted(maps.Keys(levels)) {
		if g, _, _, ok := Gain(run, h, EvalSeed); ok && g.Tasks > 0 {
			fmt.Fprintf(w, "; hint %d %+.3f [%+.3f, %+.3f] (%d)", h, g.Mean, g.Low, g.High, g.Tasks)
		}
	}
	_, err := fmt.Fprintln(w)
	return err
}

// Gain is the paired difference of held-out pass@1 between a run's first
// and last evaluation points, task by task, with a 95% bootstrap interval
// over tasks, for the tasks at hint level hint (-1: all); ok is false
// before two points exist.
func Gain(run *records.Run, hint int32, seed uint64) (est rollout.Estimate, from, to *records.RunPoint, ok bool) {
	for _, p := range run.GetCurve() {
		if len(p.GetHeldOut()) == 0 {
			continue
		}
		if from == nil {
			from = p
		}
		to = p
	}
	if from == nil || to == from {
		return est, from, to, false
	}
	var diffs []float64
	for id, a := range from.GetTaskPass1() {
		if b, ok := to.GetTaskPass1()[id]; ok && (hint < 0 || to.GetTaskHint()[id] == hint) {
			diffs = append(diffs, b-a)
		}
	}
	sort.Float64s(diffs) // map order must not move the bootstrap
	return rollout.Bootstrap(diffs, 2000, seed), from, to, len(diffs) > 0
}

// EvalPending says whether a run whose steps are done still lacks its
// end point (a run killed during its last evaluation): frognano run
// --run ID then trains nothing more and measures it. A run of no steps
// measures its start point only (the point other runs read back with
// --start-from), until it has it.
func EvalPending(run *records.Run, s Settings) bool {
	if s.EvalTasks > 0 && s.Steps == 0 {
		return !hasPoint(run, PhaseStart, 0)
	}
	return s.EvalTasks > 0 && Finished(run, s) && !hasPoint(run, PhaseEnd, run.GetStep())
}
