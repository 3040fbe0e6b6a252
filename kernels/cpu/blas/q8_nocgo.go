//go:build !cgo || purego

package blas

// Without cgo the Q8_0 products run the Go loops of q8.go.

func q8SIMD() bool     { return false }
func q8HaveSIMD() bool { return false }

func q8QuantizeC(a []float32, m, k int, qa []int8, da []float32) {
	panic("blas: no AVX2 kernels in a build without cgo")
}

func q8GemmC(m, n, nb int, qa []int8, da []float32, w []byte, c []float32, ldc int) {
	panic("blas: no AVX2 kernels in a build without cgo")
}

func q8GemmF32C(m, n, k int, a []float32, w []byte, c []float32, ldc int) {
	panic("blas: no AVX2 kernels in a build without cgo")
}

func q8WidenC(w []byte, blocks int, out []float32) {
	panic("blas: no AVX2 kernels in a build without cgo")
}
