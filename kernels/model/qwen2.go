package model

import (
	"github.com/frognano/frognano/kernels/gguf"
)

// Qwen2 (and Qwen2.5) dense decoders: biases on the q, k and v projections,
// half-rotation RoPE in GGUF files as in Hugging Face (llama.cpp does not
// permute them), the output tied to the embedding in the small models.
func init() {
	Register(Architecture{
		Name:    "qwen2",
		HFNames: []string{"Qwen2ForCausalLM"},
		FromGGUF: func(f *gguf.File) (Config, error) {
			c, err := ggufConfig(f)
			c.QKVBias = true
			return c, err
		},
		FromHF: func(h HFConfig) (Config, error) {
			c, err := h.common("qwen2")
			c.QKVBias = true
			return c, err
		},
	})
}
