//go:build cuda

package cuda

import (
	"fmt"
	"testing"

	"github.com/frognano/frognano/kernels"
)

// Benchmarks of the training operations at SmolLM2-135M's shapes for a
// sequence of T=512 tokens, timed as bench_test.go times the forward ones.

const seqLen = 512

var adamBench = kernels.AdamWParams{LR: 3e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}

// BenchmarkMatMulGrad times the products of one decoder layer's Linear
// layers and of the tied output projection (out × in weights), forward (NT)
// and backward (NN for dx, TN accumulating into dW), in fp32 and bf16.
// GFLOP/s counts 2·T·out·in per product.
func BenchmarkMatMulGrad(b *testing.B) {
	be := testBackend(b)
	for _, s := range []struct {
		name    string
		out, in int
	}{
		{"q", nHeads * headDim, hidden},
		{"kv", nKV * headDim, hidden},
		{"gate", inter, hidden},
		{"down", hidden, inter},
		{"lmhead", vocab, hidden},
	} {
		x, w, dy := randDev(be, 1, seqLen, s.in), randDev(be, 2, s.out, s.in), randDev(be, 3, seqLen, s.out)
		y, dx, dw := be.New(seqLen, s.out), be.New(seqLen, s.in), be.New(s.out, s.in)
		for _, p := range []Precision{F32, BF16} {
			bp := be.with(launch{})
			bp.SetMatMulPrecision(p)
			for _, op := range []struct {
				name string
				run  func()
			}{
				{"NT", func() { bp.MatMul(y, x, w) }},
				{"NN", func() { bp.MatMulNN(dx, dy, w) }},
				{"TN", func() { bp.MatMulTN(dw, dy, x, true) }},
			} {
				b.Run(fmt.Sprintf("%s/%s/%dx%dx%d/%s", s.name, op.name, seqLen, s.out, s.in, p), func(b *testing.B) {
					b.SetBytes(int64(4 * (seqLen*s.in + s.out*s.in + seqLen*s.out)))
					timed(b, be, op.run)
					b.ReportMetric(2*float64(seqLen*s.out*s.in)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

// BenchmarkAttentionBackward: GFLOP/s counts the 10·headDim operations per
// (query, visible key, head) that a backward recomputing the scores does in
// its two passes over them.
func BenchmarkAttentionBackward(b *testing.B) {
	be := testBackend(b)
	for _, t := range []int{128, seqLen, 2048} {
		q, k, v := randDev(be, 8, t, nHeads*headDim), randDev(be, 9, t, nKV*headDim), randDev(be, 10, t, nKV*headDim)
		dy := randDev(be, 11, t, nHeads*headDim)
		dq, dk, dv := be.New(t, nHeads*headDim), be.New(t, nKV*headDim), be.New(t, nKV*headDim)
		visible := t * (t + 1) / 2
		for _, warps := range []int{0, 4, 8, 16} {
			bw := be.with(launch{attnBwd: warps})
			name := fmt.Sprintf("t%d", t)
			if warps != 0 {
				name += fmt.Sprintf("/warps%d", warps)
			}
			b.Run(name, func(b *testing.B) {
				b.SetBytes(int64(4 * (3*t*nHeads*headDim + 4*t*nKV*headDim)))
				timed(b, be, func() { bw.AttentionBackward(dq, dk, dv, dy, q, k, v, nHeads, nKV) })
				b.ReportMetric(10*float64(headDim*nHeads*visible)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

func BenchmarkRMSNormBackward(b *testing.B) {
	be := testBackend(b)
	x, dy, w, dw := randDev(be, 1, seqLen, hidden), randDev(be, 2, seqLen, hidden), randDev(be, 3, hidden), be.New(hidden)
	dx := be.New(seqLen, hidden)
	benchRows(b, be, "", seqLen, hidden, 2, func() { be.RMSNormBackward(dx, dw, dy, x, w, 1e-5) })
}

func BenchmarkSwiGLUBackward(b *testing.B) {
	be := testBackend(b)
	g, u, dy := randDev(be, 1, seqLen, inter), randDev(be, 2, seqLen, inter), randDev(be, 3, seqLen, inter)
	dg, du := be.New(seqLen, inter), be.New(seqLen, inter)
	b.Run(fmt.Sprintf("%dx%d", seqLen, inter), func(b *testing.B) {
		b.SetBytes(int64(4 * 5 * seqLen * inter))
		timed(b, be, func() { be.SwiGLUBackward(dg, du, dy, g, u) })
	})
}

func BenchmarkRoPEBackward(b *testing.B) {
	be := testBackend(b)
	dy := randDev(be, 3, seqLen, nHeads*headDim)
	pos := make([]int32, seqLen)
	for i := range pos {
		pos[i] = int32(i)
	}
	benchRows(b, be, "", seqLen, nHeads*headDim, 1, func() { be.RoPEBackward(dy, dy, pos, headDim, 1e5) })
}

func BenchmarkEmbeddingBackward(b *testing.B) {
	be := testBackend(b)
	table, dy := be.New(vocab, hidden), randDev(be, 4, seqLen, hidden)
	r := newRand(4)
	ids := make([]int32, seqLen)
	for i := range ids {
		ids[i] = int32(r.IntN(vocab))
	}
	benchRows(b, be, "", seqLen, hidden, 1, func() { be.EmbeddingBackward(table, dy, ids) })
}

// BenchmarkTokenLogProbs covers the policy loss's two vocabulary-wide
// passes over T=512 rows of logits; TokenLogProbs includes the wait for its
// host result.
func BenchmarkTokenLogProbs(b *testing.B) {
	be := testBackend(b)
	x, d := randDev(be, 5, seqLen, vocab), be.New(seqLen, vocab)
	r := newRand(5)
	targets, dlogp, out := make([]int32, seqLen), make([]float32, seqLen), make([]float32, seqLen)
	for i := range targets {
		targets[i] = int32(r.IntN(vocab))
		dlogp[i] = 1
	}
	benchRows(b, be, "forward", seqLen, vocab, 0, func() { be.TokenLogProbs(out, x, targets) })
	benchRows(b, be, "backward", seqLen, vocab, 1, func() { be.TokenLogProbsBackward(d, x, targets, dlogp) })
}

// BenchmarkOptimizer runs the optimizer's passes over a 16M-parameter
// tensor: bytes count every read and write (AdamW reads four arrays and
// writes three).
func BenchmarkOptimizer(b *testing.B) {
	be := testBackend(b)
	const n = 1 << 24
	p, g, m, v := randDev(be, 6, n), randDev(be, 7, n), be.New(n), be.New(n)
	var sink float64
	for _, op := range []struct {
		name  string
		bytes int
		run   func()
	}{
		{"AdamW", 7, func() { be.AdamW(p, g, m, v, adamBench, 1) }},
		{"Axpy", 3, func() { be.Axpy(m, g, 0.5) }},
		{"Scale", 2, func() { be.Scale(g, 0.999) }},
		{"Fill", 1, func() { be.Fill(v, 0) }},
		{"SumSquares", 1, func() { sink += be.SumSquares(g) }},
	} {
		b.Run(op.name, func(b *testing.B) {
			b.SetBytes(int64(4 * n * op.bytes))
			timed(b, be, op.run)
		})
	}
	_ = sink
}

func BenchmarkSumRows(b *testing.B) {
	be := testBackend(b)
	for _, cols := range []int{hidden, inter} {
		x, d := randDev(be, 8, seqLen, cols), be.New(cols)
		benchRows(b, be, "", seqLen, cols, 0, func() { be.SumRows(d, x) })
	}
}
