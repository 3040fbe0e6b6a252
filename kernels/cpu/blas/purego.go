//go:build !cgo || purego

package blas

// Impl names the implementation in use.
const Impl = "go"

func gemm(transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	gemmGo(transB, m, n, k, a, lda, b, ldb, c, ldc)
}
