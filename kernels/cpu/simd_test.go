package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/cpu/simd"
	"github.com/frognano/frognano/kernels/kernelstest"
	"github.com/frognano/frognano/kernels/tensor"
)

// forLevels runs fn once per instruction set this machine runs, the Go
// loops first, as subtests or sub-benchmarks named go, avx2 and avx512,
// and puts the level back afterwards.
func forLevels[T interface {
	testing.TB
	Run(string, func(T)) bool
}](t T, fn func(T)) {
	old := simd.Current()
	defer simd.SetLevel(old)
	for _, l := range simd.Levels() {
		t.Run(l.String(), func(t T) {
			simd.SetLevel(l)
			fn(t)
		})
	}
}

// TestConformanceLevels runs the golden suites, forward and backward
// (float64 and PyTorch references, finite differences, the existing
// tolerances), on every level, serially and split across goroutines.
func TestConformanceLevels(t *testing.T) {
	if len(simd.Levels()) == 1 {
		t.Log("no vector level on this machine or build: the Go loops only")
	}
	forLevels(t, func(t *testing.T) {
		kernelstest.Run(t, New(), "../testdata")
		kernelstest.RunGrad(t, New(), "../testdata")
		old := minParallelWork
		minParallelWork = 1
		defer func() { minParallelWork = old }()
		kernelstest.Run(t, New(), "../testdata")
		kernelstest.RunGrad(t, New(), "../testdata")
	})
}

// within fails unless got is within tol·(1 + |want|) of want, element by
// element, NaN matching NaN and infinities matching exactly.
func within(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d elements, want %d", what, len(got), len(want))
	}
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		switch {
		case math.IsNaN(w) || math.IsNaN(g):
			if math.IsNaN(w) != math.IsNaN(g) {
				t.Fatalf("%s[%d] = %g, want %g", what, i, g, w)
			}
		case math.IsInf(w, 0) || math.IsInf(g, 0):
			if g != w {
				t.Fatalf("%s[%d] = %g, want %g", what, i, g, w)
			}
		case math.Abs(g-w) > tol*(1+math.Abs(w)):
			t.Fatalf("%s[%d] = %.9g, want %.9g (difference %.3g)", what, i, g, w, g-w)
		}
	}
}

// vectorLevels runs fn under each vector level with the Go loops'
// results as the reference: ref runs first, at the Go level.
func vectorLevels(t *testing.T, ref func(), fn func(t *testing.T)) {
	old := simd.SetLevel(simd.Go)
	defer simd.SetLevel(old)
	ref()
	ls := simd.Levels()[1:]
	if len(ls) == 0 {
		t.Skip("no vector level on this machine or build")
	}
	for _, l := range ls {
		simd.SetLevel(l)
		t.Run(l.String(), fn)
	}
}

// edgy fills x with normal values and, every so often, the values that
// break vector code: ±0, huge and tiny magnitudes, ±Inf where allowed.
func edgy(r *rand.Rand, n int, inf bool) []float32 {
	special := []float32{0, float32(math.Copysign(0, -1)), 90, -90, 200, -200, 1e-30, -1e-30, 20, -20}
	if inf {
		special = append(special, float32(math.Inf(1)), float32(math.Inf(-1)))
	}
	x := make([]float32, n)
	for i := range x {
		if r.IntN(7) == 0 {
			x[i] = special[r.IntN(len(special))]
		} else {
			x[i] = float32(3 * r.NormFloat64())
		}
	}
	return x
}

// lengths covers every tail of both vector widths and the model's sizes.
var lengths = []int{1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 127, 576, 1536, 4099}

func TestSIMDSwiGLU(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 1))
	be := New()
	for _, n := range lengths {
		g, u := tensor.From(edgy(r, n, true), n), tensor.From(edgy(r, n, false), n)
		dy := tensor.From(edgy(r, n, false), n)
		want, got := tensor.New(n), tensor.New(n)
		wdg, wdu, dg, du := tensor.New(n), tensor.New(n), tensor.New(n), tensor.New(n)
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			vectorLevels(t, func() {
				be.SwiGLU(want, g, u)
				be.SwiGLUBackward(wdg, wdu, dy, g, u)
			}, func(t *testing.T) {
				be.SwiGLU(got, g, u)
				within(t, "SwiGLU", got.Data(), want.Data(), 1e-6)
				be.SwiGLUBackward(dg, du, dy, g, u)
				// dgate = dy·u·s·(1 + g·(1−s)) cancels near g ≈ −1.28, where
				// float32 roundings (and FMA or not) differ in the last bits
				// of the bracket: bounded against float64 instead.
				swigluGradBound(t, dg.Data(), dy.Data(), g.Data(), u.Data())
				swigluGradBound(t, wdg.Data(), dy.Data(), g.Data(), u.Data())
				within(t, "SwiGLUBackward dup", du.Data(), wdu.Data(), 1e-6)
				// In place: the outputs may be the inputs.
				dyc, gc := tensor.From(append([]float32(nil), dy.Data()...), n), tensor.From(append([]float32(nil), g.Data()...), n)
				be.SwiGLUBackward(dyc, gc, dyc, gc, u)
				within(t, "SwiGLUBackward in place dgate", dyc.Data(), dg.Data(), 0)
				within(t, "SwiGLUBackward in place dup", gc.Data(), wdu.Data(), 1e-6)
			})
		})
	}
}

func TestSIMDRMSNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(32, 1))
	be := New()
	for _, cols := range lengths {
		const rows = 3
		x, w := tensor.From(edgy(r, rows*cols, false), rows, cols), randTensor(r, cols)
		want, got := tensor.New(rows, cols), tensor.New(rows, cols)
		t.Run(fmt.Sprint(cols), func(t *testing.T) {
			vectorLevels(t, func() { be.RMSNorm(want, x, w, 1e-5) }, func(t *testing.T) {
				be.RMSNorm(got, x, w, 1e-5)
				within(t, "RMSNorm", got.Data(), want.Data(), 1e-6)
			})
		})
	}
}

func TestSIMDTokenLogProbs(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 1))
	be := New()
	for _, cols := range append(lengths, vocab) {
		const rows = 5
		x := tensor.From(edgy(r, rows*cols, false), rows, cols)
		x.Data()[0] = float32(math.Inf(-1)) // a masked logit
		targets, dlogp := make([]int32, rows), make([]float32, rows)
		for i := range targets {
			targets[i], dlogp[i] = int32(r.IntN(cols)), float32(r.NormFloat64())
		}
		dlogp[1] = 0
		want, got := make([]float32, rows), make([]float32, rows)
		wd, gd := tensor.New(rows, cols), tensor.New(rows, cols)
		t.Run(fmt.Sprint(cols), func(t *testing.T) {
			vectorLevels(t, func() {
				be.TokenLogProbs(want, x, targets)
				be.TokenLogProbsBackward(wd, x, targets, dlogp)
			}, func(t *testing.T) {
				be.TokenLogProbs(got, x, targets)
				within(t, "TokenLogProbs", got, want, 1e-6)
				be.TokenLogProbsBackward(gd, x, targets, dlogp)
				within(t, "TokenLogProbsBackward", gd.Data(), wd.Data(), 1e-6)
			})
		})
	}
}

func TestSIMDAttention(t *testing.T) {
	r := rand.New(rand.NewPCG(34, 1))
	be := New()
	for _, s := range []struct{ t, s, heads, kv, hd int }{
		{1, 1, 2, 1, 4}, {1, 37, 3, 1, 8}, {5, 9, 4, 2, 16}, {70, 70, 2, 2, 8}, {33, 200, 3, 3, 64}, {130, 130, 9, 3, 64},
	} {
		q, k, v := randTensor(r, s.t, s.heads*s.hd), randTensor(r, s.s, s.kv*s.hd), randTensor(r, s.s, s.kv*s.hd)
		for i := range q.Data() {
			q.Data()[i] *= 4 // peaked rows, where the shifted exponentials underflow
		}
		want, got := tensor.New(s.t, s.heads*s.hd), tensor.New(s.t, s.heads*s.hd)
		name := fmt.Sprintf("t%d/s%d/h%d/kv%d/d%d", s.t, s.s, s.heads, s.kv, s.hd)
		t.Run(name, func(t *testing.T) {
			vectorLevels(t, func() { be.Attention(want, q, k, v, s.heads, s.kv) }, func(t *testing.T) {
				be.Attention(got, q, k, v, s.heads, s.kv)
				within(t, "Attention", got.Data(), want.Data(), 1e-5)
			})
		})
		if s.t != s.s {
			continue
		}
		dy := randTensor(r, s.t, s.heads*s.hd)
		wq, wk, wv := tensor.New(s.t, s.heads*s.hd), tensor.New(s.t, s.kv*s.hd), tensor.New(s.t, s.kv*s.hd)
		gq, gk, gv := tensor.New(s.t, s.heads*s.hd), tensor.New(s.t, s.kv*s.hd), tensor.New(s.t, s.kv*s.hd)
		t.Run("backward/"+name, func(t *testing.T) {
			vectorLevels(t, func() { be.AttentionBackward(wq, wk, wv, dy, q, k, v, s.heads, s.kv) }, func(t *testing.T) {
				be.AttentionBackward(gq, gk, gv, dy, q, k, v, s.heads, s.kv)
				within(t, "dq", gq.Data(), wq.Data(), 1e-5)
				within(t, "dk", gk.Data(), wk.Data(), 1e-5)
				within(t, "dv", gv.Data(), wv.Data(), 1e-5)
			})
		})
	}
}

// swigluGradBound checks dgate against float64 within float32's rounding of
// its terms, 1e-6·|dy·u·s|·(2 + |g|), plus 1e-30 for the tails that the
// clamped exponent (the Go loop's convention) leaves near e^−87.
func swigluGradBound(t *testing.T, dg, dy, g, u []float32) {
	t.Helper()
	for i := range dg {
		x, y, gv := float64(g[i]), float64(u[i]), float64(dy[i])
		if math.IsInf(x, 0) || math.IsNaN(x) {
			continue // the Go loop's own convention; the element tests compare it
		}
		s := 1 / (1 + math.Exp(-x))
		want := gv * y * s * (1 + x*(1-s))
		if d := math.Abs(float64(dg[i]) - want); d > 1e-30+1e-6*math.Abs(gv*y*s)*(2+math.Abs(x)) {
			t.Fatalf("dgate[%d] = %.9g, want %.9g (g %g, u %g, dy %g)", i, dg[i], want, x, y, gv)
		}
	}
}

// TestSIMDAdamW runs several steps from the same state under the Go loop
// and each vector level: m and v within an ulp (the Go loop's fma32 rounds
// through float64, the FMA instruction once), p within a few.
func TestSIMDAdamW(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 1))
	be := New()
	for _, o := range []kernels.AdamWParams{
		{LR: 3e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1},
		{LR: 1e-2, Beta1: 0.3, Beta2: 0.999, Eps: 1e-6, WeightDecay: 0}, // 1 − β1 ≥ ½: the other lerp
	} {
		for _, n := range lengths {
			p0, g := edgy(r, n, false), make([][]float32, 3)
			for s := range g {
				g[s] = edgy(r, n, false)
			}
			run := func() (p, m, v *tensor.Tensor) {
				p, m, v = tensor.From(append([]float32(nil), p0...), n), tensor.New(n), tensor.New(n)
				for s := range g {
					be.AdamW(p, tensor.From(g[s], n), m, v, o, s+1)
				}
				return p, m, v
			}
			var wp, wm, wv *tensor.Tensor
			t.Run(fmt.Sprintf("b1=%g/%d", o.Beta1, n), func(t *testing.T) {
				vectorLevels(t, func() { wp, wm, wv = run() }, func(t *testing.T) {
					p, m, v := run()
					ulps(t, "m", m.Data(), wm.Data(), 1, 0)
					ulps(t, "v", v.Data(), wv.Data(), 1, 0)
					// p = p·decay + step: where the two cancel, the ulps of m and v
					// carried over the steps show against a small p; bounded
					// by ulps of the step's size, lr, instead.
					ulps(t, "p", p.Data(), wp.Data(), 4, o.LR)
				})
			})
		}
	}
}

// ulps fails unless got is within n ulps of want (of floor, where want is
// smaller), element by element.
func ulps(t *testing.T, what string, got, want []float32, n int, floor float32) {
	t.Helper()
	for i := range got {
		g, w := got[i], want[i]
		if g == w {
			continue
		}
		d := math.Abs(float64(g) - float64(w))
		a := max(float32(math.Abs(float64(w))), floor)
		u := float64(math.Nextafter32(a, float32(math.Inf(1))) - a)
		if d > float64(n)*u {
			t.Fatalf("%s[%d] = %.9g, want %.9g (%.1f ulp)", what, i, g, w, d/u)
		}
	}
}
