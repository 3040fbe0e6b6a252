//go:build cuda

package cuda

import (
	"fmt"
	"testing"

	"github.com/frognano/frognano/kernels"
)

// The benchmarks use kernels/cpu's shapes (SmolLM2-135M), so the two
// backends' figures line up name for name. Kernels are queued
// asynchronously; each benchmark waits for the device before the clock
// stops, so the time is the device's, launch overhead included.

const (
	hidden  = 576
	inter   = 1536
	vocab   = 49152
	nHeads  = 9
	nKV     = 3
	headDim = 64
)

func randDev(b *Backend, seed uint64, shape ...int) kernels.Tensor {
	return b.FromHost(randHost(newRand(seed), 1, shape...))
}

// timed runs op b.N times and waits for the device.
func timed(b *testing.B, be *Backend, op func()) {
	b.ResetTimer()
	for range b.N {
		op()
	}
	if err := be.Synchronize(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
}

// BenchmarkMatMul reports GFLOP/s (2·m·n·k per product) and, through
// SetBytes, the rate at which the weight matrix is streamed. The two large
// shapes also run under each forced tile size, to check the automatic
// choice.
func BenchmarkMatMul(b *testing.B) {
	be := testBackend(b)
	for _, s := range []struct{ m, n, k int }{
		{1, inter, hidden},
		{1, hidden, inter},
		{1, vocab, hidden},
		{16, inter, hidden},
		{128, inter, hidden},
		{128, vocab, hidden},
	} {
		a, w, c := randDev(be, 1, s.m, s.k), randDev(be, 2, s.n, s.k), be.New(s.m, s.n)
		configs := matmulConfigs[:1]
		if s.m == 128 {
			configs = matmulConfigs
		}
		for _, cfg := range configs {
			name := fmt.Sprintf("%dx%dx%d", s.m, s.n, s.k)
			if cfg.cfg != 0 {
				name += "/" + cfg.name
			}
			bc := be.with(launch{matmul: cfg.cfg})
			b.Run(name, func(b *testing.B) {
				b.SetBytes(int64(4 * s.n * s.k))
				timed(b, be, func() { bc.MatMul(c, a, w) })
				b.ReportMetric(2*float64(s.m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// benchRows runs op over [rows, cols] inputs, counting one read of each
// input and one write of the output.
func benchRows(b *testing.B, be *Backend, name string, rows, cols, inputs int, op func()) {
	b.Run(fmt.Sprintf("%s/%dx%d", name, rows, cols), func(b *testing.B) {
		b.SetBytes(int64(4 * rows * cols * (inputs + 1)))
		timed(b, be, op)
	})
}

func BenchmarkRMSNorm(b *testing.B) {
	be := testBackend(b)
	w := randDev(be, 2, hidden)
	for _, rows := range []int{1, 128} {
		x, y := randDev(be, 3, rows, hidden), be.New(rows, hidden)
		benchRows(b, be, "", rows, hidden, 1, func() { be.RMSNorm(y, x, w, 1e-5) })
	}
}

func BenchmarkRoPE(b *testing.B) {
	be := testBackend(b)
	for _, rows := range []int{1, 128} {
		x := randDev(be, 3, rows, nHeads*headDim)
		pos := make([]int32, rows)
		for i := range pos {
			pos[i] = int32(1000 + i)
		}
		benchRows(b, be, "", rows, nHeads*headDim, 1, func() { be.RoPE(x, x, pos, headDim, 1e5) })
	}
}

func BenchmarkSwiGLU(b *testing.B) {
	be := testBackend(b)
	for _, rows := range []int{1, 128} {
		g, u, y := randDev(be, 4, rows, inter), randDev(be, 5, rows, inter), be.New(rows, inter)
		benchRows(b, be, "", rows, inter, 2, func() { be.SwiGLU(y, g, u) })
	}
}

func BenchmarkAdd(b *testing.B) {
	be := testBackend(b)
	for _, rows := range []int{1, 128} {
		x, y, z := randDev(be, 5, rows, hidden), randDev(be, 6, rows, hidden), be.New(rows, hidden)
		benchRows(b, be, "", rows, hidden, 2, func() { be.Add(z, x, y) })
	}
}

func BenchmarkSoftmax(b *testing.B) {
	be := testBackend(b)
	for _, rows := range []int{1, 16} {
		x, y := randDev(be, 6, rows, vocab), be.New(rows, vocab)
		benchRows(b, be, "Softmax", rows, vocab, 1, func() { be.Softmax(y, x) })
		benchRows(b, be, "LogSoftmax", rows, vocab, 1, func() { be.LogSoftmax(y, x) })
	}
}

func BenchmarkEmbedding(b *testing.B) {
	be := testBackend(b)
	table := randDev(be, 7, vocab, hidden)
	r := newRand(7)
	for _, rows := range []int{1, 128} {
		ids := make([]int32, rows)
		for i := range ids {
			ids[i] = int32(r.IntN(vocab))
		}
		y := be.New(rows, hidden)
		benchRows(b, be, "", rows, hidden, 1, func() { be.Embedding(y, table, ids) })
	}
}

// BenchmarkAttention covers one decoding step against a long cache and a
// full causal pass; bytes are q, k, v and the output once each, and
// GFLOP/s counts the 4·headDim operations of each (query, visible key,
// head).
func BenchmarkAttention(b *testing.B) {
	be := testBackend(b)
	for _, s := range []struct{ t, s int }{{1, 512}, {1, 2048}, {128, 128}, {512, 512}} {
		q, k, v := randDev(be, 8, s.t, nHeads*headDim), randDev(be, 9, s.s, nKV*headDim), randDev(be, 10, s.s, nKV*headDim)
		out := be.New(s.t, nHeads*headDim)
		visible := 0
		for i := range s.t {
			visible += s.s - s.t + i + 1
		}
		b.Run(fmt.Sprintf("t%d/s%d", s.t, s.s), func(b *testing.B) {
			b.SetBytes(int64(4 * (2*s.t*nHeads*headDim + 2*s.s*nKV*headDim)))
			timed(b, be, func() { be.Attention(out, q, k, v, nHeads, nKV) })
			b.ReportMetric(4*float64(headDim*nHeads*visible)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
