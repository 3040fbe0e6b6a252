//go:build cgo && !purego

package blas

/*
#include <cblas.h>
*/
import "C"

// gemmFull is GemmFull after validation, with m, n, k > 0: one sgemm.
func gemmFull(transA, transB, accumulate bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if !transA && !accumulate {
		gemm(transB, m, n, k, a, lda, b, ldb, c, ldc) // with its few-rows path
		return
	}
	ta, tb := C.enum_CBLAS_TRANSPOSE(C.CblasNoTrans), C.enum_CBLAS_TRANSPOSE(C.CblasNoTrans)
	if transA {
		ta = C.CblasTrans
	}
	if transB {
		tb = C.CblasTrans
	}
	var beta C.float
	if accumulate {
		beta = 1
	}
	C.cblas_sgemm(C.CblasRowMajor, ta, tb, C.blasint(m), C.blasint(n), C.blasint(k),
		1, ptr(a, 0), C.blasint(lda), ptr(b, 0), C.blasint(ldb), beta, ptr(c, 0), C.blasint(ldc))
}
