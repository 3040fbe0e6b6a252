//go:build !cgo || purego

package simd

// Builds without cgo have no vector level: On is false and the CPU
// backend runs its Go loops. The kernels exist so callers compile; they
// panic, as they do in any build when On is false.

func cpuLevel() Level { return Go }

func off() { panic("simd: built without cgo: no vector level (check On)") }

func Max(x []float32) float32                                             { off(); return 0 }
func ExpShifted(dst, x []float32, a, b float32) float64                   { off(); return 0 }
func ExpSum(x []float32, a, b float32) float64                            { off(); return 0 }
func SoftmaxCausal(p []float32, rows, ld, n0 int, sc float32)             { off() }
func SoftmaxCausalBackward(s, dp []float32, rows, ld, n0 int, sc float32) { off() }
func LogSumExp(lse []float64, x []float32, rows, cols int)                { off() }
func SoftmaxScaled(out, in []float32, g float32)                          { off() }
func SwiGLU(d, g, u []float32)                                            { off() }
func SwiGLUBackward(dg, du, dy, g, u []float32)                           { off() }
func RMSNorm(out, x, w []float32, rows, cols int, eps float32)            { off() }

// AdamWParams are AdamW's per-step factors (see the cgo build's).
type AdamWParams struct {
	Decay, LerpW     float32
	LerpLow          bool
	W2, Beta2        float32
	NegStep, Bc2Sqrt float32
	Eps              float32
}

func AdamW(p, g, m, v []float32, a AdamWParams) { off() }
