//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"testing"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/kernelstest"
	"github.com/frognano/frognano/kernels/tensor"
)

// The training operations: the gradient conformance suite (finite
// differences and PyTorch golden gradients), then every operation on random
// inputs against the CPU twin under swept launch configurations, as
// compare_test.go does for the forward ones, then the bf16 products.

// gradTwin is the CPU twin as a kernels.GradBackend.
var gradTwin kernels.GradBackend = twin

func TestGradConformance(t *testing.T) {
	kernelstest.RunGrad(t, testBackend(t), "../testdata")
}

// TestGradConformanceConfigs reruns the gradient suite with each kernel's
// launch configuration forced away from the library's choice.
func TestGradConformanceConfigs(t *testing.T) {
	b := testBackend(t)
	for _, c := range []struct {
		name string
		cfg  launch
	}{
		{"tile32", launch{gemm: 2}},
		{"tile64", launch{gemm: 3}},
		{"tile128", launch{gemm: 4}},
		{"blocks32", launch{rowBlock: 32, elemBlock: 32}},
		{"blocks1024", launch{rowBlock: 1024, elemBlock: 1024}},
		{"attention1", launch{attnBwd: 1}},
		{"attention3", launch{attnBwd: 3}},
		{"attention32", launch{attnBwd: 32}},
	} {
		t.Run(c.name, func(t *testing.T) { kernelstest.RunGrad(t, b.with(c.cfg), "../testdata") })
	}
}

// gemmConfigs are the fp32 tiles of MatMulNN and MatMulTN.
var gemmConfigs = []struct {
	name string
	cfg  int
}{{"auto", 0}, {"tile32", 2}, {"tile64", 3}, {"tile128", 4}}

// gradSizes are the sweeps' matrix sizes: 1, sizes that are not multiples
// of any tile (or of 4, so the scalar loads run), and SmolLM2's hidden size.
var gradSizes = []int{1, 7, 33, 130, 576}

// shifted uploads h into a view that starts one float into its buffer, so
// that no float4 path may run on it.
func shifted(b *Backend, h *tensor.Tensor) kernels.Tensor {
	buf := b.New(h.Len() + 1)
	view := b.Reshape(b.Slice(buf, 1, h.Len()+1), h.Shape()...)
	b.Copy(view, b.FromHost(h))
	return view
}

func TestMatMulNNMatchesCPU(t *testing.T) {
	b := testBackend(t)
	r := newRand(21)
	worst := 0.0
	for _, m := range gradSizes {
		for _, n := range gradSizes {
			for _, k := range gradSizes {
				a, w := randHost(r, 1, m, k), randHost(r, 1, k, n)
				want := tensor.New(m, n)
				gradTwin.MatMulNN(want, a, w)
				da, dw := b.FromHost(a), b.FromHost(w)
				for _, c := range gemmConfigs {
					got := b.New(m, n)
					b.with(launch{gemm: c.cfg}).MatMulNN(got, da, dw)
					expect(t, fmt.Sprintf("%dx%dx%d/%s", m, n, k, c.name), down(b, got), want, sumTol(k), &worst)
				}
				if m == 33 && k == 130 { // unaligned operands
					got := b.New(m, n)
					b.MatMulNN(got, shifted(b, a), shifted(b, w))
					expect(t, fmt.Sprintf("%dx%dx%d/unaligned", m, n, k), down(b, got), want, sumTol(k), &worst)
				}
			}
		}
	}
	t.Logf("worst |gpu-cpu| / tolerance: %.3f", worst)
}

func TestMatMulTNMatchesCPU(t *testing.T) {
	b := testBackend(t)
	r := newRand(22)
	worst := 0.0
	for _, m := range gradSizes {
		for _, n := range gradSizes {
			for _, k := range gradSizes {
				a, y, d0 := randHost(r, 1, m, n), randHost(r, 1, m, k), randHost(r, 1, n, k)
				want := tensor.New(n, k)
				gradTwin.MatMulTN(want, a, y, false)
				wantAcc := tensor.From(append([]float32(nil), d0.Data()...), n, k)
				gradTwin.MatMulTN(wantAcc, a, y, true)
				da, dy := b.FromHost(a), b.FromHost(y)
				for _, c := range gemmConfigs {
					be := b.with(launch{gemm: c.cfg})
					name := fmt.Sprintf("%dx%dx%d/%s", m, n, k, c.name)
					got := b.FromHost(randHost(r, 1, n, k)) // overwritten
					be.MatMulTN(got, da, dy, false)
					expect(t, name, down(b, got), want, sumTol(m), &worst)
					acc := b.FromHost(d0)
					be.MatMulTN(acc, da, dy, true)
					expect(t, name+"/accumulate", down(b, acc), wantAcc, sumTol(m), &worst)
				}
				if n == 33 && m == 130 {
					acc := shifted(b, d0)
					b.MatMulTN(acc, shifted(b, a), shifted(b, y), true)
					expect(t, fmt.Sprintf("%dx%dx%d/unaligned", m, n, k), down(b, acc), wantAcc, sumTol(m), &worst)
				}
			}
		}
	}
	t.Logf("worst |gpu-cpu| / tolerance: %.3f", worst)
}

// TestMatMulGradSmolLM2 runs the products of one SmolLM2 MLP layer's
// backward at T=512, the shapes the benchmarks time.
func TestMatMulGradSmolLM2(t *testing.T) {
	b := testBackend(t)
	r := newRand(23)
	const T = 512
	for _, s := range []struct{ out, in int }{{inter, hidden}, {hidden, inter}, {nKV * headDim, hidden}} {
		x, w, dy := randHost(r, 1, T, s.in), randHost(r, 0.05, s.out, s.in), randHost(r, 1, T, s.out)
		wantDx, wantDw := tensor.New(T, s.in), tensor.New(s.out, s.in)
		gradTwin.MatMulNN(wantDx, dy, w)
		gradTwin.MatMulTN(wantDw, dy, x, false)
		dx, dw := b.New(T, s.in), b.New(s.out, s.in)
		b.MatMulNN(dx, b.FromHost(dy), b.FromHost(w))
		b.MatMulTN(dw, b.FromHost(dy), b.FromHost(x), false)
		name := fmt.Sprintf("%dx%d", s.out, s.in)
		expect(t, name+"/dx", down(b, dx), wantDx, sumTol(s.out), nil)
		expect(t, name+"/dw", down(b, dw), wantDw, sumTol(T), nil)
	}
}

func TestAttentionBackwardMatchesCPU(t *testing.T) {
	b := testBackend(t)
	r := newRand(24)
	worst := 0.0
	for _, sh := range []struct{ t, nh, nkv, hd int }{
		{1, 1, 1, 1}, {7, 2, 1, 7}, {33, 4, 2, 33}, {100, 6, 2, 16}, {130, 9, 3, 64},
		{64, 4, 1, 128}, {40, 2, 2, 256}, {512, nHeads, nKV, headDim},
	} {
		qc, kc := sh.nh*sh.hd, sh.nkv*sh.hd
		q, k, v := randHost(r, 1, sh.t, qc), randHost(r, 1, sh.t, kc), randHost(r, 1, sh.t, kc)
		dy := randHost(r, 1, sh.t, qc)
		wq, wk, wv := tensor.New(sh.t, qc), tensor.New(sh.t, kc), tensor.New(sh.t, kc)
		gradTwin.AttentionBackward(wq, wk, wv, dy, q, k, v, sh.nh, sh.nkv)
		gy, gq, gk, gv := b.FromHost(dy), b.FromHost(q), b.FromHost(k), b.FromHost(v)
		tol := kernelstest.Tolerance{Abs: 5e-5, Rel: 1e-4}
		for _, warps := range []int{0, 1, 3, 8, 32} {
			dq, dk, dv := b.New(sh.t, qc), b.New(sh.t, kc), b.New(sh.t, kc)
			b.with(launch{attnBwd: warps}).AttentionBackward(dq, dk, dv, gy, gq, gk, gv, sh.nh, sh.nkv)
			name := fmt.Sprintf("t%d/h%d-%d-%d/warps%d", sh.t, sh.nh, sh.nkv, sh.hd, warps)
			expect(t, name+"/dq", down(b, dq), wq, tol, &worst)
			expect(t, name+"/dk", down(b, dk), wk, tol, &worst)
			expect(t, name+"/dv", down(b, dv), wv, tol, &worst)
		}
	}
	t.Logf("worst |gpu-cpu| / tolerance: %.3f", worst)
}

func TestRMSNormBackwardMatchesCPU(t *testing.T) {
	b := testBackend(t)
	r := newRand(25)
	worst := 0.0
	for _, rows := range []int{1, 7, 33, 300} {
		for _, cols := range []int{1, 7, 33, 576, 1536} {
			x, w, dy, dw0 := randHost(r, 3, rows, cols), randHost(r, 1, cols), randHost(r, 1, rows, cols), randHost(r, 1, cols)
			wantDx := tensor.New(rows, cols)
			wantDw := tensor.From(append([]float32(nil), dw0.Data()...), cols)
			gradTwin.RMSNormBackward(wantDx, wantDw, dy, x, w, 1e-5)
			dxTol := kernelstest.Tolerance{Abs: 1e-6 * float64(cols+4), Rel: 1e-4}
			dwTol := kernelstest.Tolerance{Abs: 1e-6 * float64(rows+4), Rel: 1e-4}
			gx, gw := b.FromHost(x), b.FromHost(w)
			for _, bs := range rowBlocks {
				be := b.with(launch{rowBlock: bs})
				name := fmt.Sprintf("%dx%d/block%d", rows, cols, bs)
				dx, dw := b.New(rows, cols), b.FromHost(dw0)
				be.RMSNormBackward(dx, dw, b.FromHost(dy), gx, gw, 1e-5)
				expect(t, name+"/dx", down(b, dx), wantDx, dxTol, &worst)
				expect(t, name+"/dweight", down(b, dw), wantDw, dwTol, &worst)
				in, dw := b.FromHost(dy), b.FromHost(dw0)
				be.RMSNormBackward(in, dw, in, gx, gw, 1e-5)
				expect(t, name+"/dx in place", down(b, in), wantDx, dxTol, &worst)
				expect(t, name+"/dweight in place", down(b, dw), wantDw, dwTol, &worst)
			}
		}
	}
	t.Logf("worst |gpu-cpu| / tolerance: %.3f", worst)
}

func TestRoPEBackwardMatchesCPU(t *testing.T) {
	b := testBackend(t)
	r := newRand(26)
	worst := 0.0
	for _, rows := range []int{1, 33} {
		for _, hh := range []struct{ heads, hd int }{{1, 2}, {3, 8}, {9, 64}, {1, 256}} {
			cols := hh.heads * hh.hd
			dy := randHost(r, 1, rows, cols)
			pos := make([]int32, rows)
			for i := range pos {
				pos[i] = int32(r.IntN(40000))
			}
			want := tensor.New(rows, cols)
			gradTwin.RoPEBackward(want, dy, pos, hh.hd, 1e5)
			for _, bs := range rowBlocks {
				be := b.with(launch{rowBlock: bs})
				name := fmt.Sprintf("%dx%dx%d/block%d", rows, hh.heads, hh.hd, bs)
				got := b.New(rows, cols)
				be.RoPEBackward(got, b.FromHost(dy), pos, hh.hd, 1e5)
				expect(t, name, down(b, got), want, fp32, &worst)
				in := b.FromHost(dy)
				be.RoPEBackward(in, in, pos, hh.hd, 1e5)
				expect(t, name+"/in place", down(b, in), want, fp32, &worst)
			}
		}
	}
	t.Logf("worst |gpu-cpu| / tolerance: %.3f", worst)
}

// TestEmbeddingBackwardMatchesCPU demands the CPU twin's bits: both add
// each id's rows to its table row one at a time, in order.
func TestEmbeddingBackwardMatchesCPU(t *testing.T) {
	b := testBackend(t)
	r := newRand(27)
	for _, dim := range []int{1, 7, 576} {
		for _, n := range []int{1, 33, 700} {
			const vocab = 50
			table, dy := randHost(r, 1, vocab, dim), randHost(r, 1, n, dim)
			ids := make([]int32, n)
			for i := range ids {
				ids[i] = int32(r.IntN(vocab)) // 700 ids over 50 rows repeat a lot
			}
			want := tensor.From(append([]float32(nil), table.Data()...), vocab, dim)
			gradTwin.EmbeddingBackward(want, dy, ids)
			got := b.FromHost(table)
			b.EmbeddingBackward(got, b.FromHost(dy), ids)
			expect(t, fmt.Sprintf("%dx%d", n, dim), down(b, got), want, kernelstest.Tolerance{}, nil)
		}
	}
}

func TestSumRowsMatchesCPU(t *testing.T) {
	b := testBackend(t)
	r := newRand(28)
	worst := 0.0
	for _, rows := range []int{1, 7, 63, 64, 65, 4097} {
		for _, cols := range []int{1, 33, 576} {
			x, d0 := randHost(r, 1, rows, cols), randHost(r, 1, cols)
			want := tensor.From(append([]float32(nil), d0.Data()...), cols)
			gradTwin.SumRows(want, x)
			got := b.FromHost(d0)
			b.SumRows(got, b.FromHost(x))
			expect(t, fmt.Sprintf("%dx%d", rows, cols), down(b, got), want, sumTol(rows), &worst)
		}
	}
	t.Logf("worst |gpu-cpu| / tolerance: %.3f", worst)
}

func TestSwiGLUBackwardMatchesCPU(t *testing.T) {
	b := testBackend(t)
	r := newRand(29)
	worst := 0.0
	tol := kernelstest.Tolerance{Abs: 1e-6, Rel: 1e-5}
	for _, n := range elemSizes {
		g, u, dy := randHost(r, 4, n), randHost(r, 1, n), randHost(r, 1, n)
		wantG, wantU := tensor.New(n), tensor.New(n)
		gradTwin.SwiGLUBackward(wantG, wantU, dy, g, u)
		for _, bs := range elemBlocks {
			be := b.with(launch{elemBlock: bs})
			name := fmt.Sprintf("%d/block%d", n, bs)
			dg, du := b.New(n), b.New(n)
			be.SwiGLUBackward(dg, du, b.FromHost(dy), b.FromHost(g), b.FromHost(u))
			expect(t, name+"/dgate", down(b, dg), wantG, tol, &worst)
			expect(t, name+"/dup", down(b, du), wantU, tol, &worst)
			// In place, as the MLP backward runs it: dgate over gate, dup over up.
			ig, iu := b.FromHost(g), b.FromHost(u)
			be.SwiGLUBackward(ig, iu, b.FromHost(dy), ig, iu)
			expect(t, name+"/dgate in place", down(b, ig), wantG, tol, &worst)
			expect(t, name+"/dup in place", down(b, iu), wantU, tol, &worst)
		}
	}
	t.Logf("worst |gpu-cpu| / tolerance: %.3f", worst)
}

func TestTokenLogProbsMatchesCPU(t *testing.T) {
	b := testBackend(t)
	r := newRand(30)
	worst := 0.0
	for _, rows := range []int{1, 7, 33} {
		for _, cols := range []int{1, 7, 33, 1536, vocab} {
			x := randHost(r, 10, rows, cols)
			targets, dlogp := make([]int32, rows), make([]float32, rows)
			for i := range targets {
				targets[i] = int32(r.IntN(cols))
				dlogp[i] = float32(r.NormFloat64())
			}
			dlogp[rows/2] = 0 // a token outside the loss: its row is zeroed unread
			want := make([]float32, rows)
			gradTwin.TokenLogProbs(want, x, targets)
			wantD := tensor.New(rows, cols)
			gradTwin.TokenLogProbsBackward(wantD, x, targets, dlogp)
			masked := append([]float32(nil), x.Data()...)
			masked[(rows/2)*cols] = float32(math.NaN())
			for _, bs := range rowBlocks {
				be := b.with(launch{rowBlock: bs})
				name := fmt.Sprintf("%dx%d/block%d", rows, cols, bs)
				gx := b.FromHost(x)
				got := make([]float32, rows)
				be.TokenLogProbs(got, gx, targets)
				expect(t, name+"/logp", got, tensor.From(want, rows), kernelstest.Tolerance{Abs: 2e-5, Rel: 1e-6}, &worst)
				d := b.New(rows, cols)
				be.TokenLogProbsBackward(d, gx, targets, dlogp)
				expect(t, name+"/dlogits", down(b, d), wantD, kernelstest.Tolerance{Abs: 1e-6, Rel: 1e-5}, &worst)
				in := b.FromHost(tensor.From(append([]float32(nil), masked...), rows, cols))
				be.TokenLogProbsBackward(in, in, targets, dlogp)
				expect(t, name+"/dlogits in place", down(b, in), wantD, kernelstest.Tolerance{Abs: 1e-6, Rel: 1e-5}, &worst)
			}
		}
	}
	t.Logf("worst |gpu-cpu| / tolerance: %.3f", worst)
}

// TestOptimizerOpsMatchCPU: Axpy, Scale, Fill and AdamW repeat the CPU
// twin's float32 operations in its order without FMAs, so on amd64, where
// Go does not fuse multiply-adds either, the bits agree; ulps allows the
// rounding of the multiply-adds Go fuses on arm64. SumSquares, float64 in
// another order, agrees to 1e-10 relative.
func TestOptimizerOpsMatchCPU(t *testing.T) {
	b := testBackend(t)
	ulps := kernelstest.Tolerance{Abs: 1e-30, Rel: 1e-6}
	worst := 0.0
	r := newRand(31)
	o := kernels.AdamWParams{LR: 3e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	for _, n := range elemSizes {
		for _, bs := range elemBlocks {
			be := b.with(launch{elemBlock: bs})
			name := fmt.Sprintf("%d/block%d", n, bs)
			x, y := randHost(r, 1, n), randHost(r, 1, n)
			want := tensor.From(append([]float32(nil), y.Data()...), n)
			gradTwin.Axpy(want, x, -0.37)
			gradTwin.Scale(want, 1.7)
			got := b.FromHost(y)
			be.Axpy(got, b.FromHost(x), -0.37)
			be.Scale(got, 1.7)
			expect(t, name+"/Axpy, Scale", down(b, got), want, ulps, &worst)
			if n > 1 { // unaligned views: the scalar paths
				sx, sy := shifted(b, tensor.From(x.Data()[1:], n-1)), shifted(b, tensor.From(y.Data()[1:], n-1))
				wantTail := tensor.From(append([]float32(nil), y.Data()[1:]...), n-1)
				gradTwin.Axpy(wantTail, tensor.From(x.Data()[1:], n-1), -0.37)
				be.Axpy(sy, sx, -0.37)
				expect(t, name+"/Axpy unaligned", down(b, sy), wantTail, ulps, &worst)
			}
			be.Fill(got, -2.5)
			gradTwin.Fill(want, -2.5)
			expect(t, name+"/Fill", down(b, got), want, kernelstest.Tolerance{}, nil)

			wantSS := gradTwin.SumSquares(x)
			if got := be.SumSquares(b.FromHost(x)); math.Abs(got-wantSS) > 1e-10*wantSS {
				t.Errorf("%s/SumSquares: %v, want %v", name, got, wantSS)
			}

			p, m, v := randHost(r, 1, n), tensor.New(n), tensor.New(n)
			gp, gm, gv := b.FromHost(p), b.New(n), b.New(n)
			for step := 1; step <= 3; step++ {
				g := randHost(r, math.Pow(10, float64(step-2)), n)
				gradTwin.AdamW(p, g, m, v, o, step)
				be.AdamW(gp, b.FromHost(g), gm, gv, o, step)
			}
			expect(t, name+"/AdamW param", down(b, gp), p, ulps, &worst)
			expect(t, name+"/AdamW m", down(b, gm), m, ulps, &worst)
			expect(t, name+"/AdamW v", down(b, gv), v, ulps, &worst)
		}
	}
	t.Logf("worst |gpu-cpu| / tolerance: %.3f (0 when every bit agrees)", worst)
}

// TestSumSquaresNonFinite checks that a NaN or Inf anywhere, in the float4
// body or the scalar tail, under any block size, reaches the result.
func TestSumSquaresNonFinite(t *testing.T) {
	b := testBackend(t)
	const n = 50689
	x := randHost(newRand(32), 1, n)
	for _, bs := range elemBlocks {
		for _, at := range []int{0, 4097, n - 1} {
			for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(-1))} {
				y := tensor.From(append([]float32(nil), x.Data()...), n)
				y.Data()[at] = bad
				got := b.with(launch{elemBlock: bs}).SumSquares(b.FromHost(y))
				if math.IsNaN(float64(bad)) != math.IsNaN(got) || (!math.IsNaN(got) && !math.IsInf(got, 1)) {
					t.Errorf("block %d, %v at %d: Σx² = %v", bs, bad, at, got)
				}
			}
		}
	}
}

// roundBF16 rounds to the nearest bfloat16, ties to even, as
// __float2bfloat16_rn does.
func roundBF16(f float32) float32 {
	if f != f {
		return f
	}
	u := math.Float32bits(f)
	u += 0x7fff + (u>>16)&1
	return math.Float32frombits(u &^ 0xffff)
}

// tensorCoreTol is sumTol doubled: tensor cores add in float32, but not
// necessarily with round-to-nearest at every addition.
func tensorCoreTol(k int) kernelstest.Tolerance {
	return kernelstest.Tolerance{Abs: 2e-6 * float64(k+4), Rel: 2e-5}
}

func bf16Host(h *tensor.Tensor) *tensor.Tensor {
	out := tensor.New(h.Shape()...)
	for i, v := range h.Data() {
		out.Data()[i] = roundBF16(v)
	}
	return out
}

// TestBF16MatMuls checks the three products under BF16 twice: against the
// CPU product of the inputs rounded to bfloat16 (which the tensor cores
// must reproduce up to the order of float32 additions), and against the
// CPU's float32 product within bfloat16's tolerance. A table shows that the
// rounding really happens.
func TestBF16MatMuls(t *testing.T) {
	b := testBackend(t).with(launch{})
	b.SetMatMulPrecision(BF16)
	if b.MatMulPrecision() != BF16 || testBackend(t).MatMulPrecision() != F32 {
		t.Fatal("precision not set on the copy alone")
	}

	// 1 + 2⁻¹⁰ has no bfloat16 (8 bits of mantissa): it rounds to 1.
	one := b.FromHost(tensor.From([]float32{1 + 1.0/1024}, 1, 1))
	got := b.New(1, 1)
	b.MatMul(got, one, one)
	if v := down(b, got)[0]; v != 1 {
		t.Errorf("bf16 (1+2⁻¹⁰)² = %v, want 1", v)
	}

	r := newRand(33)
	worstExact, worstLoose := 0.0, 0.0
	for _, s := range []struct{ m, n, k int }{{1, 1, 1}, {7, 33, 130}, {33, 7, 576}, {130, 576, 33}, {512, inter, hidden}, {64, 1000, 1536}} {
		type op struct {
			name     string
			ash, bsh []int // operand shapes
			cpu      func(dst, a, w kernels.Tensor)
			gpu      func(dst, a, w kernels.Tensor)
			dst      []int
			k        int // terms per sum
		}
		ops := []op{
			{"NT", []int{s.m, s.k}, []int{s.n, s.k}, twin.MatMul, b.MatMul, []int{s.m, s.n}, s.k},
			{"NN", []int{s.m, s.k}, []int{s.k, s.n}, gradTwin.MatMulNN, b.MatMulNN, []int{s.m, s.n}, s.k},
			{"TN", []int{s.k, s.m}, []int{s.k, s.n},
				func(d, a, w kernels.Tensor) { gradTwin.MatMulTN(d, a, w, false) },
				func(d, a, w kernels.Tensor) { b.MatMulTN(d, a, w, false) }, []int{s.m, s.n}, s.k},
		}
		for _, o := range ops {
			a, w := randHost(r, 1, o.ash...), randHost(r, 1, o.bsh...)
			exact, loose := tensor.New(o.dst...), tensor.New(o.dst...)
			o.cpu(exact, bf16Host(a), bf16Host(w))
			o.cpu(loose, a, w)
			got := b.New(o.dst...)
			o.gpu(got, b.FromHost(a), b.FromHost(w))
			g := down(b, got)
			name := fmt.Sprintf("%s/%dx%dx%d", o.name, s.m, s.n, s.k)
			expect(t, name+"/vs rounded inputs", g, exact, tensorCoreTol(o.k), &worstExact)
			// Each rounded product is off by ~2.4e-3 (standard deviation):
			// a sum of k by ~2.4e-3·√k. Far wider than that, and far
			// tighter than what a product of unrounded inputs would miss
			// by, is the check above.
			bf := kernelstest.Tolerance{Abs: 3e-2 * math.Sqrt(float64(o.k)), Rel: 1e-2}
			expect(t, name+"/vs fp32", g, loose, bf, &worstLoose)
		}
	}
	// Accumulation under BF16 adds to what is there.
	a, y, d0 := randHost(r, 1, 130, 33), randHost(r, 1, 130, 57), randHost(r, 1, 33, 57)
	want := tensor.From(append([]float32(nil), d0.Data()...), 33, 57)
	gradTwin.MatMulTN(want, bf16Host(a), bf16Host(y), true)
	acc := b.FromHost(d0)
	b.MatMulTN(acc, b.FromHost(a), b.FromHost(y), true)
	expect(t, "TN accumulate", down(b, acc), want, tensorCoreTol(130), &worstExact)
	t.Logf("worst |gpu-cpu| / tolerance: %.3f against rounded inputs, %.3f against fp32", worstExact, worstLoose)
}
