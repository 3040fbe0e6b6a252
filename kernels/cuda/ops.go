//go:build cuda

package cuda

/*
#include "frognano_cuda.h"
*/
import "C"

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"

	"github.com/frognano/frognano/kernels"
)

// The operations check shapes exactly as the CPU twin does, with the same
// panics, then queue a kernel. Every one ends with runtime.KeepAlive on its
// tensors: the kernels see only device addresses, and a tensor the caller
// no longer holds could otherwise be collected, and its memory freed,
// before its kernel was queued.

// MatMul sets dst[m,n] = a[m,k]·b[n,k]ᵀ (matmul.cu; gemm.cu under BF16
// precision, see SetMatMulPrecision).
func (b *Backend) MatMul(dst, a, w kernels.Tensor) {
	d, x, y := b.tensor(dst), b.tensor(a), b.tensor(w)
	m, k, n := x.Rows(), x.Cols(), y.Rows()
	mustMatrix("MatMul", "b", y, n, k)
	mustMatrix("MatMul", "dst", d, m, n)
	mustNotOverlap("MatMul", d, x, y)
	// fn_gemm is fn_matmul in fp32, the tensor-core kernel under BF16.
	check("MatMul", C.fn_gemm(b.dev.ctx, C.int(b.cfg.matmul), C.int(b.prec), C.FN_GEMM_NT, 0, d.addr(), x.addr(), y.addr(), C.int(m), C.int(n), C.int(k)))
	keepAlive(d, x, y)
}

// Embedding gathers rows ids of table into dst (elementwise.cu).
func (b *Backend) Embedding(dst, table kernels.Tensor, ids []int32) {
	d, tab := b.tensor(dst), b.tensor(table)
	vocab, dim := tab.Rows(), tab.Cols()
	mustMatrix("Embedding", "dst", d, len(ids), dim)
	for i, id := range ids {
		if id < 0 || int(id) >= vocab {
			panic(fmt.Sprintf("cuda: Embedding: id %d at %d outside vocabulary of %d", id, i, vocab))
		}
	}
	if len(ids) > 0 && dim > 0 {
		check("Embedding", C.fn_embedding(b.dev.ctx, d.addr(), tab.addr(), (*C.int32_t)(unsafe.Pointer(&ids[0])), C.int(len(ids)), C.int(dim)))
	}
	keepAlive(d, tab)
}

// RMSNorm sets each row to x/sqrt(mean(x²)+eps)·weight (norm.cu).
func (b *Backend) RMSNorm(dst, x, weight kernels.Tensor, eps float32) {
	d, xs, w := b.tensor(dst), b.tensor(x), b.tensor(weight)
	mustSameLen("RMSNorm", d, xs)
	cols := xs.Cols()
	if w.n != cols {
		panic(fmt.Sprintf("cuda: RMSNorm: weight has shape %v for rows of %d", w.shape, cols))
	}
	check("RMSNorm", C.fn_rmsnorm(b.dev.ctx, C.int(b.cfg.rowBlock), d.addr(), xs.addr(), w.addr(), C.int(xs.Rows()), C.int(cols), C.float(eps)))
	keepAlive(d, xs, w)
}

// RoPE rotates each head of row i to position pos[i] (rope.cu). The inverse
// frequencies are computed here exactly as the CPU twin computes them.
func (b *Backend) RoPE(dst, x kernels.Tensor, pos []int32, headDim int, theta float32) {
	d, xs := b.tensor(dst), b.tensor(x)
	mustSameLen("RoPE", d, xs)
	cols := xs.Cols()
	if headDim <= 0 || headDim%2 != 0 || cols%headDim != 0 {
		panic(fmt.Sprintf("cuda: RoPE: head dimension %d for rows of %d", headDim, cols))
	}
	if len(pos) != xs.Rows() {
		panic(fmt.Sprintf("cuda: RoPE: %d positions for %d rows", len(pos), xs.Rows()))
	}
	for _, p := range pos {
		if p < 0 {
			panic(fmt.Sprintf("cuda: RoPE: negative position %d", p))
		}
	}
	if len(pos) == 0 || cols == 0 {
		return
	}
	invFreq := make([]float32, headDim/2)
	for j := range invFreq {
		invFreq[j] = float32(1 / math.Pow(float64(theta), float64(2*j)/float64(headDim)))
	}
	check("RoPE", C.fn_rope(b.dev.ctx, C.int(b.cfg.rowBlock), d.addr(), xs.addr(),
		(*C.int32_t)(unsafe.Pointer(&pos[0])), (*C.float)(unsafe.Pointer(&invFreq[0])),
		C.int(len(pos)), C.int(cols), C.int(headDim)))
	keepAlive(d, xs)
}

// MaxHeadDim is the largest attention head dimension this backend's
// attention kernel takes (Llama and Qwen use 64 or 128).
const MaxHeadDim = int(C.FN_MAX_HEAD_DIM)

// Attention is causal grouped-query attention of the t newest positions
// over all s so far (attention.cu). Head dimensions above MaxHeadDim panic.
func (b *Backend) Attention(dst, q, k, v kernels.Tensor, nHeads, nKVHeads int) {
	d, qs, ks, vs := b.tensor(dst), b.tensor(q), b.tensor(k), b.tensor(v)
	t, s := qs.Rows(), ks.Rows()
	if nHeads <= 0 || nKVHeads <= 0 || nHeads%nKVHeads != 0 || qs.Cols()%nHeads != 0 {
		panic(fmt.Sprintf("cuda: Attention: %d heads, %d kv heads for query rows of %d", nHeads, nKVHeads, qs.Cols()))
	}
	hd := qs.Cols() / nHeads
	qc, kc := nHeads*hd, nKVHeads*hd
	mustMatrix("Attention", "k", ks, s, kc)
	mustMatrix("Attention", "v", vs, s, kc)
	mustMatrix("Attention", "dst", d, t, qc)
	if t > s {
		panic(fmt.Sprintf("cuda: Attention: %d queries but only %d keys", t, s))
	}
	mustNotOverlap("Attention", d, qs, ks, vs)
	if hd > MaxHeadDim {
		panic(fmt.Sprintf("cuda: Attention: head dimension %d above the %d this backend supports", hd, MaxHeadDim))
	}
	if t == 0 || hd == 0 {
		return
	}
	scale := float32(1 / math.Sqrt(float64(hd)))
	check("Attention", C.fn_attention(b.dev.ctx, C.int(b.cfg.attnWarps), C.int(b.cfg.attnSplits),
		d.addr(), qs.addr(), ks.addr(), vs.addr(), C.int(t), C.int(s), C.int(nHeads), C.int(nKVHeads), C.int(hd), C.float(scale)))
	keepAlive(d, qs, ks, vs)
}

// SwiGLU sets dst = silu(gate)·up (elementwise.cu).
func (b *Backend) SwiGLU(dst, gate, up kernels.Tensor) {
	d, g, u := b.tensor(dst), b.tensor(gate), b.tensor(up)
	mustSameLen("SwiGLU", d, g, u)
	check("SwiGLU", C.fn_swiglu(b.dev.ctx, C.int(b.cfg.elemBlock), d.addr(), g.addr(), u.addr(), C.size_t(d.n)))
	keepAlive(d, g, u)
}

// Add sets dst = a + b (elementwise.cu).
func (b *Backend) Add(dst, x, y kernels.Tensor) {
	d, xs, ys := b.tensor(dst), b.tensor(x), b.tensor(y)
	mustSameLen("Add", d, xs, ys)
	check("Add", C.fn_add(b.dev.ctx, C.int(b.cfg.elemBlock), d.addr(), xs.addr(), ys.addr(), C.size_t(d.n)))
	keepAlive(d, xs, ys)
}

// Softmax normalises each row to probabilities (norm.cu).
func (b *Backend) Softmax(dst, x kernels.Tensor) { b.softmax("Softmax", dst, x, false) }

// LogSoftmax sets each row to x - logsumexp(x) (norm.cu).
func (b *Backend) LogSoftmax(dst, x kernels.Tensor) { b.softmax("LogSoftmax", dst, x, true) }

func (b *Backend) softmax(op string, dst, x kernels.Tensor, log bool) {
	d, xs := b.tensor(dst), b.tensor(x)
	mustSameLen(op, d, xs)
	l := C.int(0)
	if log {
		l = 1
	}
	check(op, C.fn_softmax(b.dev.ctx, C.int(b.cfg.rowBlock), l, d.addr(), xs.addr(), C.int(xs.Rows()), C.int(xs.Cols())))
	keepAlive(d, xs)
}

// keepAlive keeps the tensors, and so their device memory, alive until the
// kernel that uses them has been queued.
func keepAlive(ts ...*Tensor) {
	for _, t := range ts {
		runtime.KeepAlive(t)
	}
}
