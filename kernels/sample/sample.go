// Package sample draws the next token from a row of logits: greedy,
// temperature, top-k and top-p (nucleus), from a caller-seeded random
// source so that any rollout can be replayed from its seed.
//
// It runs on the host. A device backend copies the logits row back (one row
// of the vocabulary, a few hundred kilobytes) and samples here.
package sample

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Params chooses the sampling distribution. The zero value is greedy.
type Params struct {
	// Temperature divides the logits; 0 means greedy (argmax).
	Temperature float32
	// TopK keeps only the K most likely tokens; 0 keeps all.
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability
	// (after TopK, renormalised) reaches TopP; 0 or ≥ 1 keeps all. As in
	// Hugging Face and vLLM, the token that crosses TopP is kept.
	TopP float32
}

// Sampler draws tokens with fixed Params from its random source. It reuses
// scratch space between calls, so it is not safe for concurrent use: use one
// per generating goroutine.
type Sampler struct {
	Params
	rng   *rand.Rand
	z     []float64 // logits / temperature
	order []int32   // heap of token ids, most likely first
	kept  []int32   // tokens left after truncation, most likely first
}

// New returns a Sampler drawing from rng. Seed rng from the rollout's context
// (run, step, task, sample) and keep its source (rand.PCG marshals) to
// replay a trajectory.
func New(p Params, rng *rand.Rand) *Sampler {
	if p.Temperature < 0 || p.TopK < 0 || p.TopP < 0 || math.IsNaN(float64(p.Temperature)) {
		panic(fmt.Sprintf("sample: invalid params %+v", p))
	}
	return &Sampler{Params: p, rng: rng}
}

// Sample picks the next token and returns it with its log-probability.
//
// The log-probability is that of the token under softmax(logits/T) over the
// whole vocabulary, before top-k and top-p truncation (for greedy, T = 1):
// the policy's own probability, which the learner recomputes with
// LogSoftmax on the same logits, and so what RL importance ratios and KL
// terms need. It is not the probability under the truncated distribution the
// token was actually drawn from.
func (s *Sampler) Sample(logits []float32) (token int32, logProb float32) {
	if len(logits) == 0 {
		panic("sample: empty logits")
	}
	if s.Temperature == 0 {
		tok := argmax(logits)
		return tok, float32(float64(logits[tok]) - logSumExp(logits, 1, nil))
	}
	invT := 1 / float64(s.Temperature)
	if cap(s.z) < len(logits) {
		s.z = make([]float64, len(logits))
	}
	z := s.z[:len(logits)]
	lse := logSumExp(logits, invT, z)
	if math.IsInf(lse, 0) || math.IsNaN(lse) {
		panic(fmt.Sprintf("sample: logits have no finite log-sum-exp (%v)", lse))
	}

	k := s.TopK
	if k == 0 || k > len(z) {
		k = len(z)
	}
	topP := float64(s.TopP)
	if topP <= 0 || topP >= 1 {
		topP = 1
	}
	if k == len(z) && topP == 1 {
		// The whole distribution: no ordering needed.
		r := s.rng.Float64()
		var cum float64
		last := int32(-1)
		for i, zi := range z {
			p := math.Exp(zi - lse)
			if p == 0 {
				continue
			}
			last = int32(i)
			if cum += p; r < cum {
				return int32(i), float32(zi - lse)
			}
		}
		return last, float32(z[last] - lse) // r fell in the rounding gap
	}

	// Pop tokens, most likely first, until TopK are out or, without TopK,
	// their mass reaches TopP.
	s.heapify(z)
	kept := s.kept[:0]
	var mass float64
	for len(kept) < k && len(s.order) > 0 {
		if k == len(z) && mass >= topP {
			break
		}
		tok := s.pop(z)
		kept = append(kept, tok)
		mass += math.Exp(z[tok] - lse)
	}
	if k < len(z) && topP < 1 {
		// TopP over the TopK survivors, renormalised.
		var cum float64
		for i, tok := range kept {
			if cum >= topP*mass {
				kept, mass = kept[:i], cum
				break
			}
			cum += math.Exp(z[tok] - lse)
		}
	}
	s.kept = kept
	r := s.rng.Float64() * mass
	var cum float64
	last := kept[0]
	for _, tok := range kept {
		p := math.Exp(z[tok] - lse)
		if p == 0 {
			break // the rest are impossible too
		}
		last = tok
		if cum += p; r < cum {
			return tok, float32(z[tok] - lse)
		}
	}
	return last, float32(z[last] - lse) // r fell in the rounding gap
}

// argmax returns the first index of the largest logit.
func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// logSumExp returns log Σ exp(x·scale), storing x·scale in z when z is not
// nil.
func logSumExp(x []float32, scale float64, z []float64) float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = max(m, float64(v)*scale)
	}
	var sum float64
	for i, v := range x {
		zi := float64(v) * scale
		if z != nil {
			z[i] = zi
		}
		sum += math.Exp(zi - m)
	}
	return m + math.Log(sum)
}

// The heap orders token ids by z descending, then id ascending, so that ties
// go to the lower id as argmax's do.

func (s *Sampler) heapify(z []float64) {
	if cap(s.order) < len(z) {
		s.order = make([]int32, len(z))
	}
	s.order = s.order[:len(z)]
	for i := range s.order {
		s.order[i] = int32(i)
	}
	for i := len(z)/2 - 1; i >= 0; i-- {
		s.down(z, i)
	}
}

func (s *Sampler) pop(z []float64) int32 {
	h := s.order
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	s.order = h[:n]
	s.down(z, 0)
	return top
}

func (s *Sampler) down(z []float64, i int) {
	h := s.order
	before := func(a, b int32) bool { return z[a] > z[b] || (z[a] == z[b] && a < b) }
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		c := l
		if r := l + 1; r < len(h) && before(h[r], h[l]) {
			c = r
		}
		if !before(h[c], h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}
