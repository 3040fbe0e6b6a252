//go:build !cgo || purego

package blas

func gemmFull(transA, transB, accumulate bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	gemmFullGo(transA, transB, accumulate, m, n, k, a, lda, b, ldb, c, ldc)
}
