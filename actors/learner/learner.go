package learner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"time"

	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/kernels/grpo"
	"github.com/frognano/frognano/kernels/model"
	"github.com/frognano/frognano/kernels/optim"
	"github.com/frognano/frognano/persistence"
)

// Errors wrapped by the Learner's methods.
var (
	// ErrConfig is a Learner configuration that cannot work.
	ErrConfig = errors.New("learner: bad configuration")
	// ErrBadBatch is a training batch that cannot be trained on; the
	// Learner is unchanged.
	ErrBadBatch = errors.New("learner: bad batch")
	// ErrModelMismatch is a checkpoint of another model.
	ErrModelMismatch = errors.New("learner: checkpoint of another model")
	// ErrCorrupt is a checkpoint that is truncated or damaged.
	ErrCorrupt = errors.New("learner: corrupt checkpoint")
)

// Defaults used where Config leaves a field zero.
const (
	DefaultMicroBatchTokens = 4096
	DefaultCheckpointEvery  = 10
	DefaultKeepPublished    = 3
	DefaultKeepCheckpoints  = 2
)

// Config configures a Learner.
type Config struct {
	// RunID names the run; published weights are checkpoints of RunID,
	// full training state those of RunID+"/train".
	RunID string
	// Model is the policy; its weights are trained in place.
	Model *model.Model
	// Store keeps publications and checkpoints.
	Store persistence.CheckpointStore
	Optim optim.Config
	GRPO  grpo.Options
	Train model.TrainOptions
	// MicroBatchTokens is the most tokens run through the model at once
	// (a longer sequence runs alone); gradients accumulate over the
	// micro-batches of a step.
	MicroBatchTokens int
	// PublishEvery publishes the weights every this many steps (0: every
	// step; negative: never).
	PublishEvery int
	// CheckpointEvery writes the full training state every this many
	// steps (0: DefaultCheckpointEvery; negative: only on Close and on
	// request).
	CheckpointEvery int
	// KeepPublished and KeepCheckpoints are how many publications and
	// full checkpoints survive pruning (0: the defaults).
	KeepPublished, KeepCheckpoints int
	// Seed seeds the RNG that orders sequences into micro-batches.
	Seed uint64
	// ResumeStep, when positive, resumes from that training checkpoint
	// instead of the newest one (after the newest proved corrupt, say).
	ResumeStep int64
	Logger     *slog.Logger
}

func (c *Config) defaults() error {
	switch {
	case c.RunID == "":
		return fmt.Errorf("%w: no run id", ErrConfig)
	case c.Model == nil:
		return fmt.Errorf("%w: no model", ErrConfig)
	case c.Store == nil:
		return fmt.Errorf("%w: no checkpoint store", ErrConfig)
	case c.MicroBatchTokens < 0 || c.KeepPublished < 0 || c.KeepCheckpoints < 0:
		return fmt.Errorf("%w: negative micro-batch size or keep count", ErrConfig)
	}
	if err := c.GRPO.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if c.MicroBatchTokens == 0 {
		c.MicroBatchTokens = DefaultMicroBatchTokens
	}
	if c.PublishEvery == 0 {
		c.PublishEvery = 1
	}
	if c.CheckpointEvery == 0 {
		c.CheckpointEvery = DefaultCheckpointEvery
	}
	if c.KeepPublished == 0 {
		c.KeepPublished = DefaultKeepPublished
	}
	if c.KeepCheckpoints == 0 {
		c.KeepCheckpoints = DefaultKeepCheckpoints
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// TrainRunID is the run id under which a run's full training checkpoints
// are stored.
func TrainRunID(runID string) string { return runID + "/train" }

// Learner trains one model. It is not safe for concurrent use; the actor
// serialises calls.
type Learner struct {
	cfg Config
	m   *model.Model
	tr  *model.Trainer
	opt *optim.AdamW
	pcg *rand.PCG
	rng *rand.Rand

	step, version, skipped int64
	lastCheckpoint         int64 // training step of the newest full checkpoint, -1 if none
	lastPublished          int64 // checkpoint step of the newest publication, -1 if none
	log                    *slog.Logger
}

// Open makes a Learner for cfg.Model. When the store holds training
// checkpoints of the run, it resumes from the newest (or cfg.ResumeStep);
// otherwise it starts from the model's weights at step 0, numbering
// versions after any already published for the run.
func Open(ctx context.Context, cfg Config) (*Learner, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	tr, err := cfg.Model.NewTrainer(cfg.Train)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	opt, err := optim.New(gradBackend(cfg.Model), tr.Params(), cfg.Optim)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	l := &Learner{cfg: cfg, m: cfg.Model, tr: tr, opt: opt, lastCheckpoint: -1, lastPublished: -1, log: cfg.Logger.With("run", cfg.RunID)}
	l.pcg = rand.NewPCG(cfg.Seed, cfg.Seed^0x6a09e667f3bcc909)
	l.rng = rand.New(l.pcg)

	resume := cfg.ResumeStep
	if resume <= 0 {
		latest, err := cfg.Store.Latest(ctx, TrainRunID(cfg.RunID))
		switch {
		case err == nil:
			resume = latest.GetStep()
		case errors.Is(err, persistence.ErrNotFound):
			resume = -1
		default:
			return nil, err
		}
	}
	if resume >= 0 {
		if err := l.LoadCheckpoint(ctx, resume); err != nil {
			return nil, err
		}
	}
	pub, err := cfg.Store.Latest(ctx, cfg.RunID)
	switch {
	case err == nil:
		l.lastPublished = pub.GetStep()
		if pub.GetPolicyVersion() > l.version {
			l.log.Info("learner: newer versions were published than the resume point; numbering continues after them",
				"resumed_version", l.version, "published_version", pub.GetPolicyVersion())
			l.version = pub.GetPolicyVersion()
		}
	case !errors.Is(err, persistence.ErrNotFound):
		return nil, err
	}
	l.log.Info("learner: ready", "backend", l.m.Backend().Name(), "step", l.step, "policy_version", l.version,
		"resumed", resume >= 0, "params", len(tr.Params()))
	return l, nil
}

// Model is the model being trained.
func (l *Learner) Model() *model.Model { return l.m }

// Trainer is the model's Trainer (for evaluation passes between steps).
func (l *Learner) Trainer() *model.Trainer { return l.tr }

// Step is the number of updates applied; PolicyVersion the weights'
// version; SkippedSteps the updates skipped for non-finite values.
func (l *Learner) Step() int64          { return l.step }
func (l *Learner) PolicyVersion() int64 { return l.version }
func (l *Learner) SkippedSteps() int64  { return l.skipped }

// LastCheckpoint is the step of the newest full checkpoint, -1 if none.
func (l *Learner) LastCheckpoint() int64 { return l.lastCheckpoint }

// LastPublished is the checkpoint step of the newest publication, -1 if
// none.
func (l *Learner) LastPublished() int64 { return l.lastPublished }

// RunID is the run's id.
func (l *Learner) RunID() string { return l.cfg.RunID }

// Publication names stored weights Samplers can load.
type Publication struct {
	RunID         string
	Step          int64 // checkpoint step in RunID
	PolicyVersion int64
}

// Skip reasons of a StepResult.
const (
	SkipNonFinite = "non_finite"
	SkipNoSignal  = "no_signal"
)

// StepResult reports one call of TrainStep.
type StepResult struct {
	Step, PolicyVersion int64
	// Loss is the batch's loss at the weights before the update: GRPO's,
	// or for an SFT step the mean NLL per policy token.
	Loss     float64
	GradNorm float64
	LR       float64
	Clipped  bool
	Stats    grpo.Stats
	// Skipped is "" when the update was applied, else SkipNonFinite or
	// SkipNoSignal.
	Skipped      string
	SkippedSteps int64
	MicroBatches int
	// Published is set when this step's weights were stored for Samplers.
	Published *Publication
	// Checkpointed is set when a full checkpoint was written.
	Checkpointed bool
	Duration     time.Duration
}

// Proto is the LearnerStep reply.
func (r StepResult) Proto(batchID string) *messages.LearnerStep {
	pub := int64(-1)
	if r.Published != nil {
		pub = r.Published.Step
	}
	return &messages.LearnerStep{
		BatchId: batchID, Step: r.Step, PolicyVersion: r.PolicyVersion, Loss: r.Loss, GradNorm: r.GradNorm,
		Lr: r.LR, Clipped: r.Clipped, GroupsUsed: int32(r.Stats.GroupsUsed), GroupsSkipped: int32(r.Stats.GroupsSkipped),
		PolicyTokens: int64(r.Stats.PolicyTokens), ClipFraction: r.Stats.ClipFraction(), MeanRatio: r.Stats.MeanRatio,
		Skipped: r.Skipped, SkippedSteps: r.SkippedSteps, PublishedStep: pub, Seconds: r.Duration.Seconds(),
		MicroBatches: int32(r.MicroBatches), MeanAbsLogRatio: r.Stats.MeanAbsLogRatio, MaxAbsLogRatio: r.Stats.MaxAbsLogRatio,
	}
}

// TrainStep takes one optimizer step on a batch of groups. A malformed
// batch wraps ErrBadBatch and changes nothing; a non-finite loss or
// gradient skips the update (StepResult.Skipped) and is not an error;
// storage failures while publishing or checkpointing are errors, after the
// update was applied.
func (l *Learner) TrainStep(ctx context.Context, groups []grpo.Group) (StepResult, error) {
	start := time.Now()
	plan, err := grpo.NewPlan(groups, l.cfg.GRPO)
	if err != nil {
		return StepResult{}, fmt.Errorf("%w: %w", ErrBadBatch, err)
	}
	if err := l.checkPlan(plan); err != nil {
		return StepResult{}, err
	}
	res := StepResult{Step: l.step, PolicyVersion: l.version, SkippedSteps: l.skipped}
	res.Stats.GroupsUsed, res.Stats.GroupsSkipped = plan.GroupsUsed, plan.GroupsSkipped
	if len(plan.Items) == 0 {
		res.Skipped, res.Duration = SkipNoSignal, time.Since(start)
		l.log.Info("learner: batch without signal", "groups_skipped", plan.GroupsSkipped)
		return res, nil
	}

	if err := l.useOptim(l.cfg.Optim); err != nil {
		return StepResult{}, err
	}
	l.tr.ZeroGrad()
	loss, stats, mbs, err := l.run(plan, true)
	if err != nil {
		l.tr.ZeroGrad()
		return StepResult{}, err
	}
	res.Loss, res.MicroBatches = loss, mbs
	stats.GroupsUsed, stats.GroupsSkipped = plan.GroupsUsed, plan.GroupsSkipped
	res.Stats = stats
	res, err = l.apply(ctx, res, start)
	if err != nil || res.Skipped != "" {
		return res, err
	}
	l.log.Info("learner: step", "step", l.step, "policy_version", l.version, "loss", res.Loss, "grad_norm", res.GradNorm,
		"lr", res.LR, "clip_fraction", stats.ClipFraction(), "abs_log_ratio_mean", stats.MeanAbsLogRatio, "abs_log_ratio_max", stats.MaxAbsLogRatio, "groups_used", stats.GroupsUsed, "groups_skipped", stats.GroupsSkipped,
		"tokens", stats.PolicyTokens, "micro_batches", mbs, "seconds", res.Duration.Seconds())
	return res, nil
}

// apply is what every kind of update shares once the gradients of a batch
// have accumulated (res.Loss holding its loss): a non-finite loss or
// gradient skips the update (gradients zeroed, counted); otherwise AdamW
// steps, the step count and the policy version go up by one, and the
// weights are published and checkpointed when due.
func (l *Learner) apply(ctx context.Context, res StepResult, start time.Time) (StepResult, error) {
	if math.IsNaN(res.Loss) || math.IsInf(res.Loss, 0) {
		l.tr.ZeroGrad()
		return l.skip(res, start, "loss", res.Loss), nil
	}
	rep := l.opt.Update()
	res.GradNorm, res.LR, res.Clipped = rep.GradNorm, rep.LR, rep.Clipped
	if rep.Skipped {
		return l.skip(res, start, "gradient norm", rep.GradNorm), nil
	}
	l.step++
	l.version++
	res.Step, res.PolicyVersion = l.step, l.version
	if l.cfg.PublishEvery > 0 && l.step%int64(l.cfg.PublishEvery) == 0 {
		p, err := l.Publish(ctx)
		if err != nil {
			return res, err
		}
		res.Published = &p
	}
	if l.cfg.CheckpointEvery > 0 && l.step%int64(l.cfg.CheckpointEvery) == 0 {
		if err := l.Checkpoint(ctx); err != nil {
			return res, err
		}
		res.Checkpointed = true
	}
	res.Duration = time.Since(start)
	return res, nil
}

func (l *Learner) skip(res StepResult, start time.Time, what string, value float64) StepResult {
	l.skipped++
	res.Skipped, res.SkippedSteps, res.Duration = SkipNonFinite, l.skipped, time.Since(start)
	l.log.Warn("learner: non-finite "+what+"; update skipped, gradients zeroed", "value", value,
		"step", l.step, "skipped_steps", l.skipped)
	return res
}

// Evaluate computes the batch's GRPO loss at the current weights without
// touching gradients or state.
func (l *Learner) Evaluate(groups []grpo.Group) (float64, grpo.Stats, error) {
	plan, err := grpo.NewPlan(groups, l.cfg.GRPO)
	if err != nil {
		return 0, grpo.Stats{}, fmt.Errorf("%w: %w", ErrBadBatch, err)
	}
	if err := l.checkPlan(plan); err != nil {
		return 0, grpo.Stats{}, err
	}
	loss, st, _, err := l.run(plan, false)
	st.GroupsUsed, st.GroupsSkipped = plan.GroupsUsed, plan.GroupsSkipped
	return loss, st, err
}

// checkTokens refuses sequences the model cannot run before any work;
// name(i) says which sequence i is in an error.
func (l *Learner) checkTokens(seqs [][]int32, name func(i int) string) error {
	vocab := int32(l.m.Config.VocabSize)
	for i, seq := range seqs {
		if n := l.m.Config.ContextLength; n > 0 && len(seq) > n {
			return fmt.Errorf("%w: %s has %d tokens, the model's context is %d", ErrBadBatch, name(i), len(seq), n)
		}
		for t, id := range seq {
			if id < 0 || id >= vocab {
				return fmt.Errorf("%w: %s token %d: id %d outside the vocabulary of %d", ErrBadBatch, name(i), t, id, vocab)
			}
		}
	}
	return nil
}

// checkPlan checks a plan's sequences.
func (l *Learner) checkPlan(plan *grpo.Plan) error {
	return l.checkTokens(planSeqs(plan), func(k int) string {
		return fmt.Sprintf("group %d sequence %d", plan.Items[k].Group, plan.Items[k].Index)
	})
}

// planSeqs lists the token ids of a plan's items, in item order.
func planSeqs(plan *grpo.Plan) [][]int32 {
	seqs := make([][]int32, len(plan.Items))
	for k, it := range plan.Items {
		seqs[k] = it.Seq.Tokens
	}
	return seqs
}

// run computes the plan's GRPO loss micro-batch by micro-batch,
// accumulating gradients when backward is set.
func (l *Learner) run(plan *grpo.Plan, backward bool) (float64, grpo.Stats, int, error) {
	var (
		loss  float64
		stats grpo.Stats
	)
	masks := make([][]bool, len(plan.Items))
	for k, it := range plan.Items {
		masks[k] = it.Seq.PolicyMask
	}
	mbs, err := l.pass(planSeqs(plan), masks, backward, func(k int, logp, dlogp []float32) error {
		sl, st, err := plan.SequenceLoss(k, logp, dlogp)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrBadBatch, err)
		}
		loss += sl
		stats.Add(st)
		return nil
	})
	if err != nil {
		return 0, grpo.Stats{}, mbs, err
	}
	return loss, stats, mbs, nil
}

// seqLoss fills dlogp, dLoss/dlogp of sequence k given its log-probs
// logp (as model.Trainer.LogProbs returns them), adding the sequence's
// share of the loss to the caller's total.
type seqLoss func(k int, logp, dlogp []float32) error

// pass runs seqs through the model micro-batch by micro-batch (at most
// Config.MicroBatchTokens tokens each; a longer sequence runs alone),
// asking loss for each sequence's gradient, and accumulates the gradients
// when backward is set. It is the part of a step every loss shares. The
// order of the sequences comes from the Learner's RNG (only when training,
// so that evaluation does not move it). It returns the micro-batches run.
//
// Only the log-probabilities of policy tokens are computed (masks[k][t]
// marks token t of sequence k; the loss may only read those), so a prompt's
// rows skip the output projection.
func (l *Learner) pass(seqs [][]int32, masks [][]bool, backward bool, loss seqLoss) (int, error) {
	order := make([]int, len(seqs))
	for i := range order {
		order[i] = i
	}
	if backward {
		l.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	}
	// Sequences that begin alike (a group's episodes share their prompt)
	// go next to each other, so that the Trainer computes their common
	// prefix once; a sequence costs the micro-batch only what it does not
	// share with the one before it.
	order = byPrefix(seqs, masks, order)
	cost := func(prev, k int) int {
		if prev < 0 {
			return len(seqs[k])
		}
		return len(seqs[k]) - sharedRows(seqs[prev], seqs[k], masks[prev], masks[k])
	}
	mbs := 0
	for lo := 0; lo < len(order); {
		hi, tokens := lo, 0
		for hi < len(order) {
			prev := -1
			if hi > lo {
				prev = order[hi-1]
			}
			c := cost(prev, order[hi])
			if hi > lo && tokens+c > l.cfg.MicroBatchTokens {
				break
			}
			tokens += c
			hi++
		}
		mb := make([][]int32, 0, hi-lo)
		want := make([][]bool, 0, hi-lo)
		for _, k := range order[lo:hi] {
			mb = append(mb, seqs[k])
			want = append(want, masks[k][min(1, len(masks[k])):])
		}
		logps, err := l.tr.LogProbsOf(mb, want)
		if err != nil {
			return mbs, fmt.Errorf("%w: %w", ErrBadBatch, err)
		}
		dlogps := make([][]float32, len(mb))
		for i, k := range order[lo:hi] {
			dlogps[i] = make([]float32, len(logps[i]))
			if err := loss(k, logps[i], dlogps[i]); err != nil {
				return mbs, err
			}
		}
		if backward {
			if err := l.tr.Backward(dlogps); err != nil {
				return mbs, err
			}
		}
		mbs++
		lo = hi
	}
	return mbs, nil
}

// byPrefix reorders order so that sequences with the same prompt (the
// tokens before their first policy token) are adjacent, the groups in
// the order of their first member.
func byPrefix(seqs [][]int32, masks [][]bool, order []int) []int {
	key := func(k int) string {
		n := 0
		for n < len(seqs[k]) && n < len(masks[k]) && !masks[k][n] {
			n++
		}
		s := seqs[k][:n]
		b := make([]byte, 0, 4*len(s))
		for _, t := range s {
			b = append(b, byte(t), byte(t>>8), byte(t>>16), byte(t>>24))
		}
		return string(b)
	}
	groups := map[string][]int{}
	var keys []string
	for _, k := range order {
		kk := key(k)
		if _, ok := groups[kk]; !ok {
			keys = append(keys, kk)
		}
		groups[kk] = append(groups[kk], k)
	}
	out := make([]int, 0, len(order))
	for _, kk := range keys {
		out = append(out, groups[kk]...)
	}
	return out
}

// sharedRows estimates the prefix rows the Trainer shares between two
// adjacent sequences: their common tokens before either's first policy
// token (the masks are the policy masks, one entry per token).
func sharedRows(a, b []int32, ma, mb []bool) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] && n < len(ma) && n < len(mb) && !ma[n] && !mb[n] {
		n++
	}
	if n < model.MinSharedPrefix {
		return 0
	}
	return n
}

// GroupsFromProto turns trajectory groups into GRPO groups. A
// trajectory's logprobs are either aligned with its token ids (one per
// token, ignored off the policy mask) or compact (one per policy token, in
// order).
func GroupsFromProto(groups []*messages.TrajectoryGroup) ([]grpo.Group, error) {
	out := make([]grpo.Group, 0, len(groups))
	for g, tg := range groups {
		var grp grpo.Group
		for i, tr := range tg.GetTrajectories() {
			ids, mask, lps := tr.GetTokenIds(), tr.GetPolicyMask(), tr.GetLogprobs()
			if len(mask) != len(ids) {
				return nil, fmt.Errorf("%w: group %d (task %s) trajectory %d (%s): %d mask entries for %d tokens",
					ErrBadBatch, g, tg.GetTaskId(), i, tr.GetId(), len(mask), len(ids))
			}
			aligned := lps
			if len(lps) != len(ids) {
				n := 0
				for _, m := range mask {
					if m {
						n++
					}
				}
				if len(lps) != n {
					return nil, fmt.Errorf("%w: group %d (task %s) trajectory %d (%s): %d log-probs for %d tokens of which %d are the policy's",
						ErrBadBatch, g, tg.GetTaskId(), i, tr.GetId(), len(lps), len(ids), n)
				}
				aligned = make([]float32, len(ids))
				k := 0
				for t, m := range mask {
					if m {
						aligned[t] = lps[k]
						k++
					}
				}
			}
			grp = append(grp, grpo.Sequence{Tokens: ids, PolicyMask: mask, SamplerLogProbs: aligned, Reward: tr.GetReward()})
		}
		out = append(out, grp)
	}
	return out, nil
}
