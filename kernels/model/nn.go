package model

import "github.com/frognano/frognano/kernels"

// The layers of a Llama/Qwen-family decoder, each a small struct of weight
// tensors bound by name (see bind.go) whose Forward writes into buffers the
// caller owns. Struct tags give each weight's name in a GGUF file (gguf:)
// and in a Hugging Face checkpoint (hf:), relative to the enclosing layer;
// an empty name keeps the enclosing prefix, ",optional" marks weights some
// architectures lack.

// Linear is y = x·Wᵀ (+ b), W in PyTorch's [out, in] layout.
type Linear struct {
	Weight kernels.Tensor `gguf:"weight" hf:"weight"`
	Bias   kernels.Tensor `gguf:"bias,optional" hf:"bias,optional"`
	// q is Weight quantized, when the model serves quantized (quant.go).
	q kernels.Tensor
}

// Forward sets dst[t, out] = x[t, in]·Wᵀ + b, by the quantized weight when
// there is one.
func (l *Linear) Forward(b kernels.Backend, dst, x kernels.Tensor) {
	if l.q != nil {
		b.MatMul(dst, x, l.q)
	} else {
		b.MatMul(dst, x, l.Weight)
	}
	if l.Bias == nil {
		return
	}
	// The backend's Add is element-wise, so the bias goes on row by row.
	for i := range dst.Shape()[0] {
		row := b.Slice(dst, i, i+1)
		b.Add(row, row, l.Bias)
	}
}

// RMSNorm is the Llama/Qwen normalisation with a learnt scale.
type RMSNorm struct {
	Weight kernels.Tensor `gguf:"weight" hf:"weight"`
}

// Forward normalises each row of x (its last dimension is the weight's
// length) into dst, which may be x.
func (n *RMSNorm) Forward(b kernels.Backend, dst, x kernels.Tensor, eps float32) {
	b.RMSNorm(dst, x, n.Weight, eps)
}

// Attention is grouped-query self-attention with rotary positions. QNorm and
// KNorm, present in Qwen3, normalise each head's query and key before the
// rotation.
type Attention struct {
	Q     *Linear  `gguf:"attn_q" hf:"q_proj"`
	K     *Linear  `gguf:"attn_k" hf:"k_proj"`
	V     *Linear  `gguf:"attn_v" hf:"v_proj"`
	O     *Linear  `gguf:"attn_output" hf:"o_proj"`
	QNorm *RMSNorm `gguf:"attn_q_norm,optional" hf:"q_norm,optional"`
	KNorm *RMSNorm `gguf:"attn_k_norm,optional" hf:"k_norm,optional"`
}

// MLP is the SwiGLU feed-forward network: down(silu(gate(x)) · up(x)).
type MLP struct {
	Gate *Linear `gguf:"ffn_gate" hf:"gate_proj"`
	Up   *Linear `gguf:"ffn_up" hf:"up_proj"`
	Down *Linear `gguf:"ffn_down" hf:"down_proj"`
}

// Forward sets dst = MLP(x); gate and up are scratch of [rows, ffn].
func (m *MLP) Forward(b kernels.Backend, dst, x, gate, up kernels.Tensor) {
	m.Gate.Forward(b, gate, x)
	m.Up.Forward(b, up, x)
	b.SwiGLU(gate, gate, up)
	m.Down.Forward(b, dst, gate)
}

// Block is one pre-norm decoder layer:
//
//	x += Attention(AttnNorm(x));  x += MLP(FFNNorm(x))
type Block struct {
	AttnNorm *RMSNorm   `gguf:"attn_norm" hf:"input_layernorm"`
	Attn     *Attention `gguf:"" hf:"self_attn"`
	FFNNorm  *RMSNorm   `gguf:"ffn_norm" hf:"post_attention_layernorm"`
	MLP      *MLP       `gguf:"" hf:"mlp"`
}

// Transformer is the whole decoder. Output is nil when the model ties its
// output projection to the token embedding (SmolLM2, small Qwens).
type Transformer struct {
	TokenEmbedding kernels.Tensor `gguf:"token_embd.weight" hf:"model.embed_tokens.weight"`
	Blocks         []Block        `gguf:"blk" hf:"model.layers"`
	OutputNorm     *RMSNorm       `gguf:"output_norm" hf:"model.norm"`
	Output         *Linear        `gguf:"output,optional" hf:"lm_head,optional"`
}

// outputWeight is the [vocab, hidden] matrix that turns hidden states into
// logits.
func (t *Transformer) outputWeight() kernels.Tensor {
	if t.Output != nil {
		return t.Output.Weight
	}
	return t.TokenEmbedding
}
