package model

import (
	"fmt"

	"github.com/frognano/frognano/kernels/gguf"
)

// Qwen3 dense decoders: no biases, an RMSNorm over each head of the queries
// and keys before RoPE, and a head width that need not be hidden/heads
// (Qwen3-0.6B: 16 heads of 128 in a residual stream of 1024).
func init() {
	Register(Architecture{
		Name:    "qwen3",
		HFNames: []string{"Qwen3ForCausalLM"},
		FromGGUF: func(f *gguf.File) (Config, error) {
			c, err := ggufConfig(f)
			c.QKNorm = true
			return c, err
		},
		FromHF: func(h HFConfig) (Config, error) {
			if h.AttentionBias {
				return Config{}, fmt.Errorf("%w: Qwen3 with attention biases", ErrUnsupported)
			}
			c, err := h.common("qwen3")
			c.QKNorm = true
			return c, err
		},
	})
}
