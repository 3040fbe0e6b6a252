package cpu

import (
	"fmt"
	"github.com/frognano/frognano/kernels"
	"math/rand/v2"
	"testing"

	"github.com/frognano/frognano/kernels/cpu/simd"
	"github.com/frognano/frognano/kernels/tensor"
)

// Sizes of SmolLM2-135M, the default policy.
const (
	hidden  = 576
	inter   = 1536
	vocab   = 49152
	nHeads  = 9
	nKV     = 3
	headDim = 64
)

func randTensor(r *rand.Rand, shape ...int) *tensor.Tensor {
	x := tensor.New(shape...)
	for i := range x.Data() {
		x.Data()[i] = float32(r.NormFloat64())
	}
	return x
}

// BenchmarkMatMul reports GFLOP/s (2·m·n·k per product) and, through
// SetBytes, the rate at which the weight matrix b is streamed, the limit for
// a single decoding row.
func BenchmarkMatMul(b *testing.B) {
	be := New()
	r := rand.New(rand.NewPCG(1, 1))
	for _, s := range []struct{ m, n, k int }{
		{1, inter, hidden},   // decode: gate/up projection
		{1, hidden, inter},   // decode: down projection
		{1, vocab, hidden},   // decode: logits
		{16, inter, hidden},  // 16 sequences decoding together
		{128, inter, hidden}, // prefill / training rows
		{128, vocab, hidden}, // logits for 128 rows
	} {
		a, w, c := randTensor(r, s.m, s.k), randTensor(r, s.n, s.k), tensor.New(s.m, s.n)
		b.Run(fmt.Sprintf("%dx%dx%d", s.m, s.n, s.k), func(b *testing.B) {
			b.SetBytes(int64(4 * s.n * s.k))
			for b.Loop() {
				be.MatMul(c, a, w)
			}
			b.ReportMetric(2*float64(s.m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// benchRows runs op over [rows, cols] inputs, counting one read of each
// input and one write of the output.
func benchRows(b *testing.B, name string, rows, cols, inputs int, op func()) {
	b.Run(fmt.Sprintf("%s/%dx%d", name, rows, cols), func(b *testing.B) {
		b.SetBytes(int64(4 * rows * cols * (inputs + 1)))
		for b.Loop() {
			op()
		}
	})
}

func BenchmarkRMSNorm(b *testing.B) {
	forLevels(b, func(b *testing.B) {
		be, r := New(), rand.New(rand.NewPCG(2, 2))
		w := randTensor(r, hidden)
		for _, rows := range []int{1, 128} {
			x, y := randTensor(r, rows, hidden), tensor.New(rows, hidden)
			benchRows(b, "", rows, hidden, 1, func() { be.RMSNorm(y, x, w, 1e-5) })
		}
	})
}

func BenchmarkRoPE(b *testing.B) {
	be, r := New(), rand.New(rand.NewPCG(3, 3))
	for _, rows := range []int{1, 128} {
		x := randTensor(r, rows, nHeads*headDim)
		pos := make([]int32, rows)
		for i := range pos {
			pos[i] = int32(1000 + i)
		}
		benchRows(b, "", rows, nHeads*headDim, 1, func() { be.RoPE(x, x, pos, headDim, 1e5) })
	}
}

func BenchmarkSwiGLU(b *testing.B) {
	forLevels(b, func(b *testing.B) {
		be, r := New(), rand.New(rand.NewPCG(4, 4))
		for _, rows := range []int{1, 128} {
			g, u, y := randTensor(r, rows, inter), randTensor(r, rows, inter), tensor.New(rows, inter)
			benchRows(b, "", rows, inter, 2, func() { be.SwiGLU(y, g, u) })
		}
	})
}

func BenchmarkAdd(b *testing.B) {
	be, r := New(), rand.New(rand.NewPCG(5, 5))
	for _, rows := range []int{1, 128} {
		x, y, z := randTensor(r, rows, hidden), randTensor(r, rows, hidden), tensor.New(rows, hidden)
		benchRows(b, "", rows, hidden, 2, func() { be.Add(z, x, y) })
	}
}

func BenchmarkSoftmax(b *testing.B) {
	be, r := New(), rand.New(rand.NewPCG(6, 6))
	for _, rows := range []int{1, 16} {
		x, y := randTensor(r, rows, vocab), tensor.New(rows, vocab)
		benchRows(b, "Softmax", rows, vocab, 1, func() { be.Softmax(y, x) })
		benchRows(b, "LogSoftmax", rows, vocab, 1, func() { be.LogSoftmax(y, x) })
	}
}

func BenchmarkEmbedding(b *testing.B) {
	be, r := New(), rand.New(rand.NewPCG(7, 7))
	table := randTensor(r, vocab, hidden)
	for _, rows := range []int{1, 128} {
		ids := make([]int32, rows)
		for i := range ids {
			ids[i] = int32(r.IntN(vocab))
		}
		y := tensor.New(rows, hidden)
		benchRows(b, "", rows, hidden, 1, func() { be.Embedding(y, table, ids) })
	}
}

// BenchmarkAttention covers one decoding step against a long cache and a
// full causal pass; bytes are q, k, v and the output once each.
func BenchmarkAttention(b *testing.B) {
	forLevels(b, func(b *testing.B) {
		be, r := New(), rand.New(rand.NewPCG(8, 8))
		for _, s := range []struct{ t, s int }{{1, 512}, {1, 2048}, {128, 128}, {512, 512}} {
			q, k, v := randTensor(r, s.t, nHeads*headDim), randTensor(r, s.s, nKV*headDim), randTensor(r, s.s, nKV*headDim)
			out := tensor.New(s.t, nHeads*headDim)
			b.Run(fmt.Sprintf("t%d/s%d", s.t, s.s), func(b *testing.B) {
				b.SetBytes(int64(4 * (2*s.t*nHeads*headDim + 2*s.s*nKV*headDim)))
				for b.Loop() {
					be.Attention(out, q, k, v, nHeads, nKV)
				}
			})
		}
	})
}

// BenchmarkCausalSoftmaxRow is the non-product part of Attention for one
// query row of 512 keys.
func BenchmarkCausalSoftmaxRow(b *testing.B) {
	forLevels(b, func(b *testing.B) {
		r := rand.New(rand.NewPCG(9, 1))
		const n = 512
		s0 := randTensor(r, n).Data()
		s := make([]float32, n)
		b.SetBytes(4 * n)
		for b.Loop() {
			copy(s, s0)
			if simd.On() {
				simd.SoftmaxCausal(s, 1, n, n, 0.125)
			} else {
				causalSoftmax(s, n, 0.125)
			}
		}
	})
}

// BenchmarkAttentionGroup is one decoding step of a GRPO group's four
// sequences over a 1,024-token prompt and 128 tokens of their own each,
// through 30 layers (SmolLM2-135M's), so the caches exceed the processor's:
// "copies" gives each sequence its own copy of the prompt's keys and
// values (Attention over its whole cache), "shared" has the four read one
// copy (AttentionPrefix), as caches that share a prefix do, and "grouped"
// reads it once for the four (AttentionPrefixGroup), as a decoding step
// of caches that share a prefix does.
func BenchmarkAttentionGroup(b *testing.B) {
	const seqs, prompt, own, layers = 4, 1024, 128, 30
	be, r := New(), rand.New(rand.NewPCG(9, 9))
	kv := nKV * headDim
	q := make([]*tensor.Tensor, seqs)
	out := make([]*tensor.Tensor, seqs)
	for i := range q {
		q[i], out[i] = randTensor(r, 1, nHeads*headDim), tensor.New(1, nHeads*headDim)
	}
	type layer struct {
		kb, vb *tensor.Tensor   // the prompt, once
		k, v   []*tensor.Tensor // per sequence: its own positions
		kc, vc []*tensor.Tensor // per sequence: a whole copy
	}
	ls := make([]layer, layers)
	for l := range ls {
		L := &ls[l]
		L.kb, L.vb = randTensor(r, prompt, kv), randTensor(r, prompt, kv)
		for range seqs {
			k, v := randTensor(r, own, kv), randTensor(r, own, kv)
			L.k, L.v = append(L.k, k), append(L.v, v)
			kc, vc := tensor.New(prompt+own, kv), tensor.New(prompt+own, kv)
			copy(kc.Data(), L.kb.Data())
			copy(kc.Data()[prompt*kv:], k.Data())
			copy(vc.Data(), L.vb.Data())
			copy(vc.Data()[prompt*kv:], v.Data())
			L.kc, L.vc = append(L.kc, kc), append(L.vc, vc)
		}
	}
	b.Run("copies", func(b *testing.B) {
		for b.Loop() {
			for l := range ls {
				for i := range seqs {
					be.Attention(out[i], q[i], ls[l].kc[i], ls[l].vc[i], nHeads, nKV)
				}
			}
		}
	})
	b.Run("shared", func(b *testing.B) {
		for b.Loop() {
			for l := range ls {
				for i := range seqs {
					be.AttentionPrefix(out[i], q[i], ls[l].kb, ls[l].vb, ls[l].k[i], ls[l].v[i], nHeads, nKV)
				}
			}
		}
	})
	dst, qs := make([]kernels.Tensor, seqs), make([]kernels.Tensor, seqs)
	for i := range seqs {
		dst[i], qs[i] = out[i], q[i]
	}
	ks, vs := make([][]kernels.Tensor, layers), make([][]kernels.Tensor, layers)
	for l := range ls {
		for i := range seqs {
			ks[l], vs[l] = append(ks[l], ls[l].k[i]), append(vs[l], ls[l].v[i])
		}
	}
	b.Run("grouped", func(b *testing.B) {
		for b.Loop() {
			for l := range ls {
				be.AttentionPrefixGroup(dst, qs, ls[l].kb, ls[l].vb, ks[l], vs[l], nHeads, nKV)
			}
		}
	})
}
