package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/frognano/frognano/kernels/gguf"
)

// q8Weights makes n×k weights whose blocks have scales from 1e-3 to 1 (as a
// trained matrix's do), quantized by ggml's reference Q8_0 quantizer, and
// their dequantized values.
func q8Weights(t *testing.T, r *rand.Rand, n, k int) ([]byte, []float32) {
	t.Helper()
	w := make([]float32, n*k)
	for b := 0; b < n*k; b += Q8Block {
		scale := math.Pow(10, -3*r.Float64())
		for j := range Q8Block {
			w[b+j] = float32(r.NormFloat64() * scale)
		}
	}
	q, err := gguf.Quantize(gguf.Q8_0, w)
	if err != nil {
		t.Fatal(err)
	}
	deq := make([]float32, n*k)
	if err := gguf.Dequantize(gguf.Q8_0, q, deq); err != nil {
		t.Fatal(err)
	}
	return q, deq
}

func randAct(r *rand.Rand, n int) []float32 {
	a := make([]float32, n)
	for i := range a {
		a[i] = float32(r.NormFloat64())
	}
	if n >= 64 {
		clear(a[32:64]) // an all-zero block: scale 0
	}
	return a
}

// ref64 is a[m,k]·w[n,k]ᵀ in float64, and Σ|a||w| per element (the scale
// of float32 rounding error).
func ref64(a, w []float32, m, n, k int) (ref, mag []float64) {
	ref, mag = make([]float64, m*n), make([]float64, m*n)
	for i := range m {
		for j := range n {
			var s, g float64
			for t := range k {
				p := float64(a[i*k+t]) * float64(w[j*k+t])
				s += p
				g += math.Abs(p)
			}
			ref[i*n+j], mag[i*n+j] = s, g
		}
	}
	return ref, mag
}

var q8Shapes = [][3]int{{1, 1, 32}, {1, 7, 64}, {2, 5, 96}, {3, 9, 160}, {4, 33, 576}, {5, 17, 1536}, {16, 100, 576}, {17, 40, 192}, {20, 35, 96}, {33, 48, 160}, {12, 32, 32}, {13, 48, 64}, {15, 33, 96}, {16, 293, 512}}

// TestQuantizeRowsQ8 checks the activation quantizer on hand-computed
// blocks, and the AVX2 one against it bit for bit.
func TestQuantizeRowsQ8(t *testing.T) {
	a := make([]float32, 64)
	for j := range 32 {
		a[j] = float32(j-16) / 16 // -1 … 0.9375: amax 1, q = round(127x)
	}
	a[5] = 0.5 / 127 // a tie: 0.5 rounds to even, 0
	a[6] = 1.5 / 127 // 1.5 rounds to 2
	qa, da := make([]int8, 64), make([]float32, 2)
	QuantizeRowsQ8(a, 1, 64, qa, da)
	if da[0] != 1.0/127 || da[1] != 0 {
		t.Fatalf("scales %v, want [1/127 0]", da)
	}
	for j := range 32 {
		want := int8(math.RoundToEven(float64(a[j] * 127)))
		if j == 5 {
			want = 0
		}
		if j == 6 {
			want = 2
		}
		if qa[j] != want {
			t.Errorf("q[%d] = %d for %v, want %d", j, qa[j], a[j], want)
		}
		if qa[32+j] != 0 {
			t.Errorf("zero block: q[%d] = %d", 32+j, qa[32+j])
		}
	}
	if qa[0] != -127 {
		t.Errorf("q[0] = %d for -1, want -127", qa[0])
	}
	if !q8HaveAVX2() {
		t.Skip("no AVX2 kernels on this machine or build")
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, k := range []int{32, 576, 1536} {
		m := 7
		x := randAct(r, m*k)
		for i := range x {
			if i%11 == 0 {
				x[i] = float32(math.Round(float64(x[i]*4))) / 4 // exact ties once scaled
			}
		}
		q1, d1 := make([]int8, m*k), make([]float32, m*k/32)
		q2, d2 := make([]int8, m*k), make([]float32, m*k/32)
		QuantizeRowsQ8(x, m, k, q1, d1)
		q8QuantizeC(x, m, k, q2, d2)
		for i := range q1 {
			if q1[i] != q2[i] {
				t.Fatalf("k=%d: q[%d]: go %d, avx2 %d (x=%v)", k, i, q1[i], q2[i], x[i])
			}
		}
		for i := range d1 {
			if d1[i] != d2[i] {
				t.Fatalf("k=%d: d[%d]: go %v, avx2 %v", k, i, d1[i], d2[i])
			}
		}
	}
}

// TestMatMulTQ8Golden checks both Q8_0 products, Go and AVX2, against
// float64 references on the dequantized blocks:
//
//   - MatMulTQ8 against the exact product with its own int8 activations
//     (dequantized) within float32 rounding, 1e-5·Σ|a||w|; and against
//     the product with the float32 activations within what rounding the
//     activations can cost, Σ_b (d_b/2)·Σ|w_b| (each value of a block
//     moves by at most half its scale);
//   - MatMulTQ8F32 against the product with the float32 activations
//     within float32 rounding.
func TestMatMulTQ8Golden(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, s := range q8Shapes {
		m, n, k := s[0], s[1], s[2]
		w, wd := q8Weights(t, r, n, k)
		a := randAct(r, m*k)
		qa, da := make([]int8, m*k), make([]float32, m*k/32)
		QuantizeRowsQ8(a, m, k, qa, da)
		aq := make([]float32, m*k)
		for i := range aq {
			aq[i] = float32(qa[i]) * da[i/32]
		}
		exact, mag := ref64(a, wd, m, n, k)
		withQ, magQ := ref64(aq, wd, m, n, k)
		bound := make([]float64, m*n) // what activation rounding may cost
		for i := range m {
			for j := range n {
				for b := range k / 32 {
					var sw float64
					for t := range 32 {
						sw += math.Abs(float64(wd[j*k+b*32+t]))
					}
					bound[i*n+j] += float64(da[i*k/32+b]) / 2 * sw
				}
			}
		}
		for _, ks := range q8Available() {
			t.Run(fmt.Sprintf("%s/%dx%dx%d", ks, m, n, k), func(t *testing.T) {
				c := make([]float32, m*n)
				for i := range c {
					c[i] = float32(math.NaN())
				}
				matMulTQ8(c, a, w, m, n, k, ks)
				for i := range c {
					if d := math.Abs(float64(c[i]) - withQ[i]); !(d <= 1e-5*magQ[i]+1e-30) {
						t.Fatalf("MatMulTQ8 [%d,%d] = %v, int8-activation reference %v (|Δ| %.3g > %.3g)", i/n, i%n, c[i], withQ[i], d, 1e-5*magQ[i])
					}
					if d := math.Abs(float64(c[i]) - exact[i]); !(d <= bound[i]+1e-5*mag[i]+1e-30) {
						t.Fatalf("MatMulTQ8 [%d,%d] = %v, float32-activation reference %v (|Δ| %.3g > bound %.3g)", i/n, i%n, c[i], exact[i], d, bound[i])
					}
				}
				for i := range c {
					c[i] = float32(math.NaN())
				}
				matMulTQ8F32(c, a, w, m, n, k, ks)
				for i := range c {
					if d := math.Abs(float64(c[i]) - exact[i]); !(d <= 1e-5*mag[i]+1e-30) {
						t.Fatalf("MatMulTQ8F32 [%d,%d] = %v, reference %v (|Δ| %.3g)", i/n, i%n, c[i], exact[i], d)
					}
				}
			})
		}
	}
}

// TestQ8SIMDMatchesGo runs every native kernel set and the Go loops on the
// same inputs: the int32 block sums are the same, so they differ by
// float32 summation order only.
func TestQ8SIMDMatchesGo(t *testing.T) {
	native := q8Available()[1:]
	if len(native) == 0 {
		t.Skip("no native Q8_0 kernels on this machine or build")
	}
	r := rand.New(rand.NewPCG(5, 6))
	for _, s := range q8Shapes {
		m, n, k := s[0], s[1], s[2]
		w, wd := q8Weights(t, r, n, k)
		a := randAct(r, m*k)
		_, mag := ref64(a, wd, m, n, k)
		for _, f := range []struct {
			name string
			mm   func(c, a []float32, w []byte, m, n, k int, ks q8Kernels)
		}{{"MatMulTQ8", matMulTQ8}, {"MatMulTQ8F32", matMulTQ8F32}} {
			goC := make([]float32, m*n)
			f.mm(goC, a, w, m, n, k, q8Go)
			for _, ks := range native {
				simdC := make([]float32, m*n)
				f.mm(simdC, a, w, m, n, k, ks)
				for i := range goC {
					if d := math.Abs(float64(goC[i] - simdC[i])); d > 2e-6*mag[i] {
						t.Fatalf("%s %dx%dx%d [%d]: go %v, %s %v", f.name, m, n, k, i, goC[i], ks, simdC[i])
					}
				}
			}
		}
	}
}

// TestQ8RawBlocks: weight blocks of arbitrary bytes, including -128 (which
// ggml's quantizer never writes but a file may hold) and whole blocks of
// it, give every kernel set the Go loops' result to float32 rounding: the
// int32 block sums stay exact.
func TestQ8RawBlocks(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, s := range [][3]int{{1, 17, 64}, {5, 16, 96}, {16, 40, 160}, {21, 33, 576}} {
		m, n, k := s[0], s[1], s[2]
		nb := k / Q8Block
		w := make([]byte, n*nb*Q8BlockBytes)
		for i := range w {
			w[i] = byte(r.Uint32())
		}
		mag := make([]float64, m*n) // Σ|a||w| per result, for the tolerance
		a := randAct(r, m*k)
		for j := range n {
			for b := range nb {
				blk := w[(j*nb+b)*Q8BlockBytes:]
				blk[0], blk[1] = 0x00, 0x3c // scale 1.0: the sums are what is tested
				if (j+b)%5 == 0 {
					for t := range Q8Block {
						blk[2+t] = 0x80
					}
				}
			}
		}
		for i := range m {
			for j := range n {
				for b := range nb {
					for t := range Q8Block {
						mag[i*n+j] += math.Abs(float64(a[i*k+b*Q8Block+t]) * float64(int8(w[(j*nb+b)*Q8BlockBytes+2+t])))
					}
				}
			}
		}
		goC := make([]float32, m*n)
		matMulTQ8(goC, a, w, m, n, k, q8Go)
		for _, ks := range q8Available()[1:] {
			c := make([]float32, m*n)
			matMulTQ8(c, a, w, m, n, k, ks)
			for i := range c {
				if d := math.Abs(float64(c[i] - goC[i])); d > 2e-6*mag[i]+1e-30 {
					t.Fatalf("%s %dx%dx%d [%d,%d]: %v, go %v", ks, m, n, k, i/n, i%n, c[i], goC[i])
				}
			}
		}
	}
}

// TestQ8BatchInvariant: with every kernel set, a row's result is the same
// to the bit whether it is computed alone or with up to 20 other rows (a
// Sampler's sequence must not change with the batch it is decoded in),
// for even and odd block counts and for row counts that leave remainders;
// with AMX, within each side of q8AMXMinRows.
func TestQ8BatchInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, s := range [][2]int{{7, 64}, {9, 96}, {33, 160}, {40, 576}, {17, 1536}} {
		n, k := s[0], s[1]
		w, _ := q8Weights(t, r, n, k)
		const m = 21
		a := randAct(r, m*k)
		for _, ks := range q8Available() {
			for _, f := range []struct {
				name string
				mm   func(c, a []float32, w []byte, m, n, k int, ks q8Kernels)
				rows []int
			}{
				{"MatMulTQ8", matMulTQ8, []int{3, 8, 9, 21}},
				{"MatMulTQ8F32", matMulTQ8F32, []int{2, 4, 5, 7}}, // below its panel path
			} {
				alone := make([]float32, m*n)
				for i := range m {
					f.mm(alone[i*n:(i+1)*n], a[i*k:(i+1)*k], w, 1, n, k, ks)
				}
				rows := f.rows
				if ks == q8AMX && f.name == "MatMulTQ8" {
					// Batches of q8AMXMinRows or more against the 21-row batch,
					// smaller ones against their rows alone.
					f.mm(alone, a, w, m, n, k, ks)
					rows = []int{2, 3, 4, 5, 8, 12, 16, 17, 20}
				}
				for _, rows := range rows {
					c := make([]float32, rows*n)
					f.mm(c, a[:rows*k], w, rows, n, k, ks)
					if ks == q8AMX && f.name == "MatMulTQ8" && rows < q8AMXMinRows {
						alone1 := make([]float32, rows*n)
						for i := range rows {
							f.mm(alone1[i*n:(i+1)*n], a[i*k:(i+1)*k], w, 1, n, k, ks)
						}
						if !slices.Equal(c, alone1) {
							t.Fatalf("%s %s %dx%dx%d: a batch of %d differs from its rows alone", f.name, ks, rows, n, k, rows)
						}
						continue
					}
					for i := range c {
						if c[i] != alone[i] {
							t.Fatalf("%s %s %dx%dx%d: row %d col %d = %v in a batch of %d, %v alone (or in the batch of %d)", f.name, ks, rows, n, k, i/n, i%n, c[i], rows, alone[i], m)
						}
					}
				}
			}
		}
	}
}

// TestSetQ8Kernels: the kernel set can be switched to any this machine
// has, and back; an unknown name or one this CPU lacks is an error.
func TestSetQ8Kernels(t *testing.T) {
	orig := Q8Impl()
	t.Cleanup(func() {
		if _, err := SetQ8Kernels(orig); err != nil {
			t.Fatal(err)
		}
	})
	for _, name := range Q8Kernels() {
		if _, err := SetQ8Kernels(name); err != nil {
			t.Fatalf("SetQ8Kernels(%q): %v", name, err)
		}
		if Q8Impl() != name {
			t.Fatalf("after SetQ8Kernels(%q), Q8Impl() = %q", name, Q8Impl())
		}
	}
	if _, err := SetQ8Kernels("avx1024"); err == nil || !strings.Contains(err.Error(), "unknown") {
		t.Fatalf("SetQ8Kernels(avx1024): %v", err)
	}
	if !q8HaveAVX512() {
		if _, err := SetQ8Kernels("avx512-vnni"); err == nil || !strings.Contains(err.Error(), "cannot run") {
			t.Fatalf("SetQ8Kernels(avx512-vnni) without the CPU features: %v", err)
		}
	}
}

func TestMatMulTQ8Panics(t *testing.T) {
	for name, f := range map[string]func(){
		"k not a multiple of 32": func() { MatMulTQ8(make([]float32, 1), make([]float32, 33), make([]byte, 68), 1, 1, 33) },
		"short weights":          func() { MatMulTQ8(make([]float32, 2), make([]float32, 32), make([]byte, 34), 1, 2, 32) },
		"short output":           func() { MatMulTQ8F32(make([]float32, 1), make([]float32, 32), make([]byte, 68), 1, 2, 32) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// BenchmarkMatMulTQ8 compares, on SmolLM2-135M's shapes, float32 sgemm with
// the two Q8_0 products (int8 activations, and float32 activations with
// widened weights), each with every native kernel set this CPU has (AVX2,
// AVX-512 VNNI), at 1 and 16 rows (decoding at batch 1 and 16) and 128
// (prefill).
func BenchmarkMatMulTQ8(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, s := range [][2]int{{1536, 576}, {576, 1536}, {49152, 576}} {
		n, k := s[0], s[1]
		wf := make([]float32, n*k)
		for i := range wf {
			wf[i] = float32(r.NormFloat64() * 0.05)
		}
		w, err := gguf.Quantize(gguf.Q8_0, wf)
		if err != nil {
			b.Fatal(err)
		}
		for _, m := range []int{1, 4, 8, 12, 16, 128} {
			a := randAct(r, m*k)
			c := make([]float32, m*n)
			type arm struct {
				name  string
				bytes int
				run   func()
			}
			arms := []arm{{"f32", 4 * n * k, func() { MatMulT(c, a, wf, m, n, k) }}}
			for _, ks := range q8Available()[1:] {
				arms = append(arms,
					arm{"q8xq8-" + ks.String(), len(w), func() { matMulTQ8(c, a, w, m, n, k, ks) }},
					arm{"q8xf32-" + ks.String(), len(w), func() { matMulTQ8F32(c, a, w, m, n, k, ks) }})
			}
			for _, v := range arms {
				b.Run(fmt.Sprintf("%s/m=%d/n=%d/k=%d", v.name, m, n, k), func(b *testing.B) {
					b.SetBytes(int64(v.bytes))
					for b.Loop() {
						v.run()
					}
				})
			}
		}
	}
}
