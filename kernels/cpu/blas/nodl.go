//go:build !cgo || purego

package blas

import "errors"

// cgoEnabled reports whether this build can load a BLAS library.
const cgoEnabled = false

// lib is a loaded BLAS library; builds without cgo never have one.
type lib struct{ parErr string }

func cpuCore() string { return "" }

func openLib(path, core string) (*lib, string, string, error) {
	return nil, "", "", errors.New("built without cgo: only the Go loops")
}

func (*lib) gemm(transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	panic("blas: no library in a build without cgo")
}

func (*lib) gemmFull(transA, transB, accumulate bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	panic("blas: no library in a build without cgo")
}

func (*lib) parallel() int { return 0 }

func (*lib) gemmParallel(transA, transB, accumulate bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	panic("blas: no library in a build without cgo")
}
