package model

import (
	"fmt"
	"strings"

	"github.com/frognano/frognano/kernels/gguf"
)

// Llama: SmolLM, SmolLM2, Llama 2-style and Llama 3 decoders. No biases, no
// q/k norms; the output projection is tied to the embedding when the file
// has none (SmolLM2).
//
// llama.cpp's converter permutes the rows of q_proj and k_proj, head by
// head, so that its interleaved rotary form (pairs 2j, 2j+1) computes what
// Hugging Face's half rotation (pairs j, j+headDim/2) does. FixGGUF undoes
// that permutation, so the decoder's half-rotation RoPE, and a checkpoint
// exported from these weights, match Hugging Face.
func init() {
	Register(Architecture{
		Name:    "llama",
		HFNames: []string{"LlamaForCausalLM"},
		FromGGUF: func(f *gguf.File) (Config, error) {
			return ggufConfig(f)
		},
		FromHF: func(h HFConfig) (Config, error) {
			if h.AttentionBias {
				return Config{}, fmt.Errorf("%w: Llama with attention biases", ErrUnsupported)
			}
			return h.common("llama")
		},
		FixGGUF: unpermuteLlamaQK,
	})
}

// unpermuteLlamaQK restores Hugging Face's row order in the q and k
// projections (weights and any biases) of a llama GGUF file.
func unpermuteLlamaQK(c Config, name string, data []float32) error {
	if !strings.HasPrefix(name, "blk.") {
		return nil
	}
	heads := 0
	switch {
	case strings.Contains(name, ".attn_q."):
		heads = c.Heads
	case strings.Contains(name, ".attn_k."):
		heads = c.KVHeads
	default:
		return nil
	}
	rows := heads * c.HeadDim
	if len(data)%rows != 0 {
		return fmt.Errorf("%w: %s has %d values, not a multiple of %d rows", ErrMalformed, name, len(data), rows)
	}
	unpermuteRows(data, heads, c.HeadDim, len(data)/rows)
	return nil
}

// unpermuteRows inverts llama.cpp's permute(w, n_head): within each head,
// stored row 2j+t (t = 0, 1) is Hugging Face's row t·headDim/2 + j. Rows are
// cols values long.
func unpermuteRows(data []float32, heads, headDim, cols int) {
	half := headDim / 2
	tmp := make([]float32, headDim*cols)
	for h := range heads {
		head := data[h*headDim*cols : (h+1)*headDim*cols]
		for j := range half {
			for t := range 2 {
				copy(tmp[(t*half+j)*cols:(t*half+j+1)*cols], head[(2*j+t)*cols:(2*j+t+1)*cols])
			}
		}
		copy(head, tmp)
	}
}
