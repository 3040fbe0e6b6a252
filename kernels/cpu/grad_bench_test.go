package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/cpu/simd"
	"github.com/frognano/frognano/kernels/tensor"
)

// gflops reports 2·flops per call as GFLOP/s.
func gflops(b *testing.B, flops float64) {
	b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkMatMulNN is the input gradient of SmolLM2's Linear layers,
// dx[T,in] = dy[T,out]·W[out,in], for T training rows.
func BenchmarkMatMulNN(b *testing.B) {
	be, r := New(), rand.New(rand.NewPCG(11, 1))
	for _, T := range []int{256, 512} {
		for _, s := range []struct {
			name    string
			out, in int
		}{
			{"q", nHeads * headDim, hidden},
			{"kv", nKV * headDim, hidden},
			{"gate", inter, hidden},
			{"down", hidden, inter},
			{"logits", vocab, hidden},
		} {
			dy, w, dx := randTensor(r, T, s.out), randTensor(r, s.out, s.in), tensor.New(T, s.in)
			b.Run(fmt.Sprintf("%s/T%d/%dx%dx%d", s.name, T, T, s.in, s.out), func(b *testing.B) {
				for b.Loop() {
					be.MatMulNN(dx, dy, w)
				}
				gflops(b, 2*float64(T*s.in*s.out))
			})
		}
	}
}

// BenchmarkMatMulTN is the weight gradient, dW[out,in] += dy[T,out]ᵀ·x[T,in].
func BenchmarkMatMulTN(b *testing.B) {
	be, r := New(), rand.New(rand.NewPCG(12, 1))
	for _, T := range []int{256, 512} {
		for _, s := range []struct {
			name    string
			out, in int
		}{
			{"q", nHeads * headDim, hidden},
			{"kv", nKV * headDim, hidden},
			{"gate", inter, hidden},
			{"down", hidden, inter},
			{"logits", vocab, hidden},
		} {
			dy, x, dw := randTensor(r, T, s.out), randTensor(r, T, s.in), tensor.New(s.out, s.in)
			b.Run(fmt.Sprintf("%s/T%d/%dx%dx%d", s.name, T, s.out, s.in, T), func(b *testing.B) {
				for b.Loop() {
					be.MatMulTN(dw, dy, x, true)
				}
				gflops(b, 2*float64(T*s.in*s.out))
			})
		}
	}
}

// BenchmarkAttentionBackward is one layer's attention backward for a
// sequence of T tokens. FLOPs count the five causal products (half of each
// T×T score matrix): 5·T²·headDim per head.
func BenchmarkAttentionBackward(b *testing.B) {
	forLevels(b, func(b *testing.B) {
		be, r := New(), rand.New(rand.NewPCG(13, 1))
		for _, T := range []int{256, 512} {
			q, k, v := randTensor(r, T, nHeads*headDim), randTensor(r, T, nKV*headDim), randTensor(r, T, nKV*headDim)
			dy := randTensor(r, T, nHeads*headDim)
			dq, dk, dv := tensor.New(T, nHeads*headDim), tensor.New(T, nKV*headDim), tensor.New(T, nKV*headDim)
			b.Run(fmt.Sprintf("T%d", T), func(b *testing.B) {
				for b.Loop() {
					be.AttentionBackward(dq, dk, dv, dy, q, k, v, nHeads, nKV)
				}
				gflops(b, 5*float64(T*T*headDim*nHeads))
			})
		}
	})
}

// BenchmarkTokenLogProbs covers the loss head over a [T, vocab] logits
// tensor; bytes are one read of the logits (and one write for the
// backward).
func BenchmarkTokenLogProbs(b *testing.B) {
	forLevels(b, func(b *testing.B) {
		be, r := New(), rand.New(rand.NewPCG(14, 1))
		for _, T := range []int{256, 512} {
			logits := randTensor(r, T, vocab)
			targets, dlogp, logp := make([]int32, T), make([]float32, T), make([]float32, T)
			for i := range targets {
				targets[i], dlogp[i] = int32(r.IntN(vocab)), float32(r.NormFloat64())
			}
			d := tensor.New(T, vocab)
			b.Run(fmt.Sprintf("forward/T%d", T), func(b *testing.B) {
				b.SetBytes(int64(4 * T * vocab))
				for b.Loop() {
					be.TokenLogProbs(logp, logits, targets)
				}
			})
			b.Run(fmt.Sprintf("backward/T%d", T), func(b *testing.B) {
				b.SetBytes(int64(8 * T * vocab))
				for b.Loop() {
					be.TokenLogProbsBackward(d, logits, targets, dlogp)
				}
			})
		}
	})
}

func BenchmarkRMSNormBackward(b *testing.B) {
	be, r := New(), rand.New(rand.NewPCG(15, 1))
	const T = 512
	x, dy, w := randTensor(r, T, hidden), randTensor(r, T, hidden), randTensor(r, hidden)
	dx, dw := tensor.New(T, hidden), tensor.New(hidden)
	benchRows(b, "", T, hidden, 2, func() { be.RMSNormBackward(dx, dw, dy, x, w, 1e-5) })
}

func BenchmarkSwiGLUBackward(b *testing.B) {
	forLevels(b, func(b *testing.B) {
		be, r := New(), rand.New(rand.NewPCG(16, 1))
		const T = 512
		g, u, dy := randTensor(r, T, inter), randTensor(r, T, inter), randTensor(r, T, inter)
		dg, du := tensor.New(T, inter), tensor.New(T, inter)
		benchRows(b, "", T, inter, 4, func() { be.SwiGLUBackward(dg, du, dy, g, u) })
	})
}

func BenchmarkRoPEBackward(b *testing.B) {
	be, r := New(), rand.New(rand.NewPCG(17, 1))
	const T = 512
	x := randTensor(r, T, nHeads*headDim)
	pos := make([]int32, T)
	for i := range pos {
		pos[i] = int32(i)
	}
	benchRows(b, "", T, nHeads*headDim, 1, func() { be.RoPEBackward(x, x, pos, headDim, 1e5) })
}

func BenchmarkEmbeddingBackward(b *testing.B) {
	be, r := New(), rand.New(rand.NewPCG(18, 1))
	const T = 512
	table, dy := tensor.New(vocab, hidden), randTensor(r, T, hidden)
	ids := make([]int32, T)
	for i := range ids {
		ids[i] = int32(r.IntN(vocab))
	}
	benchRows(b, "", T, hidden, 1, func() { be.EmbeddingBackward(table, dy, ids) })
}

// BenchmarkOptimizer covers the per-step passes over the parameters, on 16M
// of SmolLM2-135M's 135M (an eighth of the memory traffic, at the same
// rate): the squared gradient norm, reading every gradient, and the AdamW
// update, reading p, g, m, v and writing p, m, v.
func BenchmarkOptimizer(b *testing.B) {
	be, r := New(), rand.New(rand.NewPCG(19, 1))
	const n = 1 << 24
	p, g, m, v := randTensor(r, n), randTensor(r, n), tensor.New(n), tensor.New(n)
	b.Run("SumSquares", func(b *testing.B) {
		b.SetBytes(4 * n)
		for b.Loop() {
			be.SumSquares(g)
		}
	})
	b.Run("AdamW", func(b *testing.B) {
		forLevels(b, func(b *testing.B) {
			b.SetBytes(7 * 4 * n)
			o := kernels.AdamWParams{LR: 1e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
			step := 0
			for b.Loop() {
				step++
				be.AdamW(p, g, m, v, o, step)
			}
		})
	})
	b.Run("Axpy", func(b *testing.B) {
		b.SetBytes(3 * 4 * n)
		for b.Loop() {
			be.Axpy(m, g, 0.5)
		}
	})
}

// BenchmarkSoftmaxBackwardRow is the non-product part of AttentionBackward
// for one query row of 512 keys: the recomputed softmax and the scores'
// gradient.
func BenchmarkSoftmaxBackwardRow(b *testing.B) {
	forLevels(b, func(b *testing.B) {
		r := rand.New(rand.NewPCG(20, 1))
		const n = 512
		s0, dp0 := randTensor(r, n).Data(), randTensor(r, n).Data()
		s, dp := make([]float32, n), make([]float32, n)
		b.SetBytes(4 * n)
		for b.Loop() {
			copy(s, s0)
			copy(dp, dp0)
			if simd.On() {
				simd.SoftmaxCausalBackward(s, dp, 1, n, n, 0.125)
			} else {
				softmaxBackwardRow(s, dp, n, 0.125)
			}
		}
	})
}
