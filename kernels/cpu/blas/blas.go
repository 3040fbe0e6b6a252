// Package blas multiplies float32 matrices for the CPU backend. It is the
// only package outside kernels/cuda that may use cgo: with cgo enabled it
// loads OpenBLAS at run time (dlopen) and calls its sgemm, which runs about
// ten times faster than the Go loops here on AVX2/AVX-512 machines. It
// prefers the current OpenBLAS that scripts/setup.sh installs in LibDir (from
// the scipy-openblas32 wheel), then Debian's libopenblas0, then the Go loops;
// FROGNANO_BLAS names another library, or "go". The kernels (SkylakeX on
// AVX-512, Haswell on AVX2) are chosen from the CPU's features, whatever
// OPENBLAS_CORETYPE says. Building with the purego tag, or with
// CGO_ENABLED=0, uses the Go loops only, so the CPU backend builds anywhere.
// No C type appears in the API.
//
// A large product (MatMulT, MatMulNN, MatMulTN) whose caller finds every
// core free is one sgemm of a second, parallel instance of the library,
// which splits it into jobs sharing their packed panels (as NumPy's threaded
// OpenBLAS does) and hands them, through OpenBLAS's threads callback, to
// frognano's goroutines. Otherwise work is split across cores in Go
// (MatMulT by columns; the attention kernel by heads), each piece one call
// of the single-threaded instance. Either way the process computes on at
// most Threads() threads: OpenBLAS's own pool never gets work, since its
// workers would spin after each call and compete with the goroutines that
// run the other kernels.
package blas

import "fmt"

// gemvRows is the row count below which a product is done as one sgemv per
// row: OpenBLAS 0.3.21's sgemm is slow for a few rows (measured on Zen 5:
// 2 rows of 1536×576 take 2× longer as sgemm than as two sgemv calls; at 8
// rows they are even).
const gemvRows = 8

// minChunkFLOPs is the least work worth handing to another core.
const minChunkFLOPs = 1 << 17

// MatMulT sets c[m,n] = a[m,k] · b[n,k]ᵀ; all three are row-major and
// contiguous, and c must not overlap a or b. It uses every core when the
// product is large enough to pay for it, and is safe for concurrent use.
func MatMulT(c, a, b []float32, m, n, k int) {
	if m < 0 || n < 0 || k < 0 || len(a) < m*k || len(b) < n*k || len(c) < m*n {
		panic(fmt.Sprintf("blas: MatMulT m=%d n=%d k=%d with len(a)=%d len(b)=%d len(c)=%d", m, n, k, len(a), len(b), len(c)))
	}
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		clear(c[:m*n])
		return
	}
	product(func() {
		forColumns(n, 2*m*k, func(j0, j1 int) {
			gemm(true, m, j1-j0, k, a, k, b[j0*k:], k, c[j0:], n)
		})
	}, false, true, false, m, n, k, a, k, b, k, c, n)
}

// Gemm sets the m×n matrix c to a·bᵀ (transB) or a·b, on one core. Matrices
// are row-major with the given leading dimensions (distances between rows),
// so each may be a column range of a wider matrix, such as one head's slice
// of a KV cache: a is m×k, b is n×k (transB) or k×n, and c must not overlap
// either. Elements of c's rows beyond column n are left alone.
func Gemm(transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	bRows, bCols := n, k
	if !transB {
		bRows, bCols = k, n
	}
	if m < 0 || n < 0 || k < 0 || !fits(a, m, k, lda) || !fits(b, bRows, bCols, ldb) || !fits(c, m, n, ldc) {
		panic(fmt.Sprintf("blas: Gemm transB=%v m=%d n=%d k=%d with len(a)=%d lda=%d len(b)=%d ldb=%d len(c)=%d ldc=%d",
			transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc))
	}
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		for i := range m {
			clear(c[i*ldc : i*ldc+n])
		}
		return
	}
	gemm(transB, m, n, k, a, lda, b, ldb, c, ldc)
}

// fits reports whether x holds a rows×cols matrix with leading dimension ld.
func fits(x []float32, rows, cols, ld int) bool {
	if cols < 0 || ld < max(cols, 1) {
		return false
	}
	return rows == 0 || cols == 0 || len(x) >= (rows-1)*ld+cols
}

// forColumns calls fn on ranges covering [0, n), in parallel when
// n·flopsPerColumn is large. Ranges start at multiples of 16 so that each
// piece's rows of b and columns of c stay aligned for SIMD loads.
func forColumns(n, flopsPerColumn int, fn func(j0, j1 int)) {
	chunks := min(Threads(), n*flopsPerColumn/minChunkFLOPs, (n+15)/16)
	if chunks <= 1 {
		fn(0, n)
		return
	}
	step := (n + chunks - 1) / chunks
	step = (step + 15) &^ 15
	Run((n+step-1)/step, func(i int) { fn(i*step, min((i+1)*step, n)) })
}
