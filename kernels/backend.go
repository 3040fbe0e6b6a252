// Package kernels defines the compute backend the transformer runs on: a
// small set of tensor operations. Backend is enough for a Llama/Qwen-family
// decoder's forward pass with a KV cache; GradBackend (grad.go) adds the
// backward of each of them and what an optimizer step needs, for the
// Learner. The CPU implementation is kernels/cpu; the CUDA one
// (kernels/cuda, behind the cuda build tag) implements both interfaces too.
// kernels/kernelstest checks any implementation: the forward operations
// against hand-computed values and NumPy golden files, the backward ones
// against finite differences and PyTorch golden gradients.
package kernels

import "github.com/frognano/frognano/kernels/tensor"

// Tensor is a dense, row-major float32 array owned by a Backend. Operations
// read a tensor as a matrix whose rows run along its last dimension; only the
// element count and the row length matter to them, not the rank.
//
// A Tensor is only valid with the backend that made it: the CPU backend's
// tensors are *tensor.Tensor, a device backend's hold device memory. A
// backend that can quantize weights (kernels/model's Quantizer) also makes
// read-only quantized tensors, which only its MatMul (as b) and Slice take.
type Tensor interface {
	Shape() []int
}

var _ Tensor = (*tensor.Tensor)(nil)

// Backend computes on tensors it owns.
//
// Every operation writes into a destination tensor the caller allocated, so
// activations and the KV cache are buffers reused step after step.
// Element-wise and row-wise operations (RMSNorm, RoPE, SwiGLU, Softmax,
// LogSoftmax, Add) may write in place (dst the same tensor as an input);
// MatMul and Attention may not. Shape mismatches are programming errors and
// panic, as does a token id or position out of range.
//
// Implementations are safe for concurrent use on distinct destinations. A
// device backend may queue an operation and return before it has run;
// ToHost waits for the work queued before it.
type Backend interface {
	// Name identifies the backend in logs and benchmarks ("cpu/openblas
	// 0.3.26 Haswell, avx2", "cuda/NVIDIA H200").
	Name() string

	// New allocates a zero-filled tensor.
	New(shape ...int) Tensor
	// FromHost makes a backend tensor with the contents of h. The CPU
	// backend adopts h itself, without copying, so h must not be reused for
	// something else afterwards.
	FromHost(h *tensor.Tensor) Tensor
	// ToHost copies t's elements, row-major, into dst, which must have the
	// same element count.
	ToHost(dst []float32, t Tensor)
	// Slice is the view of indices [lo, hi) along t's first dimension,
	// sharing storage: a KV cache of shape [maxSeq, kvDim] is written a
	// step at a time, and read as its filled prefix, through slices.
	Slice(t Tensor, lo, hi int) Tensor
	// Reshape is a view of t with another shape and the same elements,
	// sharing storage: Qwen3's per-head QK-norm reads [t, heads·headDim]
	// as [t·heads, headDim].
	Reshape(t Tensor, shape ...int) Tensor

	// MatMul sets dst[m,n] = a[m,k] · b[n,k]ᵀ. b is in the layout of a
	// PyTorch Linear weight ([out, in]) and of the embedding table, so a
	// linear layer and tied output logits are both one MatMul. b may be a
	// quantized tensor of the same backend; the CUDA backend can be set to
	// multiply in bfloat16 (accumulating in float32).
	MatMul(dst, a, b Tensor)
	// Embedding copies row ids[i] of table[vocab, dim] into row i of
	// dst[len(ids), dim].
	Embedding(dst, table Tensor, ids []int32)
	// RMSNorm sets each row of dst to x / sqrt(mean(x²) + eps) · weight, the
	// Llama/Qwen normalisation (weight has one value per column).
	RMSNorm(dst, x, weight Tensor, eps float32)
	// RoPE rotates every head of row i of x, whose rows are
	// [heads·headDim], to position pos[i]. It is the half-rotation
	// ("NeoX") form of Hugging Face Llama and Qwen: element j of a head
	// pairs with element j+headDim/2 and turns by pos·theta^(-2j/headDim),
	// the angle computed in float32 as HF does. (llama.cpp's GGUF export of
	// Llama permutes the q/k weights for the interleaved form; a GGUF
	// loader must undo that permutation.)
	RoPE(dst, x Tensor, pos []int32, headDim int, theta float32)
	// Attention is causal scaled-dot-product attention with grouped-query
	// heads. q is [t, nHeads·headDim] for the t newest positions; k and v
	// are [s, nKVHeads·headDim] for every position so far, s ≥ t, the
	// cache's filled prefix. Query row i sits at position s-t+i and sees
	// keys 0..s-t+i. Query head h reads key/value head h/(nHeads/nKVHeads),
	// and scores are scaled by 1/sqrt(headDim). dst has q's shape. With
	// s == t this is a full (prefill or training) pass; with t == 1, one
	// decoding step.
	Attention(dst, q, k, v Tensor, nHeads, nKVHeads int)
	// SwiGLU sets dst = silu(gate) · up, element-wise, silu(x) = x·σ(x).
	SwiGLU(dst, gate, up Tensor)
	// Softmax normalises each row of x into probabilities.
	Softmax(dst, x Tensor)
	// LogSoftmax sets each row to x - logsumexp(x), computed stably.
	LogSoftmax(dst, x Tensor)
	// Add sets dst = a + b element-wise (the residual connection).
	Add(dst, a, b Tensor)
	// Copy sets dst = src, element for element (same element count and row
	// length): new keys and values, computed for a whole batch at once, go
	// into each sequence's KV cache this way.
	Copy(dst, src Tensor)
}

// PrefixAttention is what a Backend implements when it can attend over a
// cache held in two places: a prefix that several sequences share (the
// prompt of a group of episodes, computed once and held by one sequence's
// cache) and each sequence's own positions after it. kernels/model lets
// caches share a prefix only on a backend that implements it; elsewhere
// they copy it.
type PrefixAttention interface {
	// AttentionPrefix is Attention over the nb rows of kb and vb, which
	// every query row sees, followed by the s rows of k and v: query row
	// i sits at position nb+s-t+i and sees keys 0..nb+s-t+i of the two
	// parts taken as one. It equals Attention over the concatenations up
	// to the order of summation in the products.
	AttentionPrefix(dst, q, kb, vb, k, v Tensor, nHeads, nKVHeads int)
	// AttentionPrefixGroup is AttentionPrefix for several sequences'
	// one-row queries over one shared prefix (the decoding step of a
	// group's sequences): member i's query q[i] sees all of kb, vb and
	// all of its own k[i], v[i] (at least one row), and its output goes
	// to dst[i]. It equals AttentionPrefix member by member up to the
	// order of summation; the prefix is read once for all of them.
	AttentionPrefixGroup(dst, q []Tensor, kb, vb Tensor, k, v []Tensor, nHeads, nKVHeads int)
}
