package blas

import "fmt"

// The products of a backward pass: the transposed forms of the forward's
// a·bᵀ, and accumulation into the destination for parameter gradients.

// MatMulNN sets c[m,n] = a[m,k] · b[k,n]; all three are row-major and
// contiguous, and c must not overlap a or b. It is the gradient of a Linear
// layer's input, dx = dy · W. Like MatMulT it splits the product by columns
// of c across the cores when it is large enough.
func MatMulNN(c, a, b []float32, m, n, k int) {
	if m < 0 || n < 0 || k < 0 || len(a) < m*k || len(b) < k*n || len(c) < m*n {
		panic(fmt.Sprintf("blas: MatMulNN m=%d n=%d k=%d with len(a)=%d len(b)=%d len(c)=%d", m, n, k, len(a), len(b), len(c)))
	}
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		clear(c[:m*n])
		return
	}
	product(func() {
		forRowsOrColumns(m, n, 2*m*n*k, func(i0, i1 int) {
			gemmFull(false, false, false, i1-i0, n, k, a[i0*k:], k, b, n, c[i0*n:], n)
		}, func(j0, j1 int) {
			gemmFull(false, false, false, m, j1-j0, k, a, k, b[j0:], n, c[j0:], n)
		})
	}, false, false, false, m, n, k, a, k, b, n, c, n)
}

// MatMulTN sets c[n,k] = a[m,n]ᵀ · b[m,k], or adds it to c when accumulate
// is true; all three are row-major and contiguous, and c must not overlap a
// or b. It is the gradient of a Linear layer's weight, dW += dyᵀ · x. The
// product is split by rows of c across the cores, so every piece is one
// sgemm over all m rows of a and b.
func MatMulTN(c, a, b []float32, m, n, k int, accumulate bool) {
	if m < 0 || n < 0 || k < 0 || len(a) < m*n || len(b) < m*k || len(c) < n*k {
		panic(fmt.Sprintf("blas: MatMulTN m=%d n=%d k=%d with len(a)=%d len(b)=%d len(c)=%d", m, n, k, len(a), len(b), len(c)))
	}
	if n == 0 || k == 0 {
		return
	}
	if m == 0 {
		if !accumulate {
			clear(c[:n*k])
		}
		return
	}
	product(func() {
		forColumns(n, 2*m*k, func(i0, i1 int) {
			gemmFull(true, false, accumulate, i1-i0, k, m, a[i0:], n, b, k, c[i0*k:], k)
		})
	}, true, false, accumulate, n, k, m, a, n, b, k, c, k)
}

// forRowsOrColumns splits an m×n product of the given work across the
// cores: by rows of c (byRows) when there are enough of them for every
// core, else by columns (byCols).
func forRowsOrColumns(m, n, flops int, byRows, byCols func(lo, hi int)) {
	if m < 32*Threads() {
		forColumns(n, flops/n, byCols)
		return
	}
	chunks := min(Threads(), flops/minChunkFLOPs)
	if chunks <= 1 {
		byRows(0, m)
		return
	}
	step := (m + chunks - 1) / chunks
	Run((m+step-1)/step, func(i int) { byRows(i*step, min((i+1)*step, m)) })
}

// GemmFull sets the m×n matrix c to op(a)·op(b), or adds the product to c
// when accumulate is true, on one core; op transposes its matrix when the
// flag says so. Matrices are row-major with the given leading dimensions:
// a is m×k (k×m when transA), b is k×n (n×k when transB). c must not
// overlap a or b, and elements of c's rows beyond column n are left alone.
// It is BLAS sgemm with alpha 1 and beta 0 or 1.
func GemmFull(transA, transB, accumulate bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	aRows, aCols := m, k
	if transA {
		aRows, aCols = k, m
	}
	bRows, bCols := k, n
	if transB {
		bRows, bCols = n, k
	}
	if m < 0 || n < 0 || k < 0 || !fits(a, aRows, aCols, lda) || !fits(b, bRows, bCols, ldb) || !fits(c, m, n, ldc) {
		panic(fmt.Sprintf("blas: GemmFull transA=%v transB=%v m=%d n=%d k=%d with len(a)=%d lda=%d len(b)=%d ldb=%d len(c)=%d ldc=%d",
			transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc))
	}
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		if !accumulate {
			for i := range m {
				clear(c[i*ldc : i*ldc+n])
			}
		}
		return
	}
	gemmFull(transA, transB, accumulate, m, n, k, a, lda, b, ldb, c, ldc)
}

// gemmFullGo is GemmFull in plain Go, on one core, for builds without
// OpenBLAS, with m, n, k > 0.
func gemmFullGo(transA, transB, accumulate bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	switch {
	case !transA && !accumulate:
		gemmGo(transB, m, n, k, a, lda, b, ldb, c, ldc)
	case !transA && !transB:
		// c_i += Σ_p a[i,p]·b_p, as gemmGo without the clearing.
		for i := range m {
			ci := row(c, i, ldc, n)
			for p, x := range row(a, i, lda, k) {
				axpy(ci, row(b, p, ldb, n), x)
			}
		}
	case !transA:
		for i := range m {
			ai, ci := row(a, i, lda, k), row(c, i, ldc, n)
			for j := range ci {
				ci[j] += dot(ai, row(b, j, ldb, k))
			}
		}
	case !transB:
		// c_i (+)= Σ_p a[p,i]·b_p: blocks of 8 rows of c stay in cache
		// while the rows of b stream past once per block.
		const iBlock = 8
		for i0 := 0; i0 < m; i0 += iBlock {
			i1 := min(i0+iBlock, m)
			if !accumulate {
				for i := i0; i < i1; i++ {
					clear(row(c, i, ldc, n))
				}
			}
			for p := range k {
				bp, ap := row(b, p, ldb, n), a[p*lda:p*lda+m]
				for i := i0; i < i1; i++ {
					axpy(row(c, i, ldc, n), bp, ap[i])
				}
			}
		}
	default:
		// c[i,j] (+)= Σ_p a[p,i]·b[j,p]; no caller needs it fast.
		for i := range m {
			ci := row(c, i, ldc, n)
			for j := range ci {
				bj := row(b, j, ldb, k)
				var s float32
				for p, y := range bj {
					s += a[p*lda+i] * y
				}
				if accumulate {
					ci[j] += s
				} else {
					ci[j] = s
				}
			}
		}
	}
}

// axpy sets y += alpha·x.
func axpy(y, x []float32, alpha float32) {
	x = x[:len(y)]
	for j := range y {
		y[j] += alpha * x[j]
	}
}
