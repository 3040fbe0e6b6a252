package learner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/kernels/grpo"
	"github.com/frognano/frognano/kernels/model"
	"github.com/frognano/frognano/kernels/model/modeltest"
	"github.com/frognano/frognano/kernels/optim"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// tinyDir writes a tiny random Hugging Face checkpoint of spec.
func tinyDir(t testing.TB, spec modeltest.Spec, seed uint64) string {
	t.Helper()
	return spec.WriteHF(t, spec.RandomWeights(seed), nil)
}

func load(t testing.TB, dir string) *model.Model {
	t.Helper()
	m, err := model.LoadHF(dir, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func openBadger(t testing.TB) *persistence.DB {
	t.Helper()
	db, err := persistence.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func testConfig(m *model.Model, store persistence.CheckpointStore) Config {
	oc := optim.DefaultConfig()
	oc.LR = 1e-2
	return Config{RunID: "run1", Model: m, Store: store, Optim: oc, GRPO: grpo.DefaultOptions(),
		MicroBatchTokens: 40, PublishEvery: -1, CheckpointEvery: -1, Seed: 7}
}

// batch draws groups of random sequences: a prompt of 4–8 tokens, then
// policy tokens; rewards 0 or 1; sampler log-probs near the model's.
func batch(t testing.TB, m *model.Model, seed uint64) []grpo.Group {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 11))
	tr, err := m.NewTrainer(model.TrainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var groups []grpo.Group
	for g := range 3 {
		var grp grpo.Group
		for i := range 4 {
			n := 10 + r.IntN(20)
			s := grpo.Sequence{Tokens: make([]int32, n), PolicyMask: make([]bool, n), SamplerLogProbs: make([]float32, n)}
			prompt := 4 + r.IntN(5)
			for j := range s.Tokens {
				s.Tokens[j] = int32(r.IntN(m.Config.VocabSize))
				s.PolicyMask[j] = j >= prompt
			}
			s.Reward = float64((i + g) % 2)
			grp = append(grp, s)
		}
		groups = append(groups, grp)
	}
	for _, grp := range groups {
		for i := range grp {
			lp, err := tr.LogProbs([][]int32{grp[i].Tokens})
			if err != nil {
				t.Fatal(err)
			}
			for j, v := range lp[0] {
				grp[i].SamplerLogProbs[j+1] = min(0, v+float32(r.NormFloat64()*0.05))
			}
		}
	}
	return groups
}

func weights(t testing.TB, m *model.Model) map[string][]float32 {
	out := map[string][]float32{}
	for _, p := range m.Params() {
		h := make([]float32, numel(p.Value.Shape()))
		m.Backend().ToHost(h, p.Value)
		out[p.Name] = h
	}
	return out
}

func sameBits(t *testing.T, what string, a, b map[string][]float32) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d and %d tensors", what, len(a), len(b))
	}
	for name, x := range a {
		y := b[name]
		for i := range x {
			if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
				t.Fatalf("%s: %s[%d] = %v and %v", what, name, i, x[i], y[i])
			}
		}
	}
}

func step(t *testing.T, l *Learner, groups []grpo.Group) StepResult {
	t.Helper()
	res, err := l.TrainStep(context.Background(), groups)
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped != "" {
		t.Fatalf("step skipped: %s", res.Skipped)
	}
	return res
}

// TestResumeExact trains 3 steps, checkpoints, opens a new Learner on a
// fresh copy of the base model from the Badger store, takes steps 4 and 5,
// and compares the weights with an uninterrupted 5-step run bit for bit.
// Micro-batches are small, so the RNG's shuffling changes summation order
// and an RNG state that was not restored would show.
func TestResumeExact(t *testing.T) {
	ctx := context.Background()
	dir := tinyDir(t, modeltest.Llama, 1)
	base := load(t, dir)
	batches := make([][]grpo.Group, 5)
	for i := range batches {
		batches[i] = batch(t, base, uint64(100+i))
	}

	whole, err := Open(ctx, testConfig(load(t, dir), persistence.NewMemory().Checkpoints()))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range batches {
		res := step(t, whole, b)
		if res.MicroBatches < 2 {
			t.Fatalf("%d micro-batches; the test needs several", res.MicroBatches)
		}
	}

	db := openBadger(t)
	first, err := Open(ctx, testConfig(load(t, dir), db.Checkpoints()))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range batches[:3] {
		step(t, first, b)
	}
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}

	second, err := Open(ctx, testConfig(load(t, dir), db.Checkpoints()))
	if err != nil {
		t.Fatal(err)
	}
	if second.Step() != 3 || second.PolicyVersion() != 3 {
		t.Fatalf("resumed at step %d version %d, want 3 and 3", second.Step(), second.PolicyVersion())
	}
	sameBits(t, "weights after resume", weights(t, first.Model()), weights(t, second.Model()))
	for _, b := range batches[3:] {
		step(t, second, b)
	}
	sameBits(t, "weights at step 5", weights(t, whole.Model()), weights(t, second.Model()))
	if whole.opt.Step() != 5 || second.opt.Step() != 5 {
		t.Fatalf("optimizer steps %d and %d", whole.opt.Step(), second.opt.Step())
	}
}

// TestLearns checks the direction of an update on a tiny model: after a
// few steps on one batch its loss is lower, rewarded sequences are more
// likely and unrewarded ones less.
func TestLearns(t *testing.T) {
	ctx := context.Background()
	m := load(t, tinyDir(t, modeltest.Qwen2, 2))
	groups := batch(t, m, 5)
	cfg := testConfig(m, persistence.NewMemory().Checkpoints())
	cfg.Optim.MaxGradNorm = 0
	l, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	meanLogp := func() (good, bad float64) {
		var ng, nb int
		for _, g := range groups {
			for _, s := range g {
				lp, err := l.Trainer().LogProbs([][]int32{s.Tokens})
				if err != nil {
					t.Fatal(err)
				}
				for j, v := range lp[0] {
					if !s.PolicyMask[j+1] {
						continue
					}
					if s.Reward > 0 {
						good += float64(v)
						ng++
					} else {
						bad += float64(v)
						nb++
					}
				}
			}
		}
		return good / float64(ng), bad / float64(nb)
	}
	loss0, _, err := l.Evaluate(groups)
	if err != nil {
		t.Fatal(err)
	}
	g0, b0 := meanLogp()
	for range 3 {
		step(t, l, groups)
	}
	loss1, _, _ := l.Evaluate(groups)
	g1, b1 := meanLogp()
	t.Logf("loss %.4f → %.4f, rewarded log-prob %.4f → %.4f, unrewarded %.4f → %.4f", loss0, loss1, g0, g1, b0, b1)
	if !(loss1 < loss0) || !(g1 > g0) || !(b1 < b0) {
		t.Fatalf("loss %v → %v, rewarded %v → %v, unrewarded %v → %v", loss0, loss1, g0, g1, b0, b1)
	}
}

// TestNonFiniteSkipped feeds a batch whose corrupt sampler log-prob makes
// a ratio overflow to +Inf on a negatively rewarded sequence: the loss is
// Inf, the update is skipped and counted, weights do not move, and the
// next good batch trains as usual.
func TestNonFiniteSkipped(t *testing.T) {
	ctx := context.Background()
	m := load(t, tinyDir(t, modeltest.Llama, 3))
	l, err := Open(ctx, testConfig(m, persistence.NewMemory().Checkpoints()))
	if err != nil {
		t.Fatal(err)
	}
	bad := batch(t, m, 9)
	for i := range bad[0] {
		if bad[0][i].Reward == 0 {
			last := len(bad[0][i].Tokens) - 1
			bad[0][i].SamplerLogProbs[last] = -1e30
		}
	}
	before := weights(t, m)
	res, err := l.TrainStep(ctx, bad)
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped != SkipNonFinite || res.SkippedSteps != 1 || l.SkippedSteps() != 1 || l.Step() != 0 || l.PolicyVersion() != 0 {
		t.Fatalf("result %+v, learner step %d version %d skipped %d", res, l.Step(), l.PolicyVersion(), l.SkippedSteps())
	}
	sameBits(t, "weights after a skipped step", before, weights(t, m))
	for _, p := range l.Trainer().Params() {
		if ss := l.opt.GradNorm(); ss != 0 {
			t.Fatalf("gradient norm %v after a skipped step (%s)", ss, p.Name)
		}
	}
	res = step(t, l, batch(t, m, 10))
	if res.Step != 1 || res.PolicyVersion != 1 || res.SkippedSteps != 1 {
		t.Fatalf("good step after a skip: %+v", res)
	}
}

// TestNoSignal: a batch whose groups all have equal rewards changes
// nothing and says so.
func TestNoSignal(t *testing.T) {
	m := load(t, tinyDir(t, modeltest.Llama, 4))
	l, err := Open(context.Background(), testConfig(m, persistence.NewMemory().Checkpoints()))
	if err != nil {
		t.Fatal(err)
	}
	groups := batch(t, m, 1)
	for _, g := range groups {
		for i := range g {
			g[i].Reward = 1
		}
	}
	res, err := l.TrainStep(context.Background(), groups)
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped != SkipNoSignal || res.Stats.GroupsSkipped != 3 || l.Step() != 0 {
		t.Fatalf("result %+v", res)
	}
}

func TestBadBatch(t *testing.T) {
	m := load(t, tinyDir(t, modeltest.Llama, 4))
	l, err := Open(context.Background(), testConfig(m, persistence.NewMemory().Checkpoints()))
	if err != nil {
		t.Fatal(err)
	}
	groups := batch(t, m, 1)
	groups[1][2].Tokens[3] = int32(m.Config.VocabSize)
	if _, err := l.TrainStep(context.Background(), groups); !errors.Is(err, ErrBadBatch) {
		t.Fatalf("token outside the vocabulary: err %v", err)
	}
	groups = batch(t, m, 1)
	groups[0][0].PolicyMask = groups[0][0].PolicyMask[:2]
	if _, err := l.TrainStep(context.Background(), groups); !errors.Is(err, ErrBadBatch) {
		t.Fatalf("short mask: err %v", err)
	}
	if l.Step() != 0 {
		t.Fatal("a bad batch moved the step")
	}
}

// truncating is a store whose ReadTensor returns one tensor of one step
// cut short, as a torn write would leave it.
type truncating struct {
	persistence.CheckpointStore
	step int64
	name string
}

func (s truncating) ReadTensor(ctx context.Context, runID string, step int64, name string) ([]byte, error) {
	b, err := s.CheckpointStore.ReadTensor(ctx, runID, step, name)
	if err == nil && step == s.step && name == s.name {
		b = b[:len(b)/2]
	}
	return b, err
}

// TestBadCheckpoints: a truncated newest checkpoint, a damaged one (CRC)
// and a checkpoint of another model are refused with clear errors; the
// previous checkpoint still loads.
func TestBadCheckpoints(t *testing.T) {
	ctx := context.Background()
	dir := tinyDir(t, modeltest.Llama, 5)
	mem := persistence.NewMemory()
	cfg := testConfig(load(t, dir), mem.Checkpoints())
	cfg.CheckpointEvery = 1
	l, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := l.Model()
	step(t, l, batch(t, m, 1))
	atStep1 := weights(t, m)
	step(t, l, batch(t, m, 2))

	cfg = testConfig(load(t, dir), truncating{mem.Checkpoints(), 2, momentV + "model.norm.weight"})
	if _, err := Open(ctx, cfg); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("truncated checkpoint: err %v, want ErrCorrupt", err)
	} else {
		t.Logf("truncated: %v", err)
	}
	cfg.ResumeStep = 1
	l1, err := Open(ctx, cfg)
	if err != nil {
		t.Fatalf("the previous checkpoint does not load: %v", err)
	}
	if l1.Step() != 1 {
		t.Fatalf("resumed at %d, want 1", l1.Step())
	}
	sameBits(t, "previous checkpoint", atStep1, weights(t, l1.Model()))
	// A failed load leaves the Learner as it was.
	if err := l1.LoadCheckpoint(ctx, 2); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("LoadCheckpoint of the truncated step: %v", err)
	}
	if l1.Step() != 1 {
		t.Fatalf("failed load moved the step to %d", l1.Step())
	}
	sameBits(t, "after a failed load", atStep1, weights(t, l1.Model()))

	// Another model under the same run id.
	other := testConfig(load(t, tinyDir(t, modeltest.Qwen3, 6)), mem.Checkpoints())
	if _, err := Open(ctx, other); !errors.Is(err, ErrModelMismatch) {
		t.Fatalf("checkpoint of another model: err %v, want ErrModelMismatch", err)
	} else {
		t.Logf("mismatch: %v", err)
	}
}

// TestPublish: published weights are stored under step = version, load
// into another copy of the model (the Samplers' side) and equal the
// Learner's; a resumed Learner numbers versions after published ones.
func TestPublish(t *testing.T) {
	ctx := context.Background()
	dir := tinyDir(t, modeltest.Llama, 7)
	store := persistence.NewMemory().Checkpoints()
	cfg := testConfig(load(t, dir), store)
	cfg.PublishEvery, cfg.CheckpointEvery, cfg.KeepPublished = 1, 2, 2
	l, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var last *Publication
	for i := range 3 {
		res := step(t, l, batch(t, l.Model(), uint64(i)))
		if res.Published == nil || res.Published.PolicyVersion != res.PolicyVersion || res.Published.Step != res.PolicyVersion {
			t.Fatalf("step %d: published %+v", i, res.Published)
		}
		if res.Checkpointed != (res.Step%2 == 0) {
			t.Fatalf("step %d checkpointed %v", res.Step, res.Checkpointed)
		}
		last = res.Published
	}
	steps, _ := store.Steps(ctx, "run1")
	if len(steps) != 2 || steps[1] != 3 {
		t.Fatalf("published steps %v, want the newest 2", steps)
	}
	sampler := load(t, dir)
	man, err := LoadPublished(ctx, store, sampler, last.RunID, last.Step)
	if err != nil {
		t.Fatal(err)
	}
	if man.GetPolicyVersion() != 3 {
		t.Fatalf("manifest version %d", man.GetPolicyVersion())
	}
	sameBits(t, "published weights", weights(t, l.Model()), weights(t, sampler))

	// Crash after step 3 (published, not checkpointed): the resumed
	// Learner is at step 2 but numbers its next version 4.
	l2, err := Open(ctx, testConfig(load(t, dir), store))
	if err != nil {
		t.Fatal(err)
	}
	if l2.Step() != 2 || l2.PolicyVersion() != 3 {
		t.Fatalf("resumed at step %d version %d, want 2 and 3", l2.Step(), l2.PolicyVersion())
	}
	cfg2 := testConfig(load(t, dir), store)
	cfg2.PublishEvery = 1
	l3, err := Open(ctx, cfg2)
	if err != nil {
		t.Fatal(err)
	}
	res := step(t, l3, batch(t, l3.Model(), 9))
	if res.Step != 3 || res.PolicyVersion != 4 || res.Published == nil || res.Published.Step != 4 {
		t.Fatalf("after resume: %+v", res)
	}
}

func TestGroupsFromProto(t *testing.T) {
	tr := func(ids []int32, mask []bool, lps []float32, r float64) *records.Trajectory {
		return &records.Trajectory{TokenIds: ids, PolicyMask: mask, Logprobs: lps, Reward: r}
	}
	in := []*messages.TrajectoryGroup{{TaskId: "t", Trajectories: []*records.Trajectory{
		tr([]int32{1, 2, 3}, []bool{false, true, true}, []float32{-1, -2}, 1),     // compact
		tr([]int32{1, 2, 3}, []bool{false, false, true}, []float32{0, -5, -3}, 0), // aligned
	}}}
	gs, err := GroupsFromProto(in)
	if err != nil {
		t.Fatal(err)
	}
	s0, s1 := gs[0][0], gs[0][1]
	if s0.SamplerLogProbs[1] != -1 || s0.SamplerLogProbs[2] != -2 || s0.Reward != 1 {
		t.Errorf("compact: %+v", s0)
	}
	if s1.SamplerLogProbs[2] != -3 || s1.Reward != 0 {
		t.Errorf("aligned: %+v", s1)
	}
	for name, bad := range map[string]*records.Trajectory{
		"mask":     tr([]int32{1, 2}, []bool{true}, nil, 0),
		"logprobs": tr([]int32{1, 2, 3}, []bool{false, true, true}, []float32{-1}, 0),
	} {
		if _, err := GroupsFromProto([]*messages.TrajectoryGroup{{Trajectories: []*records.Trajectory{bad}}}); !errors.Is(err, ErrBadBatch) {
			t.Errorf("%s: err %v", name, err)
		}
	}
}

// TestTrainTopLayers: a Learner that trains only the top layer changes
// that layer and the final norm and nothing else; it publishes only those,
// and a Sampler's base model that loads the publication computes with
// exactly the Learner's weights; it resumes from its checkpoint bit for
// bit, and a Learner that would train the frozen layers refuses the
// checkpoint with an error that says so.
func TestTrainTopLayers(t *testing.T) {
	ctx := context.Background()
	dir := tinyDir(t, modeltest.Llama, 8)
	base := weights(t, load(t, dir))
	store := persistence.NewMemory().Checkpoints()
	cfg := testConfig(load(t, dir), store)
	cfg.Train.TrainLayers = 1
	cfg.PublishEvery = 1
	l, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var last *Publication
	for i := range 2 {
		last = step(t, l, batch(t, l.Model(), uint64(40+i))).Published
	}
	after := weights(t, l.Model())
	top := l.Model().Config.Layers - 1
	changed := 0
	for name, w := range after {
		trained := name == "model.norm.weight" || strings.HasPrefix(name, fmt.Sprintf("model.layers.%d.", top))
		same := true
		for i := range w {
			same = same && math.Float32bits(w[i]) == math.Float32bits(base[name][i])
		}
		if trained && !same {
			changed++
		}
		if !trained && !same {
			t.Errorf("%s is frozen but changed", name)
		}
	}
	if changed == 0 {
		t.Fatal("no trained weight changed")
	}
	man, err := store.Load(ctx, last.RunID, last.Step)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range man.GetTensors() {
		if l.Trainer().Frozen(m.GetName()) {
			t.Errorf("the publication holds the frozen %s", m.GetName())
		}
	}
	sampler := load(t, dir)
	if _, err := LoadPublished(ctx, store, sampler, last.RunID, last.Step); err != nil {
		t.Fatal(err)
	}
	sameBits(t, "published weights", after, weights(t, sampler))

	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	resumed, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sameBits(t, "weights after resume", after, weights(t, resumed.Model()))
	whole := testConfig(load(t, dir), store)
	if _, err := Open(ctx, whole); !errors.Is(err, ErrModelMismatch) || !strings.Contains(err.Error(), "TrainLayers") {
		t.Fatalf("a learner of every weight opened the top layer's checkpoint: %v", err)
	}
}

// byPrefix puts the episodes of one prompt next to each other (so that the
// Trainer computes the prompt once), even when every prompt begins with
// the same system prompt, keeping the groups in the order of their first
// episode; sharedRows counts what two adjacent sequences share before
// their policy tokens.
func TestByPrefixGroupsEpisodesOfOnePrompt(t *testing.T) {
	system := make([]int32, 30)
	for i := range system {
		system[i] = int32(100 + i)
	}
	seq := func(prompt, answer int32) ([]int32, []bool) {
		s := append(append([]int32{}, system...), prompt, prompt+1, answer, answer+1)
		m := make([]bool, len(s))
		m[len(s)-2], m[len(s)-1] = true, true
		return s, m
	}
	var seqs [][]int32
	var masks [][]bool
	for _, sp := range [][2]int32{{1, 7}, {5, 7}, {1, 8}, {9, 3}, {5, 2}, {1, 4}} {
		s, m := seq(sp[0], sp[1])
		seqs, masks = append(seqs, s), append(masks, m)
	}
	got := byPrefix(seqs, masks, []int{0, 1, 2, 3, 4, 5})
	if want := []int{0, 2, 5, 1, 4, 3}; !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
	if n := sharedRows(seqs[0], seqs[2], masks[0], masks[2]); n != 32 {
		t.Errorf("one prompt: %d rows shared, want 32", n)
	}
	if n := sharedRows(seqs[0], seqs[1], masks[0], masks[1]); n != 30 {
		t.Errorf("one system prompt: %d rows shared, want 30", n)
	}
	short := [][]int32{{1, 2, 3}, {1, 2, 4}}
	if n := sharedRows(short[0], short[1], []bool{false, false, true}, []bool{false, false, true}); n != 0 {
		t.Errorf("a 2-token common prefix: %d rows shared, want 0 (below the Trainer's minimum)", n)
	}
}
