//go:build !cgo || purego

package blas

// Without cgo the Q8_0 products run the Go loops of q8.go.

func q8HaveAVX2() bool   { return false }
func q8HaveAVX512() bool { return false }
func q8HaveAMX() bool    { return false }

const q8AMXMaxBlocks = 0

const noKernels = "blas: no Q8_0 SIMD kernels in a build without cgo"

func q8QuantizeC(a []float32, m, k int, qa []int8, da []float32)                    { panic(noKernels) }
func q8GemmC(m, n, nb int, qa []int8, da []float32, w []byte, c []float32, ldc int) { panic(noKernels) }
func q8GemmF32C(m, n, k int, a []float32, w []byte, c []float32, ldc int)           { panic(noKernels) }
func q8WidenC(w []byte, blocks int, out []float32)                                  { panic(noKernels) }
func q8PrepVNNI(m, nb int, qa []int8, da []float32, ua []uint8, dae []float32)      { panic(noKernels) }
func q8GemmVNNI(m, n, nb int, ua []uint8, dae []float32, w []byte, c []float32, ldc int) {
	panic(noKernels)
}
func q8Widen512(w []byte, blocks int, out []float32)                         { panic(noKernels) }
func q8GemmF32512(m, n, k int, a []float32, w []byte, c []float32, ldc int)  { panic(noKernels) }
func q8PrepAMX(m, nb int, qa []int8, da []float32, pb []int8, dyt []float32) { panic(noKernels) }
func q8GemmAMX(m, tiles, nb int, pb []int8, dyt []float32, w []byte, c []float32, ldc int) {
	panic(noKernels)
}
