package model

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/frognano/frognano/kernels/sample"
)

// Sequence is a cache together with the tokens it holds, so that a growing
// conversation reuses what is cached: Feed runs only the tokens past the
// longest prefix shared with what was fed before.
type Sequence struct {
	Cache  *Cache
	Tokens []int32
}

// NewSequence makes an empty sequence of up to capacity tokens.
func (m *Model) NewSequence(capacity int) *Sequence { return &Sequence{Cache: m.NewCache(capacity)} }

// Feed makes the sequence hold exactly ids and returns the logits after its
// last token. Cached positions that agree with ids are kept; the rest are
// recomputed.
func (s *Sequence) Feed(r *Runner, ids []int32) (Logits, error) {
	if len(ids) == 0 {
		return Logits{}, fmt.Errorf("model: Feed with no tokens")
	}
	n := 0
	for n < len(s.Tokens) && n < len(ids) && s.Tokens[n] == ids[n] {
		n++
	}
	n = min(n, len(ids)-1) // at least one token runs, to give logits
	s.Cache.Truncate(n)
	s.Tokens = s.Tokens[:n]
	l, err := r.Forward([]*Cache{s.Cache}, [][]int32{ids[n:]}, false)
	if err != nil {
		return Logits{}, err
	}
	s.Tokens = append(s.Tokens, ids[n:]...)
	return l, nil
}

// GenerateOptions control Generate.
type GenerateOptions struct {
	MaxTokens int           // most tokens to generate
	Sampling  sample.Params // zero: greedy
	Seed      uint64        // seeds the sampler: same seed, same tokens
	Stop      []int32       // tokens that end the turn (not emitted)
}

// StopReason says why Generate returned.
type StopReason string

const (
	StopToken     StopReason = "stop token"
	StopMaxTokens StopReason = "max tokens"
	StopCacheFull StopReason = "context full"
)

// Generate continues seq from prompt: it feeds the prompt (reusing what seq
// already caches), then samples one token at a time, calling emit with each
// until a stop token, MaxTokens, a full cache, an error from emit, or ctx's
// end. Sampling is seeded from o.Seed alone, so a prompt and seed replay
// exactly. The generated tokens, and the stop token, are fed back and so
// appended to seq (all but the last when the cache fills up), ready for the
// conversation's next turn.
func (m *Model) Generate(ctx context.Context, r *Runner, seq *Sequence, prompt []int32, o GenerateOptions, emit func(tok int32) error) (StopReason, error) {
	l, err := seq.Feed(r, prompt)
	if err != nil {
		return "", err
	}
	sm := sample.New(o.Sampling, rand.New(rand.NewPCG(o.Seed, 0x9e3779b97f4a7c15)))
	next := [][]int32{{0}}
	caches := []*Cache{seq.Cache}
	for n := 0; ; n++ {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		if n == o.MaxTokens {
			return StopMaxTokens, nil
		}
		tok, _ := sm.Sample(l.Row(0))
		for _, s := range o.Stop {
			if tok == s {
				if seq.Cache.Len() < seq.Cache.Cap() {
					// Cache the stop token too, so that the next turn's
					// rendering, which contains it, reuses the cache.
					next[0][0] = tok
					if _, err := r.Forward(caches, next, false); err != nil {
						return "", err
					}
					seq.Tokens = append(seq.Tokens, tok)
				}
				return StopToken, nil
			}
		}
		if err := emit(tok); err != nil {
			return "", err
		}
		if seq.Cache.Len() == seq.Cache.Cap() {
			return StopCacheFull, nil
		}
		next[0][0] = tok
		if l, err = r.Forward(caches, next, false); err != nil {
			return "", err
		}
		seq.Tokens = append(seq.Tokens, tok)
	}
}
