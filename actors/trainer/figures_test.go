package trainer

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"testing"

	"github.com/frognano/frognano/actors/frontier"
	"github.com/frognano/frognano/actors/learner"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/kernels/grpo"
	"github.com/frognano/frognano/kernels/model"
	"github.com/frognano/frognano/kernels/model/modeltest"
	"github.com/frognano/frognano/kernels/optim"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// TestLearnerStepClipFractionReachesThePoint takes real GRPO steps with a
// tiny random model under the TV mask: the sampler's log-probabilities are
// the model's own except on the tokens of one sequence, which are off by
// one nat (ratio e ≈ 2.7, outside [0.8, 1.2]), so exactly those tokens are
// masked. The Learner's answer (the LearnerStep the trainer receives) puts
// that share in the step's point; a step without signal puts none.
func TestLearnerStepClipFractionReachesThePoint(t *testing.T) {
	ctx := context.Background()
	spec := modeltest.Llama
	m, err := model.LoadHF(spec.WriteHF(t, spec.RandomWeights(5), nil), model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts := grpo.DefaultOptions()
	opts.Trust = grpo.TrustTVMask
	oc := optim.DefaultConfig()
	oc.LR = 1e-3
	l, err := learner.Open(ctx, learner.Config{RunID: "figures", Model: m, Store: persistence.NewMemory().Checkpoints(),
		Optim: oc, GRPO: opts, MicroBatchTokens: 64, PublishEvery: -1, CheckpointEvery: -1, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := m.NewTrainer(model.TrainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seq := func(n, prompt int, reward float64, offset float32) grpo.Sequence {
		s := grpo.Sequence{Tokens: make([]int32, n), PolicyMask: make([]bool, n), SamplerLogProbs: make([]float32, n), Reward: reward}
		for j := range s.Tokens {
			s.Tokens[j] = int32((7*j + n) % m.Config.VocabSize)
			s.PolicyMask[j] = j >= prompt
		}
		lp, err := tr.LogProbs([][]int32{s.Tokens})
		if err != nil {
			t.Fatal(err)
		}
		for j, v := range lp[0] {
			s.SamplerLogProbs[j+1] = v - offset
		}
		return s
	}
	// 2 groups × 2 sequences of 12 tokens, 8 of them the policy's: 32
	// policy tokens, 8 of them (one sequence) masked.
	groups := []grpo.Group{
		{seq(12, 4, 1, 0), seq(12, 4, 0, 1)},
		{seq(12, 4, 0, 0), seq(12, 4, 1, 0)},
	}
	res, err := l.TrainStep(ctx, groups)
	if err != nil || res.Skipped != "" {
		t.Fatalf("step: %+v, %v", res, err)
	}
	ls := res.Proto("figures/step-1")
	sm := map[string]float64{}
	LearnerPointMetrics(sm, ls)
	if got := sm[PointClipFraction]; math.Abs(got-8.0/32) > 1e-12 || ls.GetPolicyTokens() != 32 {
		t.Errorf("clip fraction %v of %d policy tokens, want 0.25 of 32", got, ls.GetPolicyTokens())
	}
	// The mismatch: 8 of 32 tokens off by one nat, the rest the policy's
	// own log-probabilities (a few ulps of float32 apart at most).
	if got := sm[PointLogRatioMean]; math.Abs(got-8.0/32) > 1e-4 {
		t.Errorf("mean |log ratio| %v, want 0.25", got)
	}
	if got := sm[PointLogRatioMax]; math.Abs(got-1) > 1e-4 {
		t.Errorf("max |log ratio| %v, want 1", got)
	}
	if sm["loss"] != ls.GetLoss() || sm["grad_norm"] != ls.GetGradNorm() || sm["grad_norm"] <= 0 {
		t.Errorf("point metrics %v from step %v", sm, ls)
	}

	// Equal rewards: no update, no loss, no tokens, no share.
	res, err = l.TrainStep(ctx, []grpo.Group{{seq(10, 3, 1, 0), seq(11, 3, 1, 0)}})
	if err != nil || res.Skipped != learner.SkipNoSignal {
		t.Fatalf("step without signal: %+v, %v", res, err)
	}
	sm = map[string]float64{}
	LearnerPointMetrics(sm, res.Proto("figures/step-2"))
	if len(sm) != 0 {
		t.Errorf("a step without signal records %v", sm)
	}
}

// TestPoolReachesThePoint asks a real FrontierEstimator for its pool after
// outcomes at several hint levels: the step's point carries every band's
// count, and the active bands' counts at each hint level, which add up to
// the bands' and to the tasks at each level.
func TestPoolReachesThePoint(t *testing.T) {
	ctx := context.Background()
	mem := persistence.NewMemory()
	hints := map[string]int32{"a": 1, "b": 1, "c": 3, "d": 3, "e": 4, "f": 4}
	var tasks []*records.Task
	for id, h := range hints {
		tasks = append(tasks, &records.Task{Id: id, Environment: "env", Difficulty: &records.DifficultyFeatures{
			Operators: []string{"swap_args"}, Edits: 1, Files: 1, LinesTouched: 1, FailingTests: 1, HintLevel: h, Mode: "patch"}})
	}
	if err := mem.Tasks().PutMany(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	e, err := frontier.Open(ctx, frontier.Config{Tasks: mem.Tasks(), State: mem.Frontier(),
		Params: frontier.Params{MinRetireEvidence: 8, MinHopelessAttempts: 16}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	var outs []*messages.EpisodeOutcome
	for v := int64(0); v < 2; v++ {
		for i := range 8 {
			outs = append(outs, &messages.EpisodeOutcome{TaskId: "a", PolicyVersion: v, Reward: 1},
				&messages.EpisodeOutcome{TaskId: "c", PolicyVersion: v, Reward: 0},
				&messages.EpisodeOutcome{TaskId: "e", PolicyVersion: v, Reward: float64(i % 2)})
		}
	}
	if _, err := e.Record(ctx, outs); err != nil {
		t.Fatal(err)
	}
	snap := e.Snapshot(nil)
	sm := map[string]float64{}
	PoolPointMetrics(sm, snap)

	total, active := 0.0, 0.0
	for _, b := range snap.GetPool() {
		if sm[PoolKey(b.GetName())] != float64(b.GetTasks()) {
			t.Errorf("%s: %v in the point, %d in the pool", PoolKey(b.GetName()), sm[PoolKey(b.GetName())], b.GetTasks())
		}
		total += float64(b.GetTasks())
	}
	if total != float64(len(hints)) || sm[PoolKey(frontier.BandRetiredMastered)] != 1 || sm[PoolKey(frontier.BandRetiredHopeless)] != 1 {
		t.Errorf("pool of %v tasks: %v", total, sm)
	}
	byLevel := map[int32]float64{}
	for k, v := range sm {
		if level, band, ok := ParsePoolHintKey(k); ok {
			byLevel[level] += v
			active += v
			if k != PoolHintKey(level, band) {
				t.Errorf("key %s reads back as %d %s", k, level, band)
			}
		}
	}
	if active != total-2 {
		t.Errorf("active tasks by hint level add up to %v, want %v: %v", active, total-2, sm)
	}
	// "a" (level 1) retired mastered and "c" (level 3) hopeless: one active
	// task at each of levels 1 and 3, both at level 4.
	if byLevel[1] != 1 || byLevel[3] != 1 || byLevel[4] != 2 || len(byLevel) != 3 {
		t.Errorf("active tasks by hint level %v", byLevel)
	}
	for _, band := range ActiveBands {
		var sum float64
		for level := range byLevel {
			v, ok := sm[PoolHintKey(level, band)]
			if !ok {
				t.Errorf("no %s", PoolHintKey(level, band))
			}
			sum += v
		}
		if sum != sm[PoolKey(band)] {
			t.Errorf("band %s: %v by hint level, %v in all", band, sum, sm[PoolKey(band)])
		}
	}

	// frognano runs show prints them.
	run := &records.Run{Id: "r", Curve: []*records.RunPoint{{Phase: PhaseStart}}}
	for i := 1; i <= 40; i++ {
		pm := map[string]float64{"solve_rate": 0.5, PointClipFraction: float64(i) / 100, PointLogRatioMean: 0.0125, PointLogRatioMax: 0.75}
		PoolPointMetrics(pm, snap)
		run.Curve = append(run.Curve, &records.RunPoint{Step: int64(i), Phase: PhaseStep, PolicyVersion: int64(i), Metrics: pm})
	}
	var b strings.Builder
	if err := WriteSteps(&b, run, 5); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	wantPool := fmt.Sprintf("%d/%d/%d", int(sm[PoolKey(frontier.BandTooHard)]), int(sm[PoolKey(frontier.BandFrontier)]), int(sm[PoolKey(frontier.BandTooEasy)]))
	if len(lines) != 7 || !strings.HasPrefix(lines[0], "5 of 40 step points") || !strings.Contains(lines[1], "CLIPPED/MASKED") ||
		!strings.HasPrefix(lines[2], "1 ") || !strings.HasPrefix(lines[6], "40 ") || !strings.Contains(lines[6], "0.400") || !strings.Contains(lines[6], wantPool) ||
		!strings.Contains(lines[1], "|ΔLOGP| MEAN/MAX") || !strings.Contains(lines[6], "0.0125/0.750") {
		t.Errorf("steps table:\n%s", out)
	}
}
