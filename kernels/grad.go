package kernels

// GradBackend is a Backend that can also train: the backward of every
// forward operation of the decoder, the reductions and element-wise updates
// an optimizer needs. The CPU backend (kernels/cpu) implements it; the CUDA
// backend (kernels/cuda, cuda build tag) implements the same methods, and
// kernels/kernelstest checks any implementation against finite differences
// and PyTorch golden gradients.
//
// Conventions. A method named …Backward takes the gradient of the loss with
// respect to the forward operation's output (dy) and the forward's inputs,
// and writes the gradients with respect to those inputs. Gradients of
// activations (dx, dq, …) are overwritten; gradients of parameters (dweight,
// dtable, dbias, and dst of MatMulTN with accumulate) are added to, so that
// gradient accumulation over micro-batches and tied weights (an embedding
// table that is also the output projection) need no extra buffers. Shapes
// follow the forward operation's; mismatches panic.
type GradBackend interface {
	Backend

	// MatMulNN sets dst[m,n] = a[m,k] · b[k,n]: the gradient of a Linear
	// layer's input, dx[m,in] = dy[m,out] · W[out,in].
	MatMulNN(dst, a, b Tensor)
	// MatMulTN sets dst[n,k] = a[m,n]ᵀ · b[m,k], or adds it to dst when
	// accumulate is true: the gradient of a Linear weight,
	// dW[out,in] += dy[m,out]ᵀ · x[m,in].
	MatMulTN(dst, a, b Tensor, accumulate bool)
	// SumRows adds the column sums of x[m,n] to dst[n]: a bias gradient.
	SumRows(dst, x Tensor)

	// EmbeddingBackward adds row i of dy[len(ids), dim] to row ids[i] of
	// dtable[vocab, dim] (repeated ids add up).
	EmbeddingBackward(dtable, dy Tensor, ids []int32)
	// RMSNormBackward, for y = x / sqrt(mean(x²) + eps) · weight row by
	// row, sets dx and adds to dweight. dx may be dy itself (in place).
	RMSNormBackward(dx, dweight, dy, x, weight Tensor, eps float32)
	// RoPEBackward sets dx to dy rotated back by each row's angles (the
	// transpose of RoPE's rotation). dx may be dy itself.
	RoPEBackward(dx, dy Tensor, pos []int32, headDim int, theta float32)
	// AttentionBackward is the backward of Attention for a full pass
	// (s == t: q, k, v all cover the same positions 0..t-1 of one
	// sequence). It sets dq[t, nHeads·headDim], dk and dv[t,
	// nKVHeads·headDim] (summed over the query heads that share a
	// key/value head), recomputing the attention probabilities from q and
	// k.
	AttentionBackward(dq, dk, dv, dy, q, k, v Tensor, nHeads, nKVHeads int)
	// SwiGLUBackward, for y = silu(gate)·up, sets dgate and dup.
	SwiGLUBackward(dgate, dup, dy, gate, up Tensor)

	// TokenLogProbs sets dst[i] = log softmax(logits[i])[targets[i]] for
	// every row i of logits[rows, vocab].
	TokenLogProbs(dst []float32, logits Tensor, targets []int32)
	// TokenLogProbsBackward sets dlogits[i] = dlogp[i] · (onehot(targets[i])
	// − softmax(logits[i])), the backward of TokenLogProbs. dlogits may be
	// logits itself.
	TokenLogProbsBackward(dlogits, logits Tensor, targets []int32, dlogp []float32)

	// Axpy sets dst += alpha·x element-wise (residual-stream gradients,
	// gradient accumulation).
	Axpy(dst, x Tensor, alpha float32)
	// Scale sets t *= alpha (gradient clipping, averaging micro-batches).
	Scale(t Tensor, alpha float32)
	// Fill sets every element of t to v (zeroing gradients).
	Fill(t Tensor, v float32)
	// SumSquares returns Σ t², accumulated in float64; NaN or Inf in t
	// makes it NaN or Inf (the global gradient norm and its finiteness
	// check in one pass).
	SumSquares(t Tensor) float64
	// AdamW updates param in place from grad with the first and second
	// moment estimates m and v (same shape, updated in place), for the
	// 1-based step number:
	//   m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²
	//   p -= lr · ( m/(1−β1^step) / (sqrt(v/(1−β2^step)) + eps) + wd·p )
	// (decoupled weight decay, as torch.optim.AdamW).
	AdamW(param, grad, m, v Tensor, o AdamWParams, step int)
}

// AdamWParams are the hyper-parameters of one AdamW update.
type AdamWParams struct {
	LR, Beta1, Beta2, Eps, WeightDecay float32
}
