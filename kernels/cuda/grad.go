//go:build cuda

package cuda

/*
#include "frognano_cuda.h"
*/
import "C"

import (
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/frognano/frognano/kernels"
)

// The training operations (kernels.GradBackend): shapes are checked as the
// CPU twin checks them, then a kernel of gemm.cu, attention_bwd.cu, grad.cu
// or optim.cu is queued. As in ops.go every method ends with keepAlive on
// its tensors. TokenLogProbs and SumSquares return host values and so wait
// for the device; everything else is asynchronous.

var _ kernels.GradBackend = (*Backend)(nil)

// SetMatMulPrecision sets the arithmetic of MatMul, MatMulNN and MatMulTN
// (F32 by default). The Learner sets BF16 for training; the conformance
// tests run under F32, whose results match the CPU twin's to float32
// rounding. Set it before the Backend is shared between goroutines: the
// operations read it without synchronisation.
func (b *Backend) SetMatMulPrecision(p Precision) {
	if p != F32 && p != BF16 {
		panic(fmt.Sprintf("cuda: SetMatMulPrecision: unknown precision %d", int(p)))
	}
	b.prec = p
}

// MatMulPrecision reports the arithmetic of the matrix products.
func (b *Backend) MatMulPrecision() Precision { return b.prec }

// MatMulNN sets dst[m,n] = a[m,k]·b[k,n] (gemm.cu).
func (b *Backend) MatMulNN(dst, a, w kernels.Tensor) {
	d, x, y := b.tensor(dst), b.tensor(a), b.tensor(w)
	m, k, n := x.Rows(), x.Cols(), y.Cols()
	mustMatrix("MatMulNN", "b", y, k, n)
	mustMatrix("MatMulNN", "dst", d, m, n)
	mustNotOverlap("MatMulNN", d, x, y)
	check("MatMulNN", C.fn_gemm(b.dev.ctx, C.int(b.cfg.gemm), C.int(b.prec), C.FN_GEMM_NN, 0,
		d.addr(), x.addr(), y.addr(), C.int(m), C.int(n), C.int(k)))
	keepAlive(d, x, y)
}

// MatMulTN sets dst[n,k] = a[m,n]ᵀ·b[m,k], or adds it to dst (gemm.cu).
func (b *Backend) MatMulTN(dst, a, w kernels.Tensor, accumulate bool) {
	d, x, y := b.tensor(dst), b.tensor(a), b.tensor(w)
	m, n, k := x.Rows(), x.Cols(), y.Cols()
	mustMatrix("MatMulTN", "b", y, m, k)
	mustMatrix("MatMulTN", "dst", d, n, k)
	mustNotOverlap("MatMulTN", d, x, y)
	acc := C.int(0)
	if accumulate {
		acc = 1
	}
	// In gemm.cu's terms C[n,k] = A[m,n]ᵀ·B[m,k]: the sum runs over m.
	check("MatMulTN", C.fn_gemm(b.dev.ctx, C.int(b.cfg.gemm), C.int(b.prec), C.FN_GEMM_TN, acc,
		d.addr(), x.addr(), y.addr(), C.int(n), C.int(k), C.int(m)))
	keepAlive(d, x, y)
}

// SumRows adds the column sums of x[m,n] to dst[n] (grad.cu).
func (b *Backend) SumRows(dst, x kernels.Tensor) {
	d, xs := b.tensor(dst), b.tensor(x)
	m, n := xs.Rows(), xs.Cols()
	if d.n != n {
		panic(fmt.Sprintf("cuda: SumRows: dst has shape %v for rows of %d", d.shape, n))
	}
	mustNotOverlap("SumRows", d, xs)
	check("SumRows", C.fn_sum_rows(b.dev.ctx, d.addr(), xs.addr(), C.int(m), C.int(n)))
	keepAlive(d, xs)
}

// EmbeddingBackward adds row i of dy to row ids[i] of dtable (grad.cu).
// The ids are grouped here, on the host, so that the kernel gives each
// distinct id one block and adds its rows in order: no atomics, and the
// same bits as the CPU twin.
func (b *Backend) EmbeddingBackward(dtable, dy kernels.Tensor, ids []int32) {
	tab, g := b.tensor(dtable), b.tensor(dy)
	vocab, dim := tab.Rows(), tab.Cols()
	mustMatrix("EmbeddingBackward", "dy", g, len(ids), dim)
	for i, id := range ids {
		if id < 0 || int(id) >= vocab {
			panic(fmt.Sprintf("cuda: EmbeddingBackward: id %d at %d outside vocabulary of %d", id, i, vocab))
		}
	}
	mustNotOverlap("EmbeddingBackward", tab, g)
	if len(ids) == 0 || dim == 0 {
		return
	}
	groups := groupIDs(ids)
	u := (len(groups) - 1 - len(ids)) / 2
	check("EmbeddingBackward", C.fn_embedding_backward(b.dev.ctx, tab.addr(), g.addr(),
		(*C.int32_t)(unsafe.Pointer(&groups[0])), C.int(u), C.int(len(ids)), C.int(dim)))
	keepAlive(tab, g)
}

// groupIDs lays out ids as fn_embedding_backward takes them: the u distinct
// ids, u+1 offsets, then the positions of each id in ascending order.
func groupIDs(ids []int32) []int32 {
	order := make([]int32, len(ids))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(x, y int32) int { return int(ids[x]) - int(ids[y]) })
	var uniq, offs []int32
	for i, p := range order {
		if i == 0 || ids[p] != ids[order[i-1]] {
			uniq = append(uniq, ids[p])
			offs = append(offs, int32(i))
		}
	}
	offs = append(offs, int32(len(ids)))
	out := make([]int32, 0, len(uniq)+len(offs)+len(order))
	return append(append(append(out, uniq...), offs...), order...)
}

// RMSNormBackward sets dx and adds to dweight (grad.cu). dx may be dy.
func (b *Backend) RMSNormBackward(dx, dweight, dy, x, weight kernels.Tensor, eps float32) {
	d, dw, g, xs, w := b.tensor(dx), b.tensor(dweight), b.tensor(dy), b.tensor(x), b.tensor(weight)
	mustSameLen("RMSNormBackward", xs, g, d)
	cols := xs.Cols()
	if w.n != cols || dw.n != cols {
		panic(fmt.Sprintf("cuda: RMSNormBackward: weight %v and dweight %v for rows of %d", w.shape, dw.shape, cols))
	}
	mustNotOverlap("RMSNormBackward", dw, d, g, xs, w)
	mustNotOverlap("RMSNormBackward", d, xs, w)
	mustAliasOrDisjoint("RMSNormBackward", d, g)
	check("RMSNormBackward", C.fn_rmsnorm_backward(b.dev.ctx, C.int(b.cfg.rowBlock), d.addr(), dw.addr(), g.addr(),
		xs.addr(), w.addr(), C.int(xs.Rows()), C.int(cols), C.float(eps)))
	keepAlive(d, dw, g, xs, w)
}

// RoPEBackward rotates each head of row i back by position pos[i]'s angles.
// The transpose of a rotation is the rotation by the opposite angle, so
// this is rope.cu's kernel with negated inverse frequencies. Negating the
// angle negates the float32 product p·f exactly, and sine is odd and cosine
// even, so the kernel's a·c − b·(−s) rounds as the CPU twin's a·c + b·s.
// dx may be dy.
func (b *Backend) RoPEBackward(dx, dy kernels.Tensor, pos []int32, headDim int, theta float32) {
	d, g := b.tensor(dx), b.tensor(dy)
	mustSameLen("RoPEBackward", d, g)
	cols := g.Cols()
	if headDim <= 0 || headDim%2 != 0 || cols%headDim != 0 {
		panic(fmt.Sprintf("cuda: RoPEBackward: head dimension %d for rows of %d", headDim, cols))
	}
	if len(pos) != g.Rows() {
		panic(fmt.Sprintf("cuda: RoPEBackward: %d positions for %d rows", len(pos), g.Rows()))
	}
	for _, p := range pos {
		if p < 0 {
			panic(fmt.Sprintf("cuda: RoPEBackward: negative position %d", p))
		}
	}
	mustAliasOrDisjoint("RoPEBackward", d, g)
	if len(pos) == 0 || cols == 0 {
		return
	}
	negFreq := make([]float32, headDim/2)
	for j := range negFreq {
		negFreq[j] = -float32(1 / math.Pow(float64(theta), float64(2*j)/float64(headDim)))
	}
	check("RoPEBackward", C.fn_rope(b.dev.ctx, C.int(b.cfg.rowBlock), d.addr(), g.addr(),
		(*C.int32_t)(unsafe.Pointer(&pos[0])), (*C.float)(unsafe.Pointer(&negFreq[0])),
		C.int(len(pos)), C.int(cols), C.int(headDim)))
	keepAlive(d, g)
}

// AttentionBackward is the backward of causal grouped-query attention over
// a full sequence (attention_bwd.cu). Head dimensions above MaxHeadDim
// panic, as in Attention.
func (b *Backend) AttentionBackward(dq, dk, dv, dy, q, k, v kernels.Tensor, nHeads, nKVHeads int) {
	gq, gk, gv, gy := b.tensor(dq), b.tensor(dk), b.tensor(dv), b.tensor(dy)
	qs, ks, vs := b.tensor(q), b.tensor(k), b.tensor(v)
	t := qs.Rows()
	if nHeads <= 0 || nKVHeads <= 0 || nHeads%nKVHeads != 0 || qs.Cols()%nHeads != 0 {
		panic(fmt.Sprintf("cuda: AttentionBackward: %d heads, %d kv heads for query rows of %d", nHeads, nKVHeads, qs.Cols()))
	}
	hd := qs.Cols() / nHeads
	qc, kc := nHeads*hd, nKVHeads*hd
	mustMatrix("AttentionBackward", "k", ks, t, kc)
	mustMatrix("AttentionBackward", "v", vs, t, kc)
	mustMatrix("AttentionBackward", "dy", gy, t, qc)
	mustMatrix("AttentionBackward", "dq", gq, t, qc)
	mustMatrix("AttentionBackward", "dk", gk, t, kc)
	mustMatrix("AttentionBackward", "dv", gv, t, kc)
	for _, out := range []*Tensor{gq, gk, gv} {
		mustNotOverlap("AttentionBackward", out, gy, qs, ks, vs)
	}
	mustNotOverlap("AttentionBackward", gq, gk, gv)
	mustNotOverlap("AttentionBackward", gk, gv)
	if hd > MaxHeadDim {
		panic(fmt.Sprintf("cuda: AttentionBackward: head dimension %d above the %d this backend supports", hd, MaxHeadDim))
	}
	if t == 0 || hd == 0 {
		return
	}
	scale := float32(1 / math.Sqrt(float64(hd)))
	check("AttentionBackward", C.fn_attention_backward(b.dev.ctx, C.int(b.cfg.attnBwd), gq.addr(), gk.addr(), gv.addr(),
		gy.addr(), qs.addr(), ks.addr(), vs.addr(), C.int(t), C.int(nHeads), C.int(nKVHeads), C.int(hd), C.float(scale)))
	keepAlive(gq, gk, gv, gy, qs, ks, vs)
}

// SwiGLUBackward sets dgate and dup for y = silu(gate)·up (grad.cu). Either
// output may be one of the inputs.
func (b *Backend) SwiGLUBackward(dgate, dup, dy, gate, up kernels.Tensor) {
	dg, du, g, gt, u := b.tensor(dgate), b.tensor(dup), b.tensor(dy), b.tensor(gate), b.tensor(up)
	mustSameLen("SwiGLUBackward", g, gt, u, dg, du)
	mustNotOverlap("SwiGLUBackward", dg, du)
	for _, out := range []*Tensor{dg, du} {
		mustAliasOrDisjoint("SwiGLUBackward", out, g, gt, u)
	}
	check("SwiGLUBackward", C.fn_swiglu_backward(b.dev.ctx, C.int(b.cfg.elemBlock), dg.addr(), du.addr(), g.addr(),
		gt.addr(), u.addr(), C.size_t(g.n)))
	keepAlive(dg, du, g, gt, u)
}

// mustTargets checks one target per row of logits, each inside the row.
func mustTargets(op string, x *Tensor, targets []int32) {
	if len(targets) != x.Rows() {
		panic(fmt.Sprintf("cuda: %s: %d targets for %d rows", op, len(targets), x.Rows()))
	}
	for i, tg := range targets {
		if tg < 0 || int(tg) >= x.Cols() {
			panic(fmt.Sprintf("cuda: %s: target %d at %d outside vocabulary of %d", op, tg, i, x.Cols()))
		}
	}
}

// TokenLogProbs sets dst[i] = log softmax(logits[i])[targets[i]] (grad.cu),
// waiting for the device.
func (b *Backend) TokenLogProbs(dst []float32, logits kernels.Tensor, targets []int32) {
	x := b.tensor(logits)
	mustTargets("TokenLogProbs", x, targets)
	if len(dst) != len(targets) {
		panic(fmt.Sprintf("cuda: TokenLogProbs: %d outputs for %d rows", len(dst), len(targets)))
	}
	if len(dst) == 0 {
		return
	}
	check("TokenLogProbs", C.fn_token_logprobs(b.dev.ctx, C.int(b.cfg.rowBlock), (*C.float)(unsafe.Pointer(&dst[0])),
		x.addr(), (*C.int32_t)(unsafe.Pointer(&targets[0])), C.int(len(targets)), C.int(x.Cols())))
	keepAlive(x)
}

// TokenLogProbsBackward sets dlogits[i] = dlogp[i]·(onehot(targets[i]) −
// softmax(logits[i])) (grad.cu). dlogits may be logits.
func (b *Backend) TokenLogProbsBackward(dlogits, logits kernels.Tensor, targets []int32, dlogp []float32) {
	d, x := b.tensor(dlogits), b.tensor(logits)
	mustTargets("TokenLogProbsBackward", x, targets)
	mustSameLen("TokenLogProbsBackward", d, x)
	if len(dlogp) != len(targets) {
		panic(fmt.Sprintf("cuda: TokenLogProbsBackward: %d gradients for %d rows", len(dlogp), len(targets)))
	}
	mustAliasOrDisjoint("TokenLogProbsBackward", d, x)
	if len(targets) == 0 || x.Cols() == 0 {
		return
	}
	check("TokenLogProbsBackward", C.fn_token_logprobs_backward(b.dev.ctx, C.int(b.cfg.rowBlock), d.addr(), x.addr(),
		(*C.int32_t)(unsafe.Pointer(&targets[0])), (*C.float)(unsafe.Pointer(&dlogp[0])),
		C.int(len(targets)), C.int(x.Cols())))
	keepAlive(d, x)
}

// Axpy sets dst += alpha·x (optim.cu). x may be dst.
func (b *Backend) Axpy(dst, x kernels.Tensor, alpha float32) {
	d, xs := b.tensor(dst), b.tensor(x)
	mustSameLen("Axpy", d, xs)
	mustAliasOrDisjoint("Axpy", d, xs)
	check("Axpy", C.fn_axpy(b.dev.ctx, C.int(b.cfg.elemBlock), d.addr(), xs.addr(), C.float(alpha), C.size_t(d.n)))
	keepAlive(d, xs)
}

// Scale sets t *= alpha (optim.cu).
func (b *Backend) Scale(t kernels.Tensor, alpha float32) {
	x := b.tensor(t)
	check("Scale", C.fn_scale(b.dev.ctx, C.int(b.cfg.elemBlock), x.addr(), C.float(alpha), C.size_t(x.n)))
	keepAlive(x)
}

// Fill sets every element of t to v (optim.cu).
func (b *Backend) Fill(t kernels.Tensor, v float32) {
	x := b.tensor(t)
	check("Fill", C.fn_fill(b.dev.ctx, C.int(b.cfg.elemBlock), x.addr(), C.float(v), C.size_t(x.n)))
	keepAlive(x)
}

// SumSquares returns Σ t², squared and summed in float64 in a fixed order
// (optim.cu), waiting for the device. NaN or Inf in t carries through.
func (b *Backend) SumSquares(t kernels.Tensor) float64 {
	x := b.tensor(t)
	var out C.double
	check("SumSquares", C.fn_sum_squares(b.dev.ctx, C.int(b.cfg.elemBlock), x.addr(), C.size_t(x.n), &out))
	keepAlive(x)
	return float64(out)
}

// AdamW updates param, m and v in place from grad (optim.cu), with
// torch.optim.AdamW's roundings: its scalars are computed here in float64,
// as Python computes them, and rounded to float32 once, exactly as the CPU
// twin does, and the kernel repeats the twin's float32 operations in order.
func (b *Backend) AdamW(param, grad, m, v kernels.Tensor, o kernels.AdamWParams, step int) {
	p, g, ms, vs := b.tensor(param), b.tensor(grad), b.tensor(m), b.tensor(v)
	mustSameLen("AdamW", p, g, ms, vs)
	if step < 1 {
		panic(fmt.Sprintf("cuda: AdamW: step %d, want 1 or more", step))
	}
	mustNotOverlap("AdamW", p, g, ms, vs)
	mustNotOverlap("AdamW", ms, g, vs)
	mustNotOverlap("AdamW", vs, g)
	lr, b1, b2 := float64(o.LR), float64(o.Beta1), float64(o.Beta2)
	bc1 := 1 - math.Pow(b1, float64(step))
	bc2 := 1 - math.Pow(b2, float64(step))
	check("AdamW", C.fn_adamw(b.dev.ctx, C.int(b.cfg.elemBlock), p.addr(), g.addr(), ms.addr(), vs.addr(), C.size_t(p.n),
		C.float(float32(1-b1)), C.float(float32(b2)), C.float(float32(1-b2)), C.float(o.Eps),
		C.float(float32(1-lr*float64(o.WeightDecay))), C.float(float32(-(lr/bc1))), C.float(float32(math.Sqrt(bc2)))))
	keepAlive(p, g, ms, vs)
}

// mustAliasOrDisjoint accepts a destination that is exactly one of the
// inputs (the kernels read each element before writing it, in the same
// thread) or shares no memory with them; a partial overlap would read
// elements already written.
func mustAliasOrDisjoint(op string, dst *Tensor, srcs ...*Tensor) {
	for _, s := range srcs {
		if dst.overlaps(s) && (dst.off != s.off || dst.n != s.n) {
			panic(fmt.Sprintf("cuda: %s: destination partly overlaps an input", op))
		}
	}
}
