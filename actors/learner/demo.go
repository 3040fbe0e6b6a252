package learner

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/frognano/frognano/kernels/grpo"
	"github.com/frognano/frognano/kernels/model"
	"github.com/frognano/frognano/kernels/optim"
	"github.com/frognano/frognano/kernels/tokenizer"
	"github.com/frognano/frognano/persistence"
)

// DemoCompletion is one fixed answer of the demo with its reward.
type DemoCompletion struct {
	Text   string
	Reward float64
}

// DemoPrompt and DemoCompletions are the demo's batch: one question, two
// right answers rewarded 1, two wrong ones rewarded 0.
var (
	DemoPrompt      = "What is the capital of France? Answer in one sentence."
	DemoCompletions = []DemoCompletion{
		{"The capital of France is Paris.", 1},
		{"Paris is the capital of France.", 1},
		{"The capital of France is Lyon.", 0},
		{"The capital of France is Berlin.", 0},
	}
)

// DemoResult is what one GRPO step did to the demo batch.
type DemoResult struct {
	LossBefore, LossAfter         float64
	RewardedBefore, RewardedAfter float64 // mean log-prob per policy token
	OtherBefore, OtherAfter       float64
	Step                          StepResult
}

// DemoBatch renders the demo's prompt with each completion in m's chat
// template, as the sampler would have produced them: the assistant's
// tokens (and its end-of-turn token) are the policy's, their sampler
// log-probs are the model's own (on-policy).
func DemoBatch(m *model.Model, prompt string, completions []DemoCompletion) ([]grpo.Group, error) {
	tok := m.Tokenizer
	text, err := tokenizer.RenderChat([]tokenizer.Message{{Role: "user", Content: prompt}},
		tokenizer.ChatOptions{DefaultSystem: tokenizer.DefaultSystemFor(tok.ChatTemplate()), AddGenerationPrompt: true})
	if err != nil {
		return nil, err
	}
	promptIDs := tok.Encode(text)
	end, ok := tok.TokenID("<|im_end|>")
	if !ok {
		end = tok.EOS()
	}
	tr, err := m.NewTrainer(model.TrainOptions{})
	if err != nil {
		return nil, err
	}
	var g grpo.Group
	for _, c := range completions {
		ids := append(append(append([]int32(nil), promptIDs...), tok.Encode(c.Text)...), end)
		s := grpo.Sequence{Tokens: ids, PolicyMask: make([]bool, len(ids)), SamplerLogProbs: make([]float32, len(ids)), Reward: c.Reward}
		lp, err := tr.LogProbs([][]int32{ids})
		if err != nil {
			return nil, err
		}
		for t := len(promptIDs); t < len(ids); t++ {
			s.PolicyMask[t] = true
			s.SamplerLogProbs[t] = lp[0][t-1]
		}
		g = append(g, s)
	}
	return []grpo.Group{g}, nil
}

// meanLogProbs returns the mean policy-token log-prob of rewarded and of
// unrewarded sequences under the Trainer's current weights.
func meanLogProbs(tr *model.Trainer, groups []grpo.Group) (rewarded, other float64, err error) {
	var nr, no int
	for _, g := range groups {
		for _, s := range g {
			lp, err := tr.LogProbs([][]int32{s.Tokens})
			if err != nil {
				return 0, 0, err
			}
			for j, v := range lp[0] {
				if !s.PolicyMask[j+1] {
					continue
				}
				if s.Reward > 0 {
					rewarded += float64(v)
					nr++
				} else {
					other += float64(v)
					no++
				}
			}
		}
	}
	if nr == 0 || no == 0 {
		return 0, 0, fmt.Errorf("learner: the demo batch needs rewarded and unrewarded sequences")
	}
	return rewarded / float64(nr), other / float64(no), nil
}

// Demo takes one GRPO step with AdamW at learning rate lr on the demo
// batch and measures the batch's loss and the mean log-probs of rewarded
// and unrewarded answers before and after. The weights are changed in
// place; nothing is stored.
func Demo(ctx context.Context, m *model.Model, lr float64) (DemoResult, error) {
	groups, err := DemoBatch(m, DemoPrompt, DemoCompletions)
	if err != nil {
		return DemoResult{}, err
	}
	oc := optim.DefaultConfig()
	oc.LR = lr
	l, err := Open(ctx, Config{RunID: "demo", Model: m, Store: persistence.NewMemory().Checkpoints(), Optim: oc,
		GRPO: grpo.DefaultOptions(), PublishEvery: -1, CheckpointEvery: -1})
	if err != nil {
		return DemoResult{}, err
	}
	var r DemoResult
	if r.LossBefore, _, err = l.Evaluate(groups); err != nil {
		return r, err
	}
	if r.RewardedBefore, r.OtherBefore, err = meanLogProbs(l.Trainer(), groups); err != nil {
		return r, err
	}
	if r.Step, err = l.TrainStep(ctx, groups); err != nil {
		return r, err
	}
	if r.Step.Skipped != "" {
		return r, fmt.Errorf("learner: the demo step was skipped (%s)", r.Step.Skipped)
	}
	if r.LossAfter, _, err = l.Evaluate(groups); err != nil {
		return r, err
	}
	r.RewardedAfter, r.OtherAfter, err = meanLogProbs(l.Trainer(), groups)
	return r, err
}

// BenchResult is the training throughput of one configuration.
type BenchResult struct {
	Batch, SeqLen, Steps int
	PerStep              []time.Duration
	// CPUPerStep is the process CPU time (user + system) of each step.
	CPUPerStep      []time.Duration
	TokensPerSecond float64 // batch·seqLen / median step time
	Backend         string
}

// Bench measures training steps (forward, backward, AdamW) on random
// sequences of batch × seqLen tokens, the last answer of each policy
// tokens (answer 0: all but the first, as a sequence of policy tokens
// after a one-token prompt), after one warm-up step; TokensPerSecond
// counts every token of the batch over the median step. With group > 1
// the sequences come in groups of that many sharing their prompt, as a
// GRPO group's episodes do (the Trainer computes a shared prompt once
// unless train.NoPrefixSharing).
func Bench(ctx context.Context, m *model.Model, batch, seqLen, answer, group, steps int, train model.TrainOptions) (BenchResult, error) {
	if batch < 2 || seqLen < 2 || steps < 1 || answer < 0 || answer >= seqLen {
		return BenchResult{}, fmt.Errorf("learner: bench needs a batch of at least 2, sequences of at least 2 tokens, an answer shorter than the sequence and a step")
	}
	if answer == 0 {
		answer = seqLen - 1
	}
	oc := optim.DefaultConfig()
	oc.LR = 1e-7
	l, err := Open(ctx, Config{RunID: "bench", Model: m, Store: persistence.NewMemory().Checkpoints(), Optim: oc,
		GRPO: grpo.DefaultOptions(), Train: train, MicroBatchTokens: batch * seqLen, PublishEvery: -1, CheckpointEvery: -1})
	if err != nil {
		return BenchResult{}, err
	}
	r := rand.New(rand.NewPCG(1, 2))
	var g grpo.Group
	for i := range batch {
		s := grpo.Sequence{Tokens: make([]int32, seqLen), PolicyMask: make([]bool, seqLen), SamplerLogProbs: make([]float32, seqLen), Reward: float64(i % 2)}
		for t := range s.Tokens {
			s.Tokens[t] = int32(r.IntN(m.Config.VocabSize))
			s.PolicyMask[t] = t >= seqLen-answer
			s.SamplerLogProbs[t] = -11 // about log(1/vocab): ratios near one
		}
		if group > 1 && i%group != 0 {
			// The group's episodes share their prompt.
			copy(s.Tokens[:seqLen-answer], g[i-i%group].Tokens)
		}
		g = append(g, s)
	}
	groups := []grpo.Group{g}
	res := BenchResult{Batch: batch, SeqLen: seqLen, Steps: steps, Backend: m.Backend().Name()}
	for i := range steps + 1 {
		start, cpu0 := time.Now(), CPUTime()
		sr, err := l.TrainStep(ctx, groups)
		if err != nil {
			return res, err
		}
		if sr.Skipped != "" {
			return res, fmt.Errorf("learner: bench step skipped (%s)", sr.Skipped)
		}
		if i > 0 {
			res.PerStep = append(res.PerStep, time.Since(start))
			res.CPUPerStep = append(res.CPUPerStep, CPUTime()-cpu0)
		}
	}
	sorted := append([]time.Duration(nil), res.PerStep...)
	for i := range sorted {
		for j := i + 1; j < len(sorted); j++ {
			if sorted[j] < sorted[i] {
				sorted[i], sorted[j] = sorted[j], sorted[i]
			}
		}
	}
	res.TokensPerSecond = float64(batch*seqLen) / sorted[len(sorted)/2].Seconds()
	return res, nil
}
