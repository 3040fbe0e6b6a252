//go:build cgo && !purego

package blas

/*
#cgo LDFLAGS: -lopenblas
#include <cblas.h>
*/
import "C"

import "unsafe"

// Impl names the implementation in use.
const Impl = "openblas"

// gemvRows is the row count below which a product is done as one sgemv per
// row: OpenBLAS 0.3.21's sgemm is slow for a few rows (measured on Zen 5:
// 2 rows of 1536×576 take 2× longer as sgemm than as two sgemv calls; at 8
// rows they are even).
const gemvRows = 8

func init() {
	C.openblas_set_num_threads(1)
}

func ptr(x []float32, i int) *C.float { return (*C.float)(unsafe.Pointer(&x[i])) }

// gemm is Gemm after validation, with m, n, k > 0.
func gemm(transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if m < gemvRows {
		// Row i of c is b·a_i (b is n×k) or bᵀ·a_i (b is k×n).
		trans, rows, cols := C.enum_CBLAS_TRANSPOSE(C.CblasNoTrans), n, k
		if !transB {
			trans, rows, cols = C.CblasTrans, k, n
		}
		for i := range m {
			C.cblas_sgemv(C.CblasRowMajor, trans, C.blasint(rows), C.blasint(cols),
				1, ptr(b, 0), C.blasint(ldb), ptr(a, i*lda), 1, 0, ptr(c, i*ldc), 1)
		}
		return
	}
	tb := C.enum_CBLAS_TRANSPOSE(C.CblasNoTrans)
	if transB {
		tb = C.CblasTrans
	}
	C.cblas_sgemm(C.CblasRowMajor, C.CblasNoTrans, tb, C.blasint(m), C.blasint(n), C.blasint(k),
		1, ptr(a, 0), C.blasint(lda), ptr(b, 0), C.blasint(ldb), 0, ptr(c, 0), C.blasint(ldc))
}
