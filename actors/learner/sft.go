package learner

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/frognano/frognano/kernels/optim"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// Supervised fine-tuning (the warm start): where the base policy almost
// never solves a task, GRPO has no signal, so the run first imitates
// verified demonstrations — the synthesizer's own gold fixes played
// through the harness — with the loss on the answer tokens only. An SFT
// step is an update like a GRPO step: same micro-batches, AdamW, skip of
// non-finite values, step and version numbering, publication and
// checkpoints. Only the loss differs:
//
//	loss = −(1/N) Σ_{policy tokens t} log p(x_t | x_<t)
//
// over the N policy tokens of the whole batch (a token-level mean, so a
// long answer weighs by its length), hence dL/dlogp = −1/N on policy tokens
// and 0 elsewhere: prompt and tool-output tokens get no gradient.
//
// The learning rate. SFT wants a rate one or two orders above RL's, so an
// SFT step runs AdamW with its own rate and schedule (SFTOptions) and a
// GRPO step with Config.Optim's. The optimizer's moments and step carry
// across (one AdamW, its hyper-parameters switched; a checkpoint holds its
// state, and the request its hyper-parameters, so a resume is exact). A
// departure from a fresh optimizer per stage: after the warm start the
// second moments still hold the SFT gradients' scale for a few hundred
// steps (β2 = 0.999), which damps the first GRPO updates if those
// gradients are smaller — the conservative direction.

// SFTSequence is one demonstration: token ids and which of them the policy
// wrote (the loss is on those only; the first token never is).
type SFTSequence struct {
	Tokens     []int32
	PolicyMask []bool
}

// SFTOptions are the optimizer's settings for SFT steps: peak rate LR, a
// linear warm-up over WarmupSteps and, when TotalSteps is past the
// warm-up, a cosine decay to a tenth of LR at optimizer step TotalSteps (steps count from the
// Learner's first update, so a warm start before any GRPO step has its
// schedule over its own steps).
type SFTOptions struct {
	LR          float64
	WarmupSteps int
	TotalSteps  int
}

// optim is AdamW's configuration for SFT steps: the Learner's, with the
// SFT rate and schedule.
func (o SFTOptions) optim(base optim.Config) optim.Config {
	c := base
	c.LR = o.LR
	c.Schedule = optim.Schedule{Kind: optim.Constant, WarmupSteps: o.WarmupSteps}
	if o.TotalSteps > o.WarmupSteps+1 {
		c.Schedule = optim.Schedule{Kind: optim.Cosine, WarmupSteps: o.WarmupSteps, TotalSteps: o.TotalSteps, MinRatio: 0.1}
	}
	return c
}

// useOptim switches AdamW to the hyper-parameters c, keeping its moments
// and step; a no-op when they are already c's.
func (l *Learner) useOptim(c optim.Config) error {
	cur := l.opt.Config()
	if cur.LR == c.LR && cur.Schedule == c.Schedule {
		return nil
	}
	next, err := optim.New(gradBackend(l.m), l.tr.Params(), c)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadBatch, err)
	}
	if err := next.SetState(l.opt.State()); err != nil {
		return err
	}
	l.opt = next
	l.log.Info("learner: optimizer settings", "lr", c.LR, "schedule", c.Schedule.Kind, "warmup_steps", c.Schedule.WarmupSteps,
		"total_steps", c.Schedule.TotalSteps, "optimizer_step", next.Step())
	return nil
}

// checkSFT refuses a batch that cannot be trained on.
func (l *Learner) checkSFT(seqs []SFTSequence) ([][]int32, int, error) {
	if len(seqs) == 0 {
		return nil, 0, fmt.Errorf("%w: no demonstrations", ErrBadBatch)
	}
	ids := make([][]int32, len(seqs))
	n := 0
	for i, s := range seqs {
		switch {
		case len(s.PolicyMask) != len(s.Tokens):
			return nil, 0, fmt.Errorf("%w: demonstration %d: %d mask entries for %d tokens", ErrBadBatch, i, len(s.PolicyMask), len(s.Tokens))
		case len(s.Tokens) == 0:
			return nil, 0, fmt.Errorf("%w: demonstration %d has no tokens", ErrBadBatch, i)
		case s.PolicyMask[0]:
			return nil, 0, fmt.Errorf("%w: demonstration %d: the first token has no context and cannot be a policy token", ErrBadBatch, i)
		}
		for _, m := range s.PolicyMask {
			if m {
				n++
			}
		}
		ids[i] = s.Tokens
	}
	if n == 0 {
		return nil, 0, fmt.Errorf("%w: %d demonstrations without a policy token", ErrBadBatch, len(seqs))
	}
	return ids, n, l.checkTokens(ids, func(i int) string { return fmt.Sprintf("demonstration %d", i) })
}

// sftPass computes the batch's mean negative log-likelihood over its n
// policy tokens, accumulating gradients when backward is set.
func (l *Learner) sftPass(seqs []SFTSequence, ids [][]int32, n int, backward bool) (float64, int, error) {
	var nll float64
	g := float32(-1 / float64(n))
	masks := make([][]bool, len(seqs))
	for k := range seqs {
		masks[k] = seqs[k].PolicyMask
	}
	mbs, err := l.pass(ids, masks, backward, func(k int, logp, dlogp []float32) error {
		mask := seqs[k].PolicyMask
		for j, v := range logp {
			if mask[j+1] {
				nll -= float64(v)
				dlogp[j] = g
			}
		}
		return nil
	})
	return nll / float64(n), mbs, err
}

// SFTStep takes one supervised step on a batch of demonstrations with
// AdamW at o's rate: the loss is the mean negative log-likelihood of every
// policy token of the batch (StepResult.Loss, at the weights before the
// update; Stats.PolicyTokens and Stats.Sequences count what it covered).
// Its rules are TrainStep's: a malformed batch wraps ErrBadBatch and
// changes nothing; a non-finite loss or gradient skips the update; an
// applied one bumps the step and the policy version, and publishes and
// checkpoints when due.
func (l *Learner) SFTStep(ctx context.Context, seqs []SFTSequence, o SFTOptions) (StepResult, error) {
	start := time.Now()
	ids, n, err := l.checkSFT(seqs)
	if err != nil {
		return StepResult{}, err
	}
	c := o.optim(l.cfg.Optim)
	if !(o.LR > 0) || o.LR > 1 {
		return StepResult{}, fmt.Errorf("%w: SFT learning rate %v: want in (0, 1]", ErrBadBatch, o.LR)
	}
	if err := c.Validate(); err != nil {
		return StepResult{}, fmt.Errorf("%w: SFT schedule: %w", ErrBadBatch, err)
	}
	if err := l.useOptim(c); err != nil {
		return StepResult{}, err
	}
	res := StepResult{Step: l.step, PolicyVersion: l.version, SkippedSteps: l.skipped}
	l.tr.ZeroGrad()
	loss, mbs, err := l.sftPass(seqs, ids, n, true)
	if err != nil {
		l.tr.ZeroGrad()
		return StepResult{}, err
	}
	res.Loss, res.MicroBatches = loss, mbs
	res.Stats.PolicyTokens, res.Stats.Sequences = n, len(seqs)
	res, err = l.apply(ctx, res, start)
	if err != nil || res.Skipped != "" {
		return res, err
	}
	l.log.Info("learner: sft step", "step", l.step, "policy_version", l.version, "nll", res.Loss, "grad_norm", res.GradNorm,
		"lr", res.LR, "sequences", len(seqs), "tokens", n, "micro_batches", mbs, "seconds", res.Duration.Seconds())
	return res, nil
}

// SFTEvaluate is the batch's mean negative log-likelihood per policy token
// at the current weights, and the number of policy tokens, without
// touching gradients or state.
func (l *Learner) SFTEvaluate(seqs []SFTSequence) (float64, int, error) {
	ids, n, err := l.checkSFT(seqs)
	if err != nil {
		return 0, 0, err
	}
	nll, _, err := l.sftPass(seqs, ids, n, false)
	if err == nil && (math.IsNaN(nll) || math.IsInf(nll, 0)) {
		err = fmt.Errorf("learner: non-finite log-likelihood %v", nll)
	}
	return nll, n, err
}

// SFTFromProto turns trajectories into demonstrations: their token ids
// and policy masks.
func SFTFromProto(trajs []*records.Trajectory) ([]SFTSequence, error) {
	out := make([]SFTSequence, 0, len(trajs))
	for i, tr := range trajs {
		ids, mask := tr.GetTokenIds(), tr.GetPolicyMask()
		if len(mask) != len(ids) {
			return nil, fmt.Errorf("%w: trajectory %d (%s): %d mask entries for %d tokens", ErrBadBatch, i, tr.GetId(), len(mask), len(ids))
		}
		out = append(out, SFTSequence{Tokens: ids, PolicyMask: mask})
	}
	return out, nil
}
