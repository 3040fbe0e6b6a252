package kernelstest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/tensor"
)

// RunGrad checks the backward operations of a kernels.GradBackend three
// ways: hand-computed tables for the edge cases the interface promises
// (repeated ids, accumulation, in-place use, NaN in SumSquares), central
// finite differences of float64 reference forwards written here the
// textbook way, and the PyTorch autograd gradients in grads.golden (written
// by testdata/gen/gen_grads.py). dir is the kernels/testdata directory
// relative to the calling test's package:
//
//	func TestGradConformance(t *testing.T) { kernelstest.RunGrad(t, cpu.New(), "../testdata") }
func RunGrad(t *testing.T, b kernels.GradBackend, dir string) {
	g, err := ReadGolden(filepath.Join(dir, "grads.golden"))
	if err != nil {
		t.Fatal(err)
	}
	s := &gradSuite{suite: suite{b: b, dir: dir}, g: b, gold: g}
	t.Run("Linear", s.linear)
	t.Run("SumRows", s.sumRows)
	t.Run("EmbeddingBackward", s.embeddingBackward)
	t.Run("RMSNormBackward", s.rmsNormBackward)
	t.Run("RoPEBackward", s.ropeBackward)
	t.Run("AttentionBackward", s.attentionBackward)
	t.Run("SwiGLUBackward", s.swiGLUBackward)
	t.Run("TokenLogProbs", s.tokenLogProbs)
	t.Run("Axpy/Scale/Fill", s.elementwise)
	t.Run("SumSquares", s.sumSquares)
	t.Run("AdamW", s.adamW)
	t.Run("Panics", s.gradPanics)
}

type gradSuite struct {
	suite
	g    kernels.GradBackend
	gold Golden
}

// Gradient tolerances against float64 references: float32 kernels whose
// sums run over tens to hundreds of terms of unit scale.
var (
	gradTol = Tolerance{Abs: 2e-5, Rel: 1e-4}
	elemTol = Tolerance{Abs: 1e-6, Rel: 1e-5}
)

// cases lists the golden cases of one operation ("attention_gqa3").
func (s *gradSuite) cases(t *testing.T, op string) []string {
	t.Helper()
	var out []string
	for _, c := range s.gold.Cases() {
		if strings.HasPrefix(c, op+"_") {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		t.Fatalf("grads.golden has no %s cases", op)
	}
	return out
}

func (s *gradSuite) get(t *testing.T, c, name string) *tensor.Tensor {
	t.Helper()
	return get(t, s.gold, c, name)
}

func randVals(r *rand.Rand, n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * scale)
	}
	return x
}

func f64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

func f32s(x []float64) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(v)
	}
	return out
}

func dot64(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// numGrad is the gradient of L(x) = Σ r·f(x) with respect to x, by central
// differences of the float64 function f.
func numGrad(f func(x []float64) []float64, x, r []float64) []float64 {
	g := make([]float64, len(x))
	xp := slices.Clone(x)
	for i, v := range x {
		h := 1e-4 * max(1, math.Abs(v))
		xp[i] = v + h
		fp := dot64(r, f(xp))
		xp[i] = v - h
		fm := dot64(r, f(xp))
		xp[i] = v
		g[i] = (fp - fm) / (2 * h)
	}
	return g
}

// checkDirectional compares Σ grad·u with the central difference of
// L(x) = Σ r·f(x) along a random direction u: the check for inputs too
// large to difference element by element.
func checkDirectional(t *testing.T, what string, rng *rand.Rand, f func(x []float64) []float64, x, r []float64, grad []float32) {
	t.Helper()
	for range 3 {
		u := f64(randVals(rng, len(x), 1))
		const h = 1e-5
		xp, xm := slices.Clone(x), slices.Clone(x)
		var want, mag float64
		for i := range x {
			xp[i] += h * u[i]
			xm[i] -= h * u[i]
			want += float64(grad[i]) * u[i]
			mag += math.Abs(float64(grad[i]) * u[i])
		}
		got := (dot64(r, f(xp)) - dot64(r, f(xm))) / (2 * h)
		if d := math.Abs(got - want); !(d <= 1e-4*mag+1e-6) {
			t.Errorf("%s: directional derivative %v, gradient gives %v (|diff| %.3g, scale %.3g)", what, got, want, d, mag)
		}
	}
}

// --- float64 reference forwards ---

// linearRef is x[m,in]·w[out,in]ᵀ.
func linearRef(x, w []float64, m, in, out int) []float64 {
	y := make([]float64, m*out)
	for i := range m {
		for j := range out {
			y[i*out+j] = dot64(x[i*in:(i+1)*in], w[j*in:(j+1)*in])
		}
	}
	return y
}

func rmsNormRef(x, w []float64, cols int, eps float32) []float64 {
	y := make([]float64, len(x))
	for r := 0; r < len(x); r += cols {
		row := x[r : r+cols]
		rs := 1 / math.Sqrt(dot64(row, row)/float64(cols)+float64(eps))
		for i, v := range row {
			y[r+i] = v * rs * w[i]
		}
	}
	return y
}

// ropeRef is the half-rotation RoPE with Hugging Face's float32 angles.
func ropeRef(x []float64, pos []int32, headDim int, theta float32) []float64 {
	y := make([]float64, len(x))
	cols, half := len(x)/len(pos), headDim/2
	for r, p := range pos {
		for j := range half {
			inv := float32(1 / math.Pow(float64(theta), float64(2*j)/float64(headDim)))
			s, c := math.Sincos(float64(float32(p) * inv))
			for h := r * cols; h < (r+1)*cols; h += headDim {
				a, b := x[h+j], x[h+half+j]
				y[h+j] = a*c - b*s
				y[h+half+j] = b*c + a*s
			}
		}
	}
	return y
}

// attentionRef is a full causal pass of grouped-query attention.
func attentionRef(q, k, v []float64, t, nh, nkv int) []float64 {
	hd := len(q) / t / nh
	qc, kc, group := nh*hd, nkv*hd, nh/nkv
	y := make([]float64, len(q))
	sc := make([]float64, t)
	for h := range nh {
		ko := (h / group) * hd
		for i := range t {
			qi := q[i*qc+h*hd : i*qc+h*hd+hd]
			mx := math.Inf(-1)
			for j := 0; j <= i; j++ {
				sc[j] = dot64(qi, k[j*kc+ko:j*kc+ko+hd]) / math.Sqrt(float64(hd))
				mx = max(mx, sc[j])
			}
			var sum float64
			for j := 0; j <= i; j++ {
				sc[j] = math.Exp(sc[j] - mx)
				sum += sc[j]
			}
			for j := 0; j <= i; j++ {
				for d := range hd {
					y[i*qc+h*hd+d] += sc[j] / sum * v[j*kc+ko+d]
				}
			}
		}
	}
	return y
}

func swiGLURef(g, u []float64) []float64 {
	y := make([]float64, len(g))
	for i, x := range g {
		y[i] = x / (1 + math.Exp(-x)) * u[i]
	}
	return y
}

func logProbsRef(x []float64, cols int, targets []int32) []float64 {
	y := make([]float64, len(targets))
	for r, tg := range targets {
		row := x[r*cols : (r+1)*cols]
		mx := slices.Max(row)
		var sum float64
		for _, v := range row {
			sum += math.Exp(v - mx)
		}
		y[r] = row[tg] - mx - math.Log(sum)
	}
	return y
}

// --- the operations ---

func (s *gradSuite) linear(t *testing.T) {
	t.Run("table", func(t *testing.T) {
		a, b := s.up([]float32{1, 2, 3, 4}, 2, 2), s.up([]float32{5, 6, 7, 8, 9, 10}, 2, 3)
		dst := s.garbage(2, 3)
		s.g.MatMulNN(dst, a, b)
		s.check(t, "NN", dst, []float32{21, 24, 27, 47, 54, 61}, FP32)
		s.g.MatMulTN(dst, a, b, false)
		s.check(t, "TN", dst, []float32{29, 33, 37, 42, 48, 54}, FP32)
		s.g.MatMulTN(dst, a, b, true)
		s.check(t, "TN accumulated", dst, []float32{58, 66, 74, 84, 96, 108}, FP32)
	})
	t.Run("empty sums", func(t *testing.T) {
		dst := s.garbage(2, 3)
		s.g.MatMulNN(dst, s.b.New(2, 0), s.b.New(0, 3))
		s.check(t, "NN k=0", dst, make([]float32, 6), Tolerance{})
		acc := s.up([]float32{1, 2, 3, 4}, 2, 2)
		s.g.MatMulTN(acc, s.b.New(0, 2), s.b.New(0, 2), true)
		s.check(t, "TN m=0 accumulated", acc, []float32{1, 2, 3, 4}, Tolerance{})
		s.g.MatMulTN(acc, s.b.New(0, 2), s.b.New(0, 2), false)
		s.check(t, "TN m=0", acc, make([]float32, 4), Tolerance{})
	})
	t.Run("finite differences", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 1))
		const m, in, out = 6, 5, 7
		x, w, dy := randVals(rng, m*in, 1), randVals(rng, out*in, 1), randVals(rng, m*out, 1)
		x64, w64, r := f64(x), f64(w), f64(dy)
		wantDx := numGrad(func(x []float64) []float64 { return linearRef(x, w64, m, in, out) }, x64, r)
		wantDw := numGrad(func(w []float64) []float64 { return linearRef(x64, w, m, in, out) }, w64, r)
		dx := s.garbage(m, in)
		s.g.MatMulNN(dx, s.up(dy, m, out), s.up(w, out, in))
		s.check(t, "dx", dx, f32s(wantDx), gradTol)
		dw := s.garbage(out, in)
		s.g.MatMulTN(dw, s.up(dy, m, out), s.up(x, m, in), false)
		s.check(t, "dw", dw, f32s(wantDw), gradTol)
	})
	for _, c := range s.cases(t, "linear") {
		t.Run(c, func(t *testing.T) {
			x, w, dy := s.get(t, c, "x"), s.get(t, c, "w"), s.get(t, c, "dy")
			dw0, wantDx, wantDw := s.get(t, c, "dw0"), s.get(t, c, "dx"), s.get(t, c, "dw")
			m := x.Rows()
			dx := s.garbage(wantDx.Shape()...)
			s.g.MatMulNN(dx, s.upT(dy), s.upT(w))
			s.check(t, "dx", dx, wantDx.Data(), fp32Sum(w.Rows()))
			dw := s.upT(dw0)
			s.g.MatMulTN(dw, s.upT(dy), s.upT(x), true)
			s.check(t, "dw accumulated", dw, wantDw.Data(), fp32Sum(m))
			fresh := make([]float32, dw0.Len())
			for i, v := range wantDw.Data() {
				fresh[i] = float32(float64(v) - float64(dw0.Data()[i]))
			}
			dw = s.garbage(wantDw.Shape()...)
			s.g.MatMulTN(dw, s.upT(dy), s.upT(x), false)
			s.check(t, "dw", dw, fresh, fp32Sum(m))
		})
	}
}

func (s *gradSuite) sumRows(t *testing.T) {
	t.Run("table", func(t *testing.T) {
		dst := s.up([]float32{10, 20}, 2)
		s.g.SumRows(dst, s.up([]float32{1, 2, 3, 4, 5, 6}, 3, 2))
		s.check(t, "dst", dst, []float32{19, 32}, Tolerance{})
	})
	t.Run("finite differences", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(2, 2))
		const m, n = 9, 13
		x, dy := f64(randVals(rng, m*n, 1)), randVals(rng, m*n, 1)
		want := numGrad(func(b []float64) []float64 {
			y := slices.Clone(x)
			for i := range y {
				y[i] += b[i%n]
			}
			return y
		}, make([]float64, n), f64(dy))
		dst := s.up(make([]float32, n), n)
		s.g.SumRows(dst, s.up(dy, m, n))
		s.check(t, "dbias", dst, f32s(want), gradTol)
	})
	x, d0, want := s.get(t, "sumrows", "x"), s.get(t, "sumrows", "d0"), s.get(t, "sumrows", "out")
	dst := s.upT(d0)
	s.g.SumRows(dst, s.upT(x))
	s.check(t, "golden", dst, want.Data(), fp32Sum(x.Rows()))
}

func (s *gradSuite) embeddingBackward(t *testing.T) {
	t.Run("repeated ids", func(t *testing.T) {
		dtable := s.up([]float32{1, 1, 1, 1, 1, 1}, 3, 2)
		s.g.EmbeddingBackward(dtable, s.up([]float32{1, 2, 3, 4, 5, 6}, 3, 2), []int32{2, 0, 2})
		s.check(t, "dtable", dtable, []float32{4, 5, 1, 1, 7, 9}, Tolerance{})
	})
	t.Run("finite differences", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 3))
		const vocab, dim = 7, 5
		ids := []int32{6, 1, 1, 0, 6, 6, 3}
		table, dy := randVals(rng, vocab*dim, 1), randVals(rng, len(ids)*dim, 1)
		want := numGrad(func(tab []float64) []float64 {
			y := make([]float64, 0, len(ids)*dim)
			for _, id := range ids {
				y = append(y, tab[int(id)*dim:int(id+1)*dim]...)
			}
			return y
		}, f64(table), f64(dy))
		dtable := s.up(make([]float32, vocab*dim), vocab, dim)
		s.g.EmbeddingBackward(dtable, s.up(dy, len(ids), dim), ids)
		s.check(t, "dtable", dtable, f32s(want), elemTol)
	})
	for _, c := range s.cases(t, "embedding") {
		t.Run(c, func(t *testing.T) {
			want := s.get(t, c, "out")
			dtable := s.upT(s.get(t, c, "d0"))
			s.g.EmbeddingBackward(dtable, s.upT(s.get(t, c, "dy")), Ints(s.get(t, c, "ids")))
			s.check(t, "dtable", dtable, want.Data(), FP32)
		})
	}
}

func (s *gradSuite) rmsNormBackward(t *testing.T) {
	t.Run("finite differences", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(4, 4))
		const rows, cols, eps = 4, 16, 1e-5
		x, w, dy := randVals(rng, rows*cols, 1), randVals(rng, cols, 1), randVals(rng, rows*cols, 1)
		dw0 := randVals(rng, cols, 1)
		x64, w64, r := f64(x), f64(w), f64(dy)
		wantDx := numGrad(func(x []float64) []float64 { return rmsNormRef(x, w64, cols, eps) }, x64, r)
		wantDw := numGrad(func(w []float64) []float64 { return rmsNormRef(x64, w, cols, eps) }, w64, r)
		for i := range wantDw {
			wantDw[i] += float64(dw0[i])
		}
		dx, dw := s.garbage(rows, cols), s.up(dw0, cols)
		s.g.RMSNormBackward(dx, dw, s.up(dy, rows, cols), s.up(x, rows, cols), s.up(w, cols), eps)
		s.check(t, "dx", dx, f32s(wantDx), gradTol)
		s.check(t, "dweight", dw, f32s(wantDw), gradTol)
	})
	for _, c := range s.cases(t, "rmsnorm") {
		t.Run(c, func(t *testing.T) {
			x, w, dy, dw0 := s.get(t, c, "x"), s.get(t, c, "weight"), s.get(t, c, "dy"), s.get(t, c, "dw0")
			eps := s.get(t, c, "eps").Data()[0]
			wantDx, wantDw := s.get(t, c, "dx"), s.get(t, c, "dweight")
			// dx scales as 1/rms(x): the "tiny" case's are a thousand times
			// the others'.
			tol := Tolerance{Abs: gradTol.Abs * float64(maxAbs(wantDx.Data())), Rel: gradTol.Rel}
			dx, dw := s.garbage(x.Shape()...), s.upT(dw0)
			s.g.RMSNormBackward(dx, dw, s.upT(dy), s.upT(x), s.upT(w), eps)
			s.check(t, "dx", dx, wantDx.Data(), tol)
			s.check(t, "dweight", dw, wantDw.Data(), gradTol)
			in, dw := s.upT(dy), s.upT(dw0)
			s.g.RMSNormBackward(in, dw, in, s.upT(x), s.upT(w), eps)
			s.check(t, "dx in place", in, wantDx.Data(), tol)
			s.check(t, "dweight in place", dw, wantDw.Data(), gradTol)
		})
	}
}

func maxAbs(x []float32) float32 {
	var m float32
	for _, v := range x {
		m = max(m, float32(math.Abs(float64(v))))
	}
	return m
}

func (s *gradSuite) ropeBackward(t *testing.T) {
	t.Run("finite differences", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(5, 5))
		const hd, theta = 8, 10000
		pos := []int32{0, 3, 1, 500}
		cols := 2 * hd
		x, dy := randVals(rng, len(pos)*cols, 1), randVals(rng, len(pos)*cols, 1)
		want := numGrad(func(x []float64) []float64 { return ropeRef(x, pos, hd, theta) }, f64(x), f64(dy))
		dx := s.garbage(len(pos), cols)
		s.g.RoPEBackward(dx, s.up(dy, len(pos), cols), pos, hd, theta)
		s.check(t, "dx", dx, f32s(want), elemTol)
	})
	for _, c := range s.cases(t, "rope") {
		t.Run(c, func(t *testing.T) {
			dy, want := s.get(t, c, "dy"), s.get(t, c, "dx")
			pos, hd := Ints(s.get(t, c, "pos")), int(Ints(s.get(t, c, "head_dim"))[0])
			theta := s.get(t, c, "theta").Data()[0]
			dx := s.garbage(dy.Shape()...)
			s.g.RoPEBackward(dx, s.upT(dy), pos, hd, theta)
			s.check(t, "dx", dx, want.Data(), FP32)
			in := s.upT(dy)
			s.g.RoPEBackward(in, in, pos, hd, theta)
			s.check(t, "in place", in, want.Data(), FP32)
		})
	}
}

func (s *gradSuite) attentionBackward(t *testing.T) {
	type shape struct{ t, nh, nkv, hd int }
	run := func(sh shape, q, k, v, dy []float32) (dq, dk, dv []float32) {
		qc, kc := sh.nh*sh.hd, sh.nkv*sh.hd
		dQ, dK, dV := s.garbage(sh.t, qc), s.garbage(sh.t, kc), s.garbage(sh.t, kc)
		s.g.AttentionBackward(dQ, dK, dV, s.up(dy, sh.t, qc), s.up(q, sh.t, qc), s.up(k, sh.t, kc), s.up(v, sh.t, kc), sh.nh, sh.nkv)
		return s.down(dQ), s.down(dK), s.down(dV)
	}
	rng := rand.New(rand.NewPCG(6, 6))
	for _, sh := range []shape{{1, 2, 1, 4}, {5, 2, 2, 4}, {7, 6, 2, 4}, {9, 3, 1, 8}} {
		t.Run(fmt.Sprintf("finite differences/t%d/heads%d-%d", sh.t, sh.nh, sh.nkv), func(t *testing.T) {
			qc, kc := sh.nh*sh.hd, sh.nkv*sh.hd
			q, k, v := randVals(rng, sh.t*qc, 1.5), randVals(rng, sh.t*kc, 1.5), randVals(rng, sh.t*kc, 1)
			dy := randVals(rng, sh.t*qc, 1)
			q64, k64, v64, r := f64(q), f64(k), f64(v), f64(dy)
			wq := numGrad(func(q []float64) []float64 { return attentionRef(q, k64, v64, sh.t, sh.nh, sh.nkv) }, q64, r)
			wk := numGrad(func(k []float64) []float64 { return attentionRef(q64, k, v64, sh.t, sh.nh, sh.nkv) }, k64, r)
			wv := numGrad(func(v []float64) []float64 { return attentionRef(q64, k64, v, sh.t, sh.nh, sh.nkv) }, v64, r)
			dq, dk, dv := run(sh, q, k, v, dy)
			for _, c := range []struct {
				name      string
				got, want []float32
			}{{"dq", dq, f32s(wq)}, {"dk", dk, f32s(wk)}, {"dv", dv, f32s(wv)}} {
				if msg := Mismatch(c.got, c.want, gradTol); msg != "" {
					t.Errorf("%s: %s", c.name, msg)
				}
			}
		})
	}
	t.Run("directional", func(t *testing.T) {
		// More rows than a CPU work item, SmolLM2's grouping of 3.
		sh := shape{100, 6, 2, 16}
		qc, kc := sh.nh*sh.hd, sh.nkv*sh.hd
		q, k, v := randVals(rng, sh.t*qc, 1), randVals(rng, sh.t*kc, 1), randVals(rng, sh.t*kc, 1)
		dy := randVals(rng, sh.t*qc, 1)
		q64, k64, v64, r := f64(q), f64(k), f64(v), f64(dy)
		dq, dk, dv := run(sh, q, k, v, dy)
		checkDirectional(t, "dq", rng, func(q []float64) []float64 { return attentionRef(q, k64, v64, sh.t, sh.nh, sh.nkv) }, q64, r, dq)
		checkDirectional(t, "dk", rng, func(k []float64) []float64 { return attentionRef(q64, k, v64, sh.t, sh.nh, sh.nkv) }, k64, r, dk)
		checkDirectional(t, "dv", rng, func(v []float64) []float64 { return attentionRef(q64, k64, v, sh.t, sh.nh, sh.nkv) }, v64, r, dv)
	})
	for _, c := range s.cases(t, "attention") {
		t.Run(c, func(t *testing.T) {
			q, k, v, dy := s.get(t, c, "q"), s.get(t, c, "k"), s.get(t, c, "v"), s.get(t, c, "dy")
			heads := Ints(s.get(t, c, "heads"))
			sh := shape{q.Rows(), int(heads[0]), int(heads[1]), q.Cols() / int(heads[0])}
			dq, dk, dv := run(sh, q.Data(), k.Data(), v.Data(), dy.Data())
			for _, x := range []struct {
				name string
				got  []float32
			}{{"dq", dq}, {"dk", dk}, {"dv", dv}} {
				if msg := Mismatch(x.got, s.get(t, c, x.name).Data(), gradTol); msg != "" {
					t.Errorf("%s: %s", x.name, msg)
				}
			}
		})
	}
}

func (s *gradSuite) swiGLUBackward(t *testing.T) {
	t.Run("finite differences", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 7))
		const n = 40
		gate, up, dy := randVals(rng, n, 4), randVals(rng, n, 1), randVals(rng, n, 1)
		g64, u64 := f64(gate), f64(up)
		wantG := numGrad(func(g []float64) []float64 { return swiGLURef(g, u64) }, g64, f64(dy))
		wantU := numGrad(func(u []float64) []float64 { return swiGLURef(g64, u) }, u64, f64(dy))
		dg, du := s.garbage(4, 10), s.garbage(4, 10)
		s.g.SwiGLUBackward(dg, du, s.up(dy, 4, 10), s.up(gate, 4, 10), s.up(up, 4, 10))
		s.check(t, "dgate", dg, f32s(wantG), elemTol)
		s.check(t, "dup", du, f32s(wantU), elemTol)
	})
	for _, c := range s.cases(t, "swiglu") {
		t.Run(c, func(t *testing.T) {
			gate, up, dy := s.get(t, c, "gate"), s.get(t, c, "up"), s.get(t, c, "dy")
			dg, du := s.garbage(gate.Shape()...), s.garbage(gate.Shape()...)
			s.g.SwiGLUBackward(dg, du, s.upT(dy), s.upT(gate), s.upT(up))
			s.check(t, "dgate", dg, s.get(t, c, "dgate").Data(), elemTol)
			s.check(t, "dup", du, s.get(t, c, "dup").Data(), elemTol)
		})
	}
}

func (s *gradSuite) tokenLogProbs(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	t.Run("vocabulary rows", func(t *testing.T) {
		const rows, vocab = 3, 49152
		x := randVals(rng, rows*vocab, 8)
		targets := []int32{0, 49151, 12345}
		got := make([]float32, rows)
		s.g.TokenLogProbs(got, s.up(x, rows, vocab), targets)
		if msg := Mismatch(got, f32s(logProbsRef(f64(x), vocab, targets)), Tolerance{Abs: 1e-5, Rel: 1e-6}); msg != "" {
			t.Errorf("logp: %s", msg)
		}
	})
	t.Run("finite differences", func(t *testing.T) {
		const rows, vocab = 4, 20
		x, dlogp := randVals(rng, rows*vocab, 3), randVals(rng, rows, 1)
		dlogp[2] = 0 // a token outside the loss
		targets := []int32{3, 0, 7, 19}
		want := numGrad(func(x []float64) []float64 { return logProbsRef(x, vocab, targets) }, f64(x), f64(dlogp))
		d := s.garbage(rows, vocab)
		s.g.TokenLogProbsBackward(d, s.up(x, rows, vocab), targets, dlogp)
		s.check(t, "dlogits", d, f32s(want), elemTol)
		in := s.up(x, rows, vocab)
		s.g.TokenLogProbsBackward(in, in, targets, dlogp)
		s.check(t, "dlogits in place", in, f32s(want), elemTol)
	})
	for _, c := range s.cases(t, "logprobs") {
		t.Run(c, func(t *testing.T) {
			x, targets, dlogp := s.get(t, c, "logits"), Ints(s.get(t, c, "targets")), s.get(t, c, "dlogp").Data()
			got := make([]float32, len(targets))
			s.g.TokenLogProbs(got, s.upT(x), targets)
			if msg := Mismatch(got, s.get(t, c, "logp").Data(), Tolerance{Abs: 1e-5, Rel: 1e-6}); msg != "" {
				t.Errorf("logp: %s", msg)
			}
			want := s.get(t, c, "dlogits").Data()
			d := s.garbage(x.Shape()...)
			s.g.TokenLogProbsBackward(d, s.upT(x), targets, dlogp)
			s.check(t, "dlogits", d, want, elemTol)
			in := s.upT(x)
			s.g.TokenLogProbsBackward(in, in, targets, dlogp)
			s.check(t, "dlogits in place", in, want, elemTol)
		})
	}
}

func (s *gradSuite) elementwise(t *testing.T) {
	t.Run("table", func(t *testing.T) {
		x := s.up([]float32{1, 2, 3}, 3)
		s.g.Axpy(x, s.up([]float32{1, 1, -1}, 3), 2)
		s.check(t, "Axpy", x, []float32{3, 4, 1}, Tolerance{})
		s.g.Scale(x, -0.5)
		s.check(t, "Scale", x, []float32{-1.5, -2, -0.5}, Tolerance{})
		s.g.Fill(x, 7)
		s.check(t, "Fill", x, []float32{7, 7, 7}, Tolerance{})
	})
	t.Run("large", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(9, 9))
		const n = 100003
		a, b := randVals(rng, n, 1), randVals(rng, n, 1)
		want := make([]float32, n)
		for i := range want {
			want[i] = (a[i] + 0.25*b[i]) * 3
		}
		x := s.up(a, n)
		s.g.Axpy(x, s.up(b, n), 0.25)
		s.g.Scale(x, 3)
		s.check(t, "Axpy, Scale", x, want, FP32)
		s.g.Fill(x, 0)
		s.check(t, "Fill", x, make([]float32, n), Tolerance{})
	})
}

func (s *gradSuite) sumSquares(t *testing.T) {
	if got := s.g.SumSquares(s.up([]float32{3, -4}, 2)); got != 25 {
		t.Errorf("Σ(3, −4)² = %v, want 25", got)
	}
	if got := s.g.SumSquares(s.b.New(0)); got != 0 {
		t.Errorf("empty sum = %v", got)
	}
	rng := rand.New(rand.NewPCG(10, 10))
	x := randVals(rng, 300001, 2)
	var want float64
	for _, v := range x {
		want += float64(v) * float64(v)
	}
	if got := s.g.SumSquares(s.up(x, len(x))); !(math.Abs(got-want) <= 1e-9*want) {
		t.Errorf("Σx² = %v, want %v", got, want)
	}
	// A value whose square overflows float32 but not float64.
	if got := s.g.SumSquares(s.up([]float32{3e20, 4e20}, 2)); !(math.Abs(got-25e40) <= 1e-6*25e40) {
		t.Errorf("Σ(3e20, 4e20)² = %v, want 2.5e41", got)
	}
	for _, tt := range []struct {
		name string
		vals []float32
		ok   func(float64) bool
	}{
		{"NaN", []float32{float32(math.NaN())}, math.IsNaN},
		{"+Inf", []float32{float32(math.Inf(1))}, func(v float64) bool { return math.IsInf(v, 1) }},
		{"−Inf", []float32{float32(math.Inf(-1))}, func(v float64) bool { return math.IsInf(v, 1) }},
		{"Inf and NaN", []float32{float32(math.Inf(1)), float32(math.NaN())}, math.IsNaN},
	} {
		for _, at := range []int{0, 77777, len(x) - 1} {
			y := slices.Clone(x)
			for i, v := range tt.vals {
				y[(at+i*100000)%len(y)] = v
			}
			if got := s.g.SumSquares(s.up(y, len(y))); !tt.ok(got) {
				t.Errorf("%s at %d: Σx² = %v", tt.name, at, got)
			}
		}
	}
	gx, gw := s.get(t, "sumsquares_random", "x"), s.get(t, "sumsquares_random", "out").Data()[0]
	if got := s.g.SumSquares(s.upT(gx)); !(math.Abs(got-float64(gw)) <= 1e-6*float64(gw)) {
		t.Errorf("golden: Σx² = %v, want %v", got, gw)
	}
}

// adamWRef is the interface's formula in float64.
func adamWRef(p, g, m, v []float64, o kernels.AdamWParams, step int) {
	b1, b2 := float64(o.Beta1), float64(o.Beta2)
	bc1, bc2 := 1-math.Pow(b1, float64(step)), 1-math.Pow(b2, float64(step))
	for i := range p {
		m[i] = b1*m[i] + (1-b1)*g[i]
		v[i] = b2*v[i] + (1-b2)*g[i]*g[i]
		p[i] -= float64(o.LR) * (m[i]/bc1/(math.Sqrt(v[i]/bc2)+float64(o.Eps)) + float64(o.WeightDecay)*p[i])
	}
}

func (s *gradSuite) adamW(t *testing.T) {
	t.Run("formula", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(11, 11))
		const n = 5000
		o := kernels.AdamWParams{LR: 3e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
		p0 := randVals(rng, n, 1)
		p, m, v := s.up(p0, n), s.b.New(n), s.b.New(n)
		s.g.Fill(m, 0)
		s.g.Fill(v, 0)
		wp, wm, wv := f64(p0), make([]float64, n), make([]float64, n)
		for step, scale := range []float64{1, 0.01, 3, 0.5} {
			step++
			g := randVals(rng, n, scale)
			s.g.AdamW(p, s.up(g, n), m, v, o, step)
			adamWRef(wp, f64(g), wm, wv, o, step)
		}
		s.check(t, "param", p, f32s(wp), Tolerance{Abs: 1e-6, Rel: 1e-6})
		// m's rounding error is relative to the gradients', not to m.
		s.check(t, "m", m, f32s(wm), Tolerance{Abs: 1e-6, Rel: 1e-6})
		s.check(t, "v", v, f32s(wv), Tolerance{Abs: 1e-9, Rel: 1e-6})
	})
	for _, c := range s.cases(t, "adamw") {
		t.Run(c, func(t *testing.T) {
			h := s.get(t, c, "hyper").Data()
			o := kernels.AdamWParams{LR: h[0], Beta1: h[1], Beta2: h[2], Eps: h[3], WeightDecay: h[4]}
			p0 := s.get(t, c, "p0")
			p, m, v := s.upT(p0), s.b.New(p0.Shape()...), s.b.New(p0.Shape()...)
			s.g.Fill(m, 0)
			s.g.Fill(v, 0)
			for step := 1; ; step++ {
				g, ok := s.gold[c+"/g"+string(rune('0'+step))]
				if !ok {
					if step < 3 {
						t.Fatalf("only %d gradients", step-1)
					}
					break
				}
				s.g.AdamW(p, s.upT(g), m, v, o, step)
			}
			// The same float32 operations as torch's, but for torch's
			// sqrt, which need not round correctly: a few ulps.
			s.check(t, "param", p, s.get(t, c, "p").Data(), Tolerance{Abs: 1e-7, Rel: 5e-7})
			s.check(t, "m", m, s.get(t, c, "m").Data(), Tolerance{Abs: 1e-12, Rel: 5e-7})
			s.check(t, "v", v, s.get(t, c, "v").Data(), Tolerance{Abs: 1e-15, Rel: 5e-7})
		})
	}
}

// gradPanics checks that mismatched shapes and out-of-range ids are refused.
func (s *gradSuite) gradPanics(t *testing.T) {
	b := s.g
	tests := []struct {
		name string
		f    func()
	}{
		{"MatMulNN inner dims", func() { b.MatMulNN(b.New(2, 3), b.New(2, 4), b.New(5, 3)) }},
		{"MatMulNN dst shape", func() { b.MatMulNN(b.New(3, 2), b.New(2, 4), b.New(4, 3)) }},
		{"MatMulTN rows differ", func() { b.MatMulTN(b.New(3, 4), b.New(2, 3), b.New(5, 4), false) }},
		{"MatMulTN dst shape", func() { b.MatMulTN(b.New(4, 3), b.New(2, 3), b.New(2, 4), true) }},
		{"SumRows dst", func() { b.SumRows(b.New(3), b.New(2, 4)) }},
		{"EmbeddingBackward id out of range", func() { b.EmbeddingBackward(b.New(3, 2), b.New(1, 2), []int32{3}) }},
		{"EmbeddingBackward negative id", func() { b.EmbeddingBackward(b.New(3, 2), b.New(1, 2), []int32{-1}) }},
		{"EmbeddingBackward dy rows", func() { b.EmbeddingBackward(b.New(3, 2), b.New(2, 2), []int32{1}) }},
		{"RMSNormBackward weight", func() { b.RMSNormBackward(b.New(2, 4), b.New(4), b.New(2, 4), b.New(2, 4), b.New(3), 1e-6) }},
		{"RMSNormBackward dweight", func() { b.RMSNormBackward(b.New(2, 4), b.New(5), b.New(2, 4), b.New(2, 4), b.New(4), 1e-6) }},
		{"RMSNormBackward dx", func() { b.RMSNormBackward(b.New(1, 4), b.New(4), b.New(2, 4), b.New(2, 4), b.New(4), 1e-6) }},
		{"RoPEBackward odd head dim", func() { b.RoPEBackward(b.New(1, 6), b.New(1, 6), []int32{0}, 3, 1e4) }},
		{"RoPEBackward positions", func() { b.RoPEBackward(b.New(2, 4), b.New(2, 4), []int32{0}, 4, 1e4) }},
		{"AttentionBackward heads not grouped", func() {
			b.AttentionBackward(b.New(1, 6), b.New(1, 4), b.New(1, 4), b.New(1, 6), b.New(1, 6), b.New(1, 4), b.New(1, 4), 3, 2)
		}},
		{"AttentionBackward dk shape", func() {
			b.AttentionBackward(b.New(2, 8), b.New(2, 8), b.New(2, 4), b.New(2, 8), b.New(2, 8), b.New(2, 4), b.New(2, 4), 2, 1)
		}},
		{"AttentionBackward fewer keys", func() {
			b.AttentionBackward(b.New(2, 4), b.New(1, 4), b.New(1, 4), b.New(2, 4), b.New(2, 4), b.New(1, 4), b.New(1, 4), 1, 1)
		}},
		{"SwiGLUBackward shapes", func() { b.SwiGLUBackward(b.New(4), b.New(4), b.New(4), b.New(4), b.New(5)) }},
		{"TokenLogProbs target out of range", func() { b.TokenLogProbs(make([]float32, 1), b.New(1, 5), []int32{5}) }},
		{"TokenLogProbs targets per row", func() { b.TokenLogProbs(make([]float32, 1), b.New(2, 5), []int32{1}) }},
		{"TokenLogProbs dst length", func() { b.TokenLogProbs(make([]float32, 2), b.New(1, 5), []int32{1}) }},
		{"TokenLogProbsBackward dlogp length", func() {
			b.TokenLogProbsBackward(b.New(2, 5), b.New(2, 5), []int32{1, 2}, []float32{1})
		}},
		{"TokenLogProbsBackward dlogits shape", func() {
			b.TokenLogProbsBackward(b.New(2, 4), b.New(2, 5), []int32{1, 2}, []float32{1, 1})
		}},
		{"Axpy shapes", func() { b.Axpy(b.New(4), b.New(5), 1) }},
		{"AdamW shapes", func() { b.AdamW(b.New(4), b.New(4), b.New(4), b.New(3), kernels.AdamWParams{LR: 1}, 1) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			tt.f()
		})
	}
}
