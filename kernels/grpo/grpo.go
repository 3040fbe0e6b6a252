// Package grpo turns groups of scored trajectories into a policy-gradient
// loss: Group Relative Policy Optimisation, as the FrogNano recipe uses it.
// It is pure Go over plain slices; the Learner (actors/learner) feeds it the
// policy's per-token log-probabilities from model.Trainer.LogProbs and hands
// the per-token gradient it returns to Trainer.Backward.
//
// The loss, read top to bottom:
//
//  1. Advantages. A group is the G trajectories sampled for one task. Each
//     sequence's advantage is its reward minus the group's mean reward,
//     divided by the group's standard deviation when Options.ScaleByStd is
//     set. A group whose rewards are all equal carries no signal (every
//     advantage is zero); it is skipped and counted in Stats.GroupsSkipped.
//  2. Ratio. For every policy token (PolicyMask true; prompt and tool-output
//     tokens never contribute) r = exp(logp − samplerLogp), the importance
//     ratio between the policy being trained and the sampler that produced
//     the token (an older version, or the same weights computed by another
//     engine).
//  3. Trust region, one of:
//     - TrustPPOClip: the PPO surrogate −min(r·A, clip(r, 1−EpsLow,
//     1+EpsHigh)·A) with separate low and high bounds (DAPO's
//     "clip-higher": EpsHigh > EpsLow leaves room for unlikely tokens to
//     grow);
//     - TrustTVMask: FrogNano's binary total-variation mask: a token whose
//     |r − 1| exceeds TVDelta contributes nothing, the others −r·A.
//  4. KL. None by default. With KLCoef > 0, KLCoef times the k3 estimate
//     of KL(policy ‖ sampler) per token, exp(s−l) − (s−l) − 1, is added.
//  5. Normalisation. NormTokenMean (the default, DAPO's token-level loss)
//     divides the sum over every policy token of the used groups by their
//     count, so long sequences weigh by their length; NormSequenceMean
//     (the original GRPO) averages each sequence's tokens first, then the
//     sequences.
//
// Departures from textbook GRPO: no KL term by default, token-level
// normalisation by default, std scaling optional (Dr. GRPO drops it), and
// the ratio is taken against the sampler's own recorded log-probs rather
// than a recomputed "old policy", so engine mismatch between sampler and
// learner falls inside the trust region too.
//
// Every per-token quantity depends only on that token's log-probability and
// on constants known before any forward pass (advantages and the
// normalising count come from rewards and masks), so a Plan can be made
// once for a batch and its sequences' losses computed micro-batch by
// micro-batch with exact gradient accumulation.
package grpo

import (
	"errors"
	"fmt"
	"math"
)

// ErrInvalid is wrapped by every error about malformed input.
var ErrInvalid = errors.New("grpo: invalid input")

// Trust selects how the importance ratio is kept in a trust region.
type Trust int

const (
	// TrustPPOClip is PPO's clipped surrogate with bounds [1−EpsLow,
	// 1+EpsHigh].
	TrustPPOClip Trust = iota
	// TrustTVMask drops tokens whose ratio leaves [1−TVDelta, 1+TVDelta]
	// (a binary total-variation mask).
	TrustTVMask
)

func (t Trust) String() string {
	switch t {
	case TrustPPOClip:
		return "ppo-clip"
	case TrustTVMask:
		return "tv-mask"
	}
	return fmt.Sprintf("Trust(%d)", int(t))
}

// ParseTrust reads "ppo-clip" or "tv-mask".
func ParseTrust(s string) (Trust, error) {
	switch s {
	case "ppo-clip":
		return TrustPPOClip, nil
	case "tv-mask":
		return TrustTVMask, nil
	}
	return 0, fmt.Errorf("%w: trust region %q (want ppo-clip or tv-mask)", ErrInvalid, s)
}

// Norm selects how token losses are averaged.
type Norm int

const (
	// NormTokenMean divides the sum of all policy tokens' losses by their
	// number (over the used groups of the batch).
	NormTokenMean Norm = iota
	// NormSequenceMean averages each sequence over its policy tokens, then
	// averages the sequences of the used groups.
	NormSequenceMean
)

func (n Norm) String() string {
	switch n {
	case NormTokenMean:
		return "token-mean"
	case NormSequenceMean:
		return "sequence-mean"
	}
	return fmt.Sprintf("Norm(%d)", int(n))
}

// ParseNorm reads "token-mean" or "sequence-mean".
func ParseNorm(s string) (Norm, error) {
	switch s {
	case "token-mean":
		return NormTokenMean, nil
	case "sequence-mean":
		return NormSequenceMean, nil
	}
	return 0, fmt.Errorf("%w: normalisation %q (want token-mean or sequence-mean)", ErrInvalid, s)
}

// Options name every choice the loss makes. DefaultOptions gives
// FrogNano's: PPO clipping with DAPO's bounds, std scaling, token mean, no
// KL.
type Options struct {
	// ScaleByStd divides each advantage by its group's reward standard
	// deviation (population std) plus StdEps.
	ScaleByStd bool
	// StdEps keeps the division finite for groups of nearly equal rewards.
	StdEps float64
	// Trust is the trust-region scheme.
	Trust Trust
	// EpsLow and EpsHigh bound the ratio under TrustPPOClip:
	// [1−EpsLow, 1+EpsHigh].
	EpsLow, EpsHigh float64
	// TVDelta is the largest |ratio − 1| a token may have under
	// TrustTVMask and still contribute.
	TVDelta float64
	// KLCoef weighs a k3 KL(policy ‖ sampler) penalty per token; 0 (the
	// default) leaves it out.
	KLCoef float64
	// Norm is the loss normalisation.
	Norm Norm
}

// DefaultOptions are FrogNano's defaults.
func DefaultOptions() Options {
	return Options{ScaleByStd: true, StdEps: 1e-6, Trust: TrustPPOClip, EpsLow: 0.2, EpsHigh: 0.28, TVDelta: 0.2, Norm: NormTokenMean}
}

// Validate reports options that make no sense.
func (o Options) Validate() error {
	switch {
	case o.StdEps < 0 || math.IsNaN(o.StdEps):
		return fmt.Errorf("%w: StdEps %v is negative", ErrInvalid, o.StdEps)
	case o.Trust != TrustPPOClip && o.Trust != TrustTVMask:
		return fmt.Errorf("%w: unknown trust region %v", ErrInvalid, o.Trust)
	case o.Trust == TrustPPOClip && !(o.EpsLow >= 0 && o.EpsLow < 1 && o.EpsHigh >= 0):
		return fmt.Errorf("%w: PPO clip bounds EpsLow %v (want [0, 1)) and EpsHigh %v (want ≥ 0)", ErrInvalid, o.EpsLow, o.EpsHigh)
	case o.Trust == TrustTVMask && !(o.TVDelta > 0):
		return fmt.Errorf("%w: TVDelta %v must be positive", ErrInvalid, o.TVDelta)
	case !(o.KLCoef >= 0):
		return fmt.Errorf("%w: KLCoef %v is negative", ErrInvalid, o.KLCoef)
	case o.Norm != NormTokenMean && o.Norm != NormSequenceMean:
		return fmt.Errorf("%w: unknown normalisation %v", ErrInvalid, o.Norm)
	}
	return nil
}

// Sequence is one trajectory as the loss sees it. Tokens holds every id of
// the episode (prompt, policy turns, tool results); PolicyMask and
// SamplerLogProbs are indexed like Tokens: PolicyMask[t] says whether the
// policy sampled Tokens[t], and SamplerLogProbs[t] is the log-probability
// the sampler gave it (ignored where PolicyMask is false). Tokens[0] has no
// context and cannot be a policy token. A sequence may have no tokens at
// all (an episode that ended before its prompt fitted, as context_full
// does): its reward still counts in its group's mean and std, and it adds
// nothing to the loss.
type Sequence struct {
	Tokens          []int32
	PolicyMask      []bool
	SamplerLogProbs []float32
	Reward          float64
}

// Group is the sequences sampled for one task.
type Group []Sequence

// Item is a sequence of a used group with what the loss needs of it.
type Item struct {
	Group, Index int // position in the batch
	Seq          *Sequence
	Advantage    float64
	// Weight multiplies each policy token's loss: 1/(policy tokens of the
	// batch) under NormTokenMean, 1/(policy tokens of this sequence ×
	// sequences) under NormSequenceMean.
	Weight float64
}

// Plan is a batch with its advantages and normalisation fixed; it holds no
// log-probabilities yet.
type Plan struct {
	Options Options
	// Items are the sequences of the used groups that have policy tokens,
	// in batch order.
	Items []Item
	// GroupsUsed and GroupsSkipped count groups with and without reward
	// variance; PolicyTokens counts the policy tokens of the Items.
	GroupsUsed, GroupsSkipped int
	PolicyTokens              int
}

// NewPlan validates a batch and computes its advantages and weights.
func NewPlan(groups []Group, o Options) (*Plan, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	p := &Plan{Options: o}
	sequences := 0
	for g, grp := range groups {
		if len(grp) == 0 {
			return nil, fmt.Errorf("%w: group %d is empty", ErrInvalid, g)
		}
		for i := range grp {
			if err := checkSequence(&grp[i]); err != nil {
				return nil, fmt.Errorf("group %d sequence %d: %w", g, i, err)
			}
		}
		mean, std, equal := stats(grp)
		if equal {
			p.GroupsSkipped++
			continue
		}
		p.GroupsUsed++
		for i := range grp {
			s := &grp[i]
			n := policyTokens(s)
			if n == 0 {
				continue
			}
			a := s.Reward - mean
			if o.ScaleByStd {
				a /= std + o.StdEps
			}
			p.Items = append(p.Items, Item{Group: g, Index: i, Seq: s, Advantage: a, Weight: float64(n)})
			p.PolicyTokens += n
			sequences++
		}
	}
	for i := range p.Items {
		it := &p.Items[i]
		switch o.Norm {
		case NormTokenMean:
			it.Weight = 1 / float64(p.PolicyTokens)
		case NormSequenceMean:
			it.Weight = 1 / (it.Weight * float64(sequences))
		}
	}
	return p, nil
}

func checkSequence(s *Sequence) error {
	n := len(s.Tokens)
	switch {
	case len(s.PolicyMask) != n:
		return fmt.Errorf("%w: %d mask entries for %d tokens", ErrInvalid, len(s.PolicyMask), n)
	case len(s.SamplerLogProbs) != n:
		return fmt.Errorf("%w: %d sampler log-probs for %d tokens", ErrInvalid, len(s.SamplerLogProbs), n)
	case n > 0 && s.PolicyMask[0]:
		return fmt.Errorf("%w: the first token has no context and cannot be a policy token", ErrInvalid)
	case math.IsNaN(s.Reward) || math.IsInf(s.Reward, 0):
		return fmt.Errorf("%w: reward %v", ErrInvalid, s.Reward)
	}
	for t, m := range s.PolicyMask {
		if m {
			lp := float64(s.SamplerLogProbs[t])
			if math.IsNaN(lp) || lp > maxLogProb || math.IsInf(lp, 0) {
				return fmt.Errorf("%w: sampler log-prob %v at token %d is not a finite log-probability", ErrInvalid, lp, t)
			}
		}
	}
	return nil
}

// maxLogProb tolerates the rounding of a log-softmax computed in float32,
// which can come out a hair above zero for a near-certain token.
const maxLogProb = 1e-3

func policyTokens(s *Sequence) int {
	n := 0
	for _, m := range s.PolicyMask {
		if m {
			n++
		}
	}
	return n
}

// stats returns a group's mean and population standard deviation of
// rewards, and whether all rewards are equal.
func stats(g Group) (mean, std float64, equal bool) {
	equal = true
	for _, s := range g {
		mean += s.Reward
		equal = equal && s.Reward == g[0].Reward
	}
	mean /= float64(len(g))
	for _, s := range g {
		d := s.Reward - mean
		std += d * d
	}
	return mean, math.Sqrt(std / float64(len(g))), equal
}

// Stats describe a loss computation.
type Stats struct {
	GroupsUsed, GroupsSkipped int
	Sequences                 int     // sequences that contributed
	PolicyTokens              int     // tokens that were candidates for the loss
	Clipped                   int     // tokens clipped (PPO) or masked out (TV) with zero gradient
	MeanRatio                 float64 // mean of r over the policy tokens
	KL                        float64 // mean k3 estimate over the policy tokens (computed even when KLCoef is 0)
	// MeanAbsLogRatio and MaxAbsLogRatio are the mean and largest
	// |log r| = |logp − sampler logp| over the policy tokens: how far the
	// Sampler's log-probabilities are from the policy's (a quantized
	// Sampler's mismatch, plus the policy's moves since a stale group was
	// sampled).
	MeanAbsLogRatio, MaxAbsLogRatio float64
}

// ClipFraction is Clipped / PolicyTokens.
func (s Stats) ClipFraction() float64 {
	if s.PolicyTokens == 0 {
		return 0
	}
	return float64(s.Clipped) / float64(s.PolicyTokens)
}

// Add accumulates the token counts and sums of another micro-batch's
// stats (MeanRatio and KL weighted by tokens); group counts are the
// plan's and are not added.
func (s *Stats) Add(o Stats) {
	n := s.PolicyTokens + o.PolicyTokens
	if n > 0 {
		s.MeanRatio = (s.MeanRatio*float64(s.PolicyTokens) + o.MeanRatio*float64(o.PolicyTokens)) / float64(n)
		s.KL = (s.KL*float64(s.PolicyTokens) + o.KL*float64(o.PolicyTokens)) / float64(n)
		s.MeanAbsLogRatio = (s.MeanAbsLogRatio*float64(s.PolicyTokens) + o.MeanAbsLogRatio*float64(o.PolicyTokens)) / float64(n)
	}
	s.MaxAbsLogRatio = math.Max(s.MaxAbsLogRatio, o.MaxAbsLogRatio)
	s.PolicyTokens = n
	s.Sequences += o.Sequences
	s.Clipped += o.Clipped
}

// SequenceLoss computes item k's share of the batch loss from the policy's
// log-probabilities logp (as model.Trainer.LogProbs returns them: logp[j] =
// log p(Tokens[j+1] | Tokens[:j+1]), len(Tokens)−1 entries) and writes
// dL/dlogp into dlogp (same length; zero off the policy tokens).
func (p *Plan) SequenceLoss(k int, logp, dlogp []float32) (float64, Stats, error) {
	it := &p.Items[k]
	s := it.Seq
	n := len(s.Tokens) - 1
	if len(logp) != n || len(dlogp) != n {
		return 0, Stats{}, fmt.Errorf("%w: group %d sequence %d: %d log-probs and %d gradient slots for %d tokens (want %d)",
			ErrInvalid, it.Group, it.Index, len(logp), len(dlogp), n+1, n)
	}
	o := p.Options
	a, w := it.Advantage, it.Weight
	var loss, ratioSum, klSum, absSum float64
	st := Stats{Sequences: 1}
	for j := range dlogp {
		dlogp[j] = 0
		t := j + 1
		if !s.PolicyMask[t] {
			continue
		}
		st.PolicyTokens++
		l, sl := float64(logp[j]), float64(s.SamplerLogProbs[t])
		r := math.Exp(l - sl)
		ratioSum += r
		absSum += math.Abs(l - sl)
		st.MaxAbsLogRatio = math.Max(st.MaxAbsLogRatio, math.Abs(l-sl))
		var tokLoss, grad float64 // grad: d tokLoss / d l
		switch o.Trust {
		case TrustPPOClip:
			clipped := (a > 0 && r > 1+o.EpsHigh) || (a < 0 && r < 1-o.EpsLow)
			if clipped {
				tokLoss = -math.Min(r, 1+o.EpsHigh) * a
				if a < 0 {
					tokLoss = -math.Max(r, 1-o.EpsLow) * a
				}
				st.Clipped++
			} else {
				tokLoss, grad = -r*a, -r*a
			}
		case TrustTVMask:
			if math.Abs(r-1) > o.TVDelta {
				st.Clipped++
			} else {
				tokLoss, grad = -r*a, -r*a
			}
		}
		d := sl - l
		kl := math.Exp(d) - d - 1
		klSum += kl
		if o.KLCoef > 0 {
			tokLoss += o.KLCoef * kl
			grad += o.KLCoef * (1 - math.Exp(d))
		}
		loss += w * tokLoss
		dlogp[j] = float32(w * grad)
	}
	if st.PolicyTokens > 0 {
		st.MeanRatio = ratioSum / float64(st.PolicyTokens)
		st.KL = klSum / float64(st.PolicyTokens)
		st.MeanAbsLogRatio = absSum / float64(st.PolicyTokens)
	}
	return loss, st, nil
}

// Result is the loss of a whole batch.
type Result struct {
	Loss float64
	// DLogP[k] is dL/dlogp for Plan.Items[k], aligned with its log-probs.
	DLogP [][]float32
	Stats Stats
}

// Loss computes the loss of every item at once; logps[k] are Items[k]'s
// log-probabilities. It is SequenceLoss summed, for callers (and tests)
// that hold the whole batch.
func (p *Plan) Loss(logps [][]float32) (Result, error) {
	if len(logps) != len(p.Items) {
		return Result{}, fmt.Errorf("%w: %d log-prob rows for %d sequences", ErrInvalid, len(logps), len(p.Items))
	}
	res := Result{DLogP: make([][]float32, len(p.Items))}
	for k := range p.Items {
		res.DLogP[k] = make([]float32, len(logps[k]))
		l, st, err := p.SequenceLoss(k, logps[k], res.DLogP[k])
		if err != nil {
			return Result{}, err
		}
		res.Loss += l
		res.Stats.Add(st)
	}
	res.Stats.GroupsUsed, res.Stats.GroupsSkipped = p.GroupsUsed, p.GroupsSkipped
	return res, nil
}
