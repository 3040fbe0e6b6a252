package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// refGemm is op(a)·op(b) (+ c0) in float64, with the rounding bound of
// refMatMulT; a is read as m×k (k×m when transA), b as k×n (n×k when
// transB), all contiguous.
func refGemm(transA, transB bool, a, b, c0 []float32, m, n, k int) (c, bound []float64) {
	at, bt := make([]float32, m*k), make([]float32, n*k) // a as m×k, b as n×k
	for i := range m {
		for p := range k {
			if transA {
				at[i*k+p] = a[p*m+i]
			} else {
				at[i*k+p] = a[i*k+p]
			}
		}
	}
	for j := range n {
		for p := range k {
			if transB {
				bt[j*k+p] = b[j*k+p]
			} else {
				bt[j*k+p] = b[p*n+j]
			}
		}
	}
	c, bound = refMatMulT(at, bt, m, n, k)
	if c0 != nil {
		for i := range c {
			c[i] += float64(c0[i])
			bound[i] += 0x1p-24 * math.Abs(c[i])
		}
	}
	return c, bound
}

func TestGemmFull(t *testing.T) {
	impls := []struct {
		name string
		f    func(transA, transB, acc bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int)
	}{{"go", gemmFullGo}}
	for _, impl := range libs() {
		impls = append(impls, struct {
			name string
			f    func(transA, transB, acc bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int)
		}{impl.Name, func(transA, transB, acc bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
			defer Use(impl)()
			GemmFull(transA, transB, acc, m, n, k, a, lda, b, ldb, c, ldc)
		}})
	}
	r := rand.New(rand.NewPCG(11, 12))
	for _, s := range shapes {
		m, n, k := s[0], s[1], s[2]
		for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			for _, acc := range []bool{false, true} {
				a, b := randSlice(r, m*k), randSlice(r, n*k)
				lda, ldb := k, n
				if tr[0] {
					lda = m
				}
				if tr[1] {
					ldb = k
				}
				c0 := randSlice(r, m*n)
				var prev []float32
				if acc {
					prev = c0
				}
				want, bound := refGemm(tr[0], tr[1], a, b, prev, m, n, k)
				for _, impl := range impls {
					t.Run(fmt.Sprintf("%s/tA=%v/tB=%v/acc=%v/%dx%dx%d", impl.name, tr[0], tr[1], acc, m, n, k), func(t *testing.T) {
						// c has 3 columns of padding that must keep their values.
						const pad = 3
						ldc := n + pad
						c := randSlice(r, m*ldc)
						for i := range m {
							copy(c[i*ldc:], c0[i*n:(i+1)*n])
						}
						if !acc {
							for i := range m {
								for j := range n {
									c[i*ldc+j] = float32(math.NaN()) // must not be read
								}
							}
						}
						old := append([]float32(nil), c...)
						impl.f(tr[0], tr[1], acc, m, n, k, a, lda, b, ldb, c, ldc)
						for i := range m {
							for j := range ldc {
								x := i*ldc + j
								if j >= n {
									if c[x] != old[x] {
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
}

func TestMatMulNNTN(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	// Shapes large enough to split across cores both ways.
	for _, s := range append(shapes, [3]int{200, 96, 80}, [3]int{300, 33, 257}) {
		m, n, k := s[0], s[1], s[2]
		t.Run(fmt.Sprintf("NN/%dx%dx%d", m, n, k), func(t *testing.T) {
			a, b := randSlice(r, m*k), randSlice(r, k*n)
			want, bound := refGemm(false, false, a, b, nil, m, n, k)
			c := randSlice(r, m*n+1)
			last := c[m*n]
			MatMulNN(c, a, b, m, n, k)
			for i := range m * n {
				if d := math.Abs(float64(c[i]) - want[i]); !(d <= bound[i]) {
					t.Fatalf("c[%d] = %v, want %v", i, c[i], want[i])
				}
			}
			if c[m*n] != last {
				t.Fatal("wrote past c[m*n]")
			}
		})
		for _, acc := range []bool{false, true} {
			// c[n,k] = a[m,n]ᵀ·b[m,k]: the reference's "m" is n and its "k" is m.
			t.Run(fmt.Sprintf("TN/acc=%v/%dx%dx%d", acc, m, n, k), func(t *testing.T) {
				a, b, c := randSlice(r, m*n), randSlice(r, m*k), randSlice(r, n*k+1)
				var prev []float32
				if acc {
					prev = append([]float32(nil), c...)
				}
				want, bound := refGemm(true, false, a, b, prev, n, k, m)
				last := c[n*k]
				MatMulTN(c, a, b, m, n, k, acc)
				for i := range n * k {
					if d := math.Abs(float64(c[i]) - want[i]); !(d <= bound[i]) {
						t.Fatalf("c[%d] = %v, want %v", i, c[i], want[i])
					}
				}
				if c[n*k] != last {
					t.Fatal("wrote past c[n*k]")
				}
			})
		}
	}
	t.Run("TN/m=0", func(t *testing.T) {
		c := []float32{1, 2, 3, 4}
		MatMulTN(c, nil, nil, 0, 2, 2, true)
		if c[0] != 1 || c[3] != 4 {
			t.Fatalf("accumulating the empty sum changed c: %v", c)
		}
		MatMulTN(c, nil, nil, 0, 2, 2, false)
		if c[0] != 0 || c[3] != 0 {
			t.Fatalf("the empty sum left %v", c)
		}
	})
	t.Run("panics", func(t *testing.T) {
		for _, f := range []func(){
			func() { MatMulNN(make([]float32, 4), make([]float32, 4), make([]float32, 3), 2, 2, 2) },
			func() { MatMulTN(make([]float32, 3), make([]float32, 4), make([]float32, 4), 2, 2, 2, false) },
			func() {
				GemmFull(true, false, false, 2, 2, 3, make([]float32, 6), 1, make([]float32, 6), 2, make([]float32, 4), 2)
			},
		} {
			func() {
				defer func() {
					if recover() == nil {
						t.Error("no panic")
					}
				}()
				f()
			}()
		}
	})
}
