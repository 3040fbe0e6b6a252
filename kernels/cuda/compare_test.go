//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/cpu"
	"github.com/frognano/frognano/kernels/kernelstest"
	"github.com/frognano/frognano/kernels/tensor"
)

// The tests in this file run every operation on random inputs on the GPU
// and on its CPU twin (kernels/cpu) and demand |gpu - cpu| ≤ tol + |cpu|·eps,
// sweeping launch configurations and shapes that are not multiples of any
// tile or block size. Both sides accumulate in float32 (the CPU twin partly
// in float64), so eps is float32's 1e-5 and tol grows with the length of
// the sums.

var twin = cpu.New()

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)) }

// randHost is a host tensor of normal values times scale.
func randHost(r *rand.Rand, scale float64, shape ...int) *tensor.Tensor {
	x := tensor.New(shape...)
	for i := range x.Data() {
		x.Data()[i] = float32(r.NormFloat64() * scale)
	}
	return x
}

// fp32 is the element-wise tolerance.
var fp32 = kernelstest.Tolerance{Abs: 1e-5, Rel: 1e-5}

// sumTol is the tolerance for float32 sums of n unit-scale products, the
// one kernelstest uses for the golden files.
func sumTol(n int) kernelstest.Tolerance {
	return kernelstest.Tolerance{Abs: 1e-6 * float64(n+4), Rel: 1e-5}
}

// down copies a device tensor to the host.
func down(b *Backend, x kernels.Tensor) []float32 {
	out := make([]float32, x.(*Tensor).n)
	b.ToHost(out, x)
	return out
}

// maxErr is the largest |got - want| / (tol.Abs + tol.Rel·|want|): at most
// 1 when within tolerance. Logged so a run shows how close it came.
func maxErr(got, want []float32, tol kernelstest.Tolerance) float64 {
	worst := 0.0
	for i := range got {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		worst = max(worst, d/(tol.Abs+tol.Rel*math.Abs(float64(want[i]))))
	}
	return worst
}

// expect compares and records the worst ratio seen for the summary.
func expect(t *testing.T, what string, got []float32, want *tensor.Tensor, tol kernelstest.Tolerance, worst *float64) {
	t.Helper()
	if msg := kernelstest.Mismatch(got, want.Data(), tol); msg != "" {
		t.Errorf("%s: %s", what, msg)
	}
	if worst != nil && len(got) == want.Len() {
		*worst = max(*worst, maxErr(got, want.Data(), tol))
	}
}

// sizes are the matrix sizes of the sweeps: 1, odd sizes below and above a
// tile, and SmolLM2-135M's hidden and intermediate sizes.
var sizes = []int{1, 7, 33, 576, 1536}

var matmulConfigs = []struct {
	name string
	cfg  int
}{{"auto", 0}, {"gemv", 1}, {"tile32", 2}, {"tile64", 3}, {"tile128", 4}}

func TestMatMulMatchesCPU(t *testing.T) {
	b := testBackend(t)
	r := newRand(1)
	worst := 0.0
	for _, m := range sizes {
		for _, n := range sizes {
			for _, k := range sizes {
				a, w := randHost(r, 1, m, k), randHost(r, 1, n, k)
				want := tensor.New(m, n)
				twin.MatMul(want, a, w)
				da, dw := b.FromHost(a), b.FromHost(w)
				for _, c := range matmulConfigs {
					got := b.New(m, n)
					b.with(launch{matmul: c.cfg}).MatMul(got, da, dw)
					expect(t, fmt.Sprintf("%dx%dx%d/%s", m, n, k, c.name), down(b, got), want, sumTol(k), &worst)
				}
			}
		}
	}
	t.Logf("worst |gpu-cpu| / tolerance: %.3f", worst)
}

// TestMatMulUnaligned runs the product on views that start 4 bytes into
// their buffer, so the float4 paths must give way to scalar ones.
func TestMatMulUnaligned(t *testing.T) {
	b := testBackend(t)
	r := newRand(2)
	const m, n, k = 33, 65, 64
	a, w := randHost(r, 1, m, k), randHost(r, 1, n, k)
	want := tensor.New(m, n)
	twin.MatMul(want, a, w)
	shifted := func(h *tensor.Tensor) kernels.Tensor {
		buf := b.New(h.Len() + 1)
		view := b.Reshape(b.Slice(buf, 1, h.Len()+1), h.Shape()...)
		b.Copy(view, b.FromHost(h))
		return view
	}
	for _, c := range matmulConfigs {
		got := b.New(m+1, n)
		dst := b.Slice(b.Reshape(got, (m+1)*n), 1, m*n+1)
		b.with(launch{matmul: c.cfg}).MatMul(b.Reshape(dst, m, n), shifted(a), shifted(w))
		expect(t, c.name, down(b, dst), want, sumTol(k), nil)
	}
}

func TestEmbeddingMatchesCPU(t *testing.T) {
	b := testBackend(t)
	r := newRand(3)
	for _, dim := range []int{1, 7, 33, 576, 1536} {
		table := randHost(r, 1, 1000, dim)
		dt := b.FromHost(table)
		for _, n := range []int{1, 7, 33, 300} {
			ids := make([]int32, n)
			for i := range ids {
				ids[i] = int32(r.IntN(1000))
			}
			ids[0] = 999
			want := tensor.New(n, dim)
			twin.Embedding(want, table, ids)
			got := b.New(n, dim)
			b.Embedding(got, dt, ids)
			expect(t, fmt.Sprintf("%dx%d", n, dim), down(b, got), want, kernelstest.Tolerance{}, nil)
		}
	}
}

var rowBlocks = []int{0, 32, 96, 256, 1024}

func TestRMSNormMatchesCPU(t *testing.T) {
	b := testBackend(t)
	r := newRand(4)
	worst := 0.0
	for _, rows := range []int{1, 7, 33} {
		for _, cols := range sizes {
			x, w := randHost(r, 3, rows, cols), randHost(r, 1, cols)
			want := tensor.New(rows, cols)
			twin.RMSNorm(want, x, w, 1e-5)
			dx, dw := b.FromHost(x), b.FromHost(w)
			for _, bs := range rowBlocks {
				got := b.New(rows, cols)
				b.with(launch{rowBlock: bs}).RMSNorm(got, dx, dw, 1e-5)
				expect(t, fmt.Sprintf("%dx%d/block%d", rows, cols, bs), down(b, got), want, fp32, &worst)
			}
		}
	}
	t.Logf("worst |gpu-cpu| / tolerance: %.3f", worst)
}

func TestRoPEMatchesCPU(t *testing.T) {
	b := testBackend(t)
	r := newRand(5)
	worst := 0.0
	for _, rows := range []int{1, 7, 33} {
		for _, hh := range []struct{ heads, hd int }{{1, 2}, {3, 8}, {9, 64}, {2, 128}, {1, 256}} {
			for _, theta := range []float32{1e4, 1e6} {
				cols := hh.heads * hh.hd
				x := randHost(r, 1, rows, cols)
				pos := make([]int32, rows)
				for i := range pos {
					pos[i] = int32(r.IntN(40000))
				}
				pos[0] = 0
				want := tensor.New(rows, cols)
				twin.RoPE(want, x, pos, hh.hd, theta)
				for _, bs := range rowBlocks {
					dx := b.FromHost(x)
					name := fmt.Sprintf("%dx%dx%d/theta%g/block%d", rows, hh.heads, hh.hd, theta, bs)
					got := b.New(rows, cols)
					b.with(launch{rowBlock: bs}).RoPE(got, dx, pos, hh.hd, theta)
					expect(t, name, down(b, got), want, fp32, &worst)
					b.with(launch{rowBlock: bs}).RoPE(dx, dx, pos, hh.hd, theta)
					expect(t, name+"/in place", down(b, dx), want, fp32, &worst)
				}
			}
		}
	}
	t.Logf("worst |gpu-cpu| / tolerance: %.3f", worst)
}

func TestAttentionMatchesCPU(t *testing.T) {
	b := testBackend(t)
	r := newRand(6)
	configs := []launch{{}, {attnWarps: 1, attnSplits: 1}, {attnWarps: 2, attnSplits: 2}, {attnWarps: 4, attnSplits: 1},
		{attnWarps: 8, attnSplits: 3}, {attnWarps: 3, attnSplits: 7}}
	worst := 0.0
	for _, ts := range []struct{ t, s int }{{1, 1}, {1, 7}, {7, 7}, {3, 33}, {33, 33}, {1, 576}, {7, 576}, {1, 1536}, {33, 1536}, {576, 576}} {
		for _, h := range []struct{ nh, nkv, hd int }{{1, 1, 1}, {2, 1, 7}, {4, 2, 33}, {9, 3, 64}, {4, 1, 128}, {2, 2, 256}} {
			q := randHost(r, 1, ts.t, h.nh*h.hd)
			k, v := randHost(r, 1, ts.s, h.nkv*h.hd), randHost(r, 1, ts.s, h.nkv*h.hd)
			want := tensor.New(ts.t, h.nh*h.hd)
			twin.Attention(want, q, k, v, h.nh, h.nkv)
			dq, dk, dv := b.FromHost(q), b.FromHost(k), b.FromHost(v)
			tol := kernelstest.Tolerance{Abs: 1e-5 + 1e-6*float64(h.hd), Rel: 1e-5}
			for _, c := range configs {
				got := b.New(ts.t, h.nh*h.hd)
				b.with(c).Attention(got, dq, dk, dv, h.nh, h.nkv)
				name := fmt.Sprintf("t%d/s%d/h%d-%d-%d/warps%d-splits%d", ts.t, ts.s, h.nh, h.nkv, h.hd, c.attnWarps, c.attnSplits)
				expect(t, name, down(b, got), want, tol, &worst)
			}
		}
	}
	t.Logf("worst |gpu-cpu| / tolerance: %.3f", worst)
}

// TestAttentionHeadDimLimit checks that a head dimension the kernel cannot
// take is refused before launch, with a message that says why.
func TestAttentionHeadDimLimit(t *testing.T) {
	b := testBackend(t)
	hd := MaxHeadDim + 2
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("no panic")
		} else {
			t.Logf("panicked: %v", r)
		}
	}()
	b.Attention(b.New(1, hd), b.New(1, hd), b.New(1, hd), b.New(1, hd), 1, 1)
}

var elemBlocks = []int{0, 32, 128, 1024}

// elemSizes include lengths that leave a tail after the float4s.
var elemSizes = []int{1, 7, 33, 4032, 50689}

func TestElementwiseMatchesCPU(t *testing.T) {
	b := testBackend(t)
	r := newRand(7)
	worst := 0.0
	for _, n := range elemSizes {
		x, y := randHost(r, 4, n), randHost(r, 1, n)
		for _, op := range []struct {
			name string
			cpu  func(dst, a, b kernels.Tensor)
			gpu  func(b *Backend) func(dst, a, b kernels.Tensor)
		}{
			{"SwiGLU", twin.SwiGLU, func(b *Backend) func(dst, a, b kernels.Tensor) { return b.SwiGLU }},
			{"Add", twin.Add, func(b *Backend) func(dst, a, b kernels.Tensor) { return b.Add }},
		} {
			want := tensor.New(n)
			op.cpu(want, x, y)
			for _, bs := range elemBlocks {
				be := b.with(launch{elemBlock: bs})
				dx, dy := b.FromHost(x), b.FromHost(y)
				got := b.New(n)
				name := fmt.Sprintf("%s/%d/block%d", op.name, n, bs)
				op.gpu(be)(got, dx, dy)
				expect(t, name, down(b, got), want, fp32, &worst)
				op.gpu(be)(dx, dx, dy)
				expect(t, name+"/in place", down(b, dx), want, fp32, &worst)
				if n > 1 { // unaligned views: the scalar path
					sx, sy, sd := b.Slice(dy, 1, n), b.Slice(b.FromHost(y), 1, n), b.New(n-1)
					wantTail := tensor.New(n - 1)
					op.cpu(wantTail, tensor.From(y.Data()[1:], n-1), tensor.From(y.Data()[1:], n-1))
					op.gpu(be)(sd, sx, sy)
					expect(t, name+"/unaligned", down(b, sd), wantTail, fp32, &worst)
				}
			}
		}
	}
	t.Logf("worst |gpu-cpu| / tolerance: %.3f", worst)
}

func TestSoftmaxMatchesCPU(t *testing.T) {
	b := testBackend(t)
	r := newRand(8)
	worst := 0.0
	for _, rows := range []int{1, 7, 33} {
		for _, cols := range []int{1, 7, 33, 576, 1536, 49152} {
			x := randHost(r, 10, rows, cols)
			for _, op := range []struct {
				name string
				log  bool
				cpu  func(dst, x kernels.Tensor)
			}{{"Softmax", false, twin.Softmax}, {"LogSoftmax", true, twin.LogSoftmax}} {
				want := tensor.New(rows, cols)
				op.cpu(want, x)
				for _, bs := range rowBlocks {
					be := b.with(launch{rowBlock: bs})
					dx := b.FromHost(x)
					got := b.New(rows, cols)
					name := fmt.Sprintf("%s/%dx%d/block%d", op.name, rows, cols, bs)
					be.softmax(op.name, got, dx, op.log)
					expect(t, name, down(b, got), want, fp32, &worst)
					be.softmax(op.name, dx, dx, op.log)
					expect(t, name+"/in place", down(b, dx), want, fp32, &worst)
				}
			}
		}
	}
	t.Logf("worst |gpu-cpu| / tolerance: %.3f", worst)
}

// TestDecodeMatchesCPU runs a small decoder layer the way the model does
// (prefill of a prompt, then token-by-token decoding through a KV cache
// written via Slice) on both backends and compares every step.
func TestDecodeMatchesCPU(t *testing.T) {
	b := testBackend(t)
	r := newRand(9)
	const (
		dim, nh, nkv, hd, ff, vocab, steps, prompt = 576, 9, 3, 64, 1536, 1000, 24, 9
		theta                                      = 1e5
	)
	host := map[string]*tensor.Tensor{
		"emb": randHost(r, 1, vocab, dim), "norm": randHost(r, 1, dim),
		"wq": randHost(r, 0.04, nh*hd, dim), "wk": randHost(r, 0.04, nkv*hd, dim), "wv": randHost(r, 0.04, nkv*hd, dim),
		"wo": randHost(r, 0.04, dim, nh*hd), "gate": randHost(r, 0.04, ff, dim), "up": randHost(r, 0.04, ff, dim),
		"down": randHost(r, 0.03, dim, ff),
	}
	ids := make([]int32, steps)
	for i := range ids {
		ids[i] = int32(r.IntN(vocab))
	}
	run := func(be kernels.Backend) []float32 {
		w := map[string]kernels.Tensor{}
		for name, h := range host {
			w[name] = be.FromHost(tensor.From(append([]float32(nil), h.Data()...), h.Shape()...))
		}
		kc, vc := be.New(steps, nkv*hd), be.New(steps, nkv*hd)
		var out []float32
		for p0 := 0; p0 < steps; {
			n := 1
			if p0 == 0 {
				n = prompt
			}
			pos := make([]int32, n)
			for i := range pos {
				pos[i] = int32(p0 + i)
			}
			x, h := be.New(n, dim), be.New(n, dim)
			be.Embedding(x, w["emb"], ids[p0:p0+n])
			be.RMSNorm(h, x, w["norm"], 1e-5)
			q, ks, vs := be.New(n, nh*hd), be.Slice(kc, p0, p0+n), be.Slice(vc, p0, p0+n)
			be.MatMul(q, h, w["wq"])
			be.MatMul(ks, h, w["wk"])
			be.MatMul(vs, h, w["wv"])
			be.RoPE(q, q, pos, hd, theta)
			be.RoPE(ks, ks, pos, hd, theta)
			att, o := be.New(n, nh*hd), be.New(n, dim)
			be.Attention(att, q, be.Slice(kc, 0, p0+n), be.Slice(vc, 0, p0+n), nh, nkv)
			be.MatMul(o, att, w["wo"])
			be.Add(x, x, o)
			be.RMSNorm(h, x, w["norm"], 1e-5)
			g, u := be.New(n, ff), be.New(n, ff)
			be.MatMul(g, h, w["gate"])
			be.MatMul(u, h, w["up"])
			be.SwiGLU(g, g, u)
			be.MatMul(o, g, w["down"])
			be.Add(x, x, o)
			logits := be.New(n, vocab)
			be.MatMul(logits, x, w["emb"])
			be.LogSoftmax(logits, logits)
			step := make([]float32, n*vocab)
			be.ToHost(step, logits)
			out = append(out, step...)
			p0 += n
		}
		return out
	}
	want, got := run(twin), run(b)
	tol := kernelstest.Tolerance{Abs: 1e-3, Rel: 1e-4}
	if msg := kernelstest.Mismatch(got, want, tol); msg != "" {
		t.Errorf("decoder log-probabilities differ: %s", msg)
	}
	t.Logf("worst |gpu-cpu| / tolerance: %.3f", maxErr(got, want, tol))
}
