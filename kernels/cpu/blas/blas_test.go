package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

// libs are the BLAS libraries that load here (none in a build without cgo),
// each tested against the reference as well as the one in use.
func libs() []Implementation {
	var out []Implementation
	for _, impl := range Implementations() {
		if impl.lib != nil {
			out = append(out, impl)
		}
	}
	return out
}

func randSlice(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// refMatMulT is the textbook triple loop in float64, and the bound on the
// float32 rounding error of any summation order: k·ε·Σ|a·b|.
func refMatMulT(a, b []float32, m, n, k int) (c, bound []float64) {
	c, bound = make([]float64, m*n), make([]float64, m*n)
	for i := range m {
		for j := range n {
			var s, abs float64
			for p := range k {
				x := float64(a[i*k+p]) * float64(b[j*k+p])
				s += x
				abs += math.Abs(x)
			}
			c[i*n+j] = s
			bound[i*n+j] = float64(k+2)*0x1p-24*abs + 1e-30
		}
	}
	return c, bound
}

var shapes = [][3]int{
	{1, 1, 1}, {1, 7, 3}, {1, 300, 576}, {2, 3, 4}, {3, 5, 7}, {4, 2, 9},
	{5, 130, 33}, {16, 300, 64}, {17, 67, 129}, {64, 1000, 16},
}

func TestMatMulT(t *testing.T) {
	impls := []struct {
		name string
		f    func(c, a, b []float32, m, n, k int)
	}{
		{"go", func(c, a, b []float32, m, n, k int) {
			forColumns(n, 2*m*k, func(j0, j1 int) { gemmGo(true, m, j1-j0, k, a, k, b[j0*k:], k, c[j0:], n) })
		}},
		{"go/serial", func(c, a, b []float32, m, n, k int) { gemmGo(true, m, n, k, a, k, b, k, c, n) }},
	}
	for _, impl := range libs() {
		impls = append(impls, struct {
			name string
			f    func(c, a, b []float32, m, n, k int)
		}{impl.Name, func(c, a, b []float32, m, n, k int) {
			defer Use(impl)()
			MatMulT(c, a, b, m, n, k)
		}})
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range shapes {
		m, n, k := s[0], s[1], s[2]
		a, b := randSlice(r, m*k), randSlice(r, n*k)
		want, bound := refMatMulT(a, b, m, n, k)
		for _, impl := range impls {
			t.Run(fmt.Sprintf("%s/%dx%dx%d", impl.name, m, n, k), func(t *testing.T) {
				c := randSlice(r, m*n+1) // stale values must be overwritten
				last := c[m*n]
				impl.f(c, a, b, m, n, k)
				for i := range m * n {
					if d := math.Abs(float64(c[i]) - want[i]); !(d <= bound[i]) {
						t.Fatalf("c[%d] = %v, want %v (bound %g)", i, c[i], want[i], bound[i])
					}
				}
				if c[m*n] != last {
					t.Fatalf("wrote past c[m*n]")
				}
			})
		}
	}
}

// TestGemm multiplies sub-matrices of wider ones, both ways round, and
// checks that the padding between c's rows keeps its values.
func TestGemm(t *testing.T) {
	impls := []struct {
		name string
		f    func(transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int)
	}{{"go", gemmGo}}
	for _, impl := range libs() {
		impls = append(impls, struct {
			name string
			f    func(transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int)
		}{impl.Name, func(transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
			defer Use(impl)()
			Gemm(transB, m, n, k, a, lda, b, ldb, c, ldc)
		}})
	}
	r := rand.New(rand.NewPCG(9, 9))
	for _, s := range shapes {
		m, n, k := s[0], s[1], s[2]
		for _, transB := range []bool{true, false} {
			lda, ldc := k+3, n+2
			bRows, bCols := n, k
			if !transB {
				bRows, bCols = k, n
			}
			ldb := bCols + 5
			a, b := randSlice(r, m*lda), randSlice(r, bRows*ldb)
			// The same product on contiguous copies, for the reference.
			ac, bt := make([]float32, m*k), make([]float32, n*k)
			for i := range m {
				copy(ac[i*k:], a[i*lda:i*lda+k])
			}
			for j := range n {
				for p := range k {
					if transB {
						bt[j*k+p] = b[j*ldb+p]
					} else {
						bt[j*k+p] = b[p*ldb+j]
					}
				}
			}
			want, bound := refMatMulT(ac, bt, m, n, k)
			for _, impl := range impls {
				t.Run(fmt.Sprintf("%s/transB=%v/%dx%dx%d", impl.name, transB, m, n, k), func(t *testing.T) {
					c := randSlice(r, (m-1)*ldc+n)
					pad := append([]float32(nil), c...)
					impl.f(transB, m, n, k, a, lda, b, ldb, c, ldc)
					for i := range m {
						for j := range ldc {
							x := i*ldc + j
							if x >= len(c) {
								break
							}
							if j >= n {
								if c[x] != pad[x] {
									t.Fatalf("padding c[%d] changed", x)
								}
								continue
							}
							if d := math.Abs(float64(c[x]) - want[i*n+j]); !(d <= bound[i*n+j]) {
								t.Fatalf("c[%d,%d] = %v, want %v (bound %g)", i, j, c[x], want[i*n+j], bound[i*n+j])
							}
						}
					}
				})
			}
		}
	}
}

func TestMatMulTDegenerate(t *testing.T) {
	c := []float32{1, 2, 3, 4, 5, 6}
	MatMulT(c, nil, nil, 2, 3, 0) // k = 0: the empty sum
	for i, x := range c {
		if x != 0 {
			t.Fatalf("k=0: c[%d] = %v, want 0", i, x)
		}
	}
	c[0] = 7
	MatMulT(c, nil, []float32{1, 2}, 0, 2, 1)
	if c[0] != 7 {
		t.Fatalf("m=0 wrote to c")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("short b: no panic")
		}
	}()
	MatMulT(make([]float32, 4), make([]float32, 4), make([]float32, 3), 2, 2, 2)
}

func TestGemmPanics(t *testing.T) {
	x := make([]float32, 100)
	tests := []struct {
		name string
		f    func()
	}{
		{"lda below k", func() { Gemm(true, 2, 2, 4, x, 3, x, 4, x, 2) }},
		{"short b", func() { Gemm(false, 2, 3, 4, x, 4, x[:10], 3, x, 3) }},
		{"short c", func() { Gemm(true, 3, 3, 1, x, 1, x, 1, x[:8], 4) }},
		{"negative m", func() { Gemm(true, -1, 2, 2, x, 2, x, 2, x, 2) }},
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
	c := []float32{1, 2, 3, 4, 5}
	Gemm(false, 2, 2, 0, nil, 1, nil, 2, c, 3) // k = 0 clears the view only
	if want := []float32{0, 0, 3, 0, 0}; fmt.Sprint(c) != fmt.Sprint(want) {
		t.Fatalf("k=0: c = %v, want %v", c, want)
	}
}

// TestMatMulTConcurrent runs products from several goroutines at once, as two
// samplers in one process would.
func TestMatMulTConcurrent(t *testing.T) {
	const m, n, k = 8, 512, 96
	r := rand.New(rand.NewPCG(3, 4))
	a, b := randSlice(r, m*k), randSlice(r, n*k)
	want := make([]float32, m*n)
	MatMulT(want, a, b, m, n, k)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := make([]float32, m*n)
			for range 20 {
				MatMulT(c, a, b, m, n, k)
				for i := range c {
					if c[i] != want[i] {
						errs <- fmt.Errorf("goroutine %d: c[%d] = %v, want %v", g, i, c[i], want[i])
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// BenchmarkMatMulT compares the libraries that load here with the Go loops
// on SmolLM2-135M shapes.
func BenchmarkMatMulT(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, s := range [][3]int{{1, 1536, 576}, {16, 1536, 576}, {128, 1536, 576}} {
		m, n, k := s[0], s[1], s[2]
		a, w, c := randSlice(r, m*k), randSlice(r, n*k), make([]float32, m*n)
		for _, impl := range []struct {
			name string
			f    func()
		}{
			{"go", func() {
				forColumns(n, 2*m*k, func(j0, j1 int) { gemmGo(true, m, j1-j0, k, a, k, w[j0*k:], k, c[j0:], n) })
			}},
		} {
			b.Run(fmt.Sprintf("%s/%dx%dx%d", impl.name, m, n, k), func(b *testing.B) {
				for b.Loop() {
					impl.f()
				}
				b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
		for _, impl := range libs() {
			b.Run(fmt.Sprintf("%s/%dx%dx%d", strings.ReplaceAll(impl.Name, " ", "-"), m, n, k), func(b *testing.B) {
				defer Use(impl)()
				for b.Loop() {
					MatMulT(c, a, w, m, n, k)
				}
				b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
