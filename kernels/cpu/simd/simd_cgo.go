//go:build cgo && !purego

package simd

/*
#cgo CFLAGS: -O2
#cgo LDFLAGS: -lm
int simd_level(void);
float simd_max(int lvl, const float *x, long n);
double simd_expsum(int lvl, float *dst, const float *x, long n, float a, float b);
void simd_softmax_causal(int lvl, float *p, long rows, long ld, long n0, float sc);
void simd_softmax_causal_backward(int lvl, float *s, float *dp, long rows, long ld, long n0, float sc);
void simd_logsumexp(int lvl, double *lse, const float *x, long rows, long cols);
void simd_softmax_scaled(int lvl, float *out, const float *in, long n, float g);
void simd_swiglu(int lvl, float *d, const float *g, const float *u, long n);
void simd_swiglu_backward(int lvl, float *dg, float *du, const float *dy, const float *g, const float *u, long n);
void simd_rmsnorm(int lvl, float *out, const float *in, const float *w, long rows, long cols, float eps);
void simd_adamw(int lvl, float *p, const float *g, float *m, float *v, long n, float decay, float lerpW, int lerpLow,
                float w2, float beta2, float negStep, float bc2Sqrt, float eps);
*/
import "C"

import (
	"fmt"
	"unsafe"
)

func cpuLevel() Level { return Level(C.simd_level()) }

func fp(x []float32) *C.float {
	if len(x) == 0 {
		return nil
	}
	return (*C.float)(unsafe.Pointer(unsafe.SliceData(x)))
}

// Max is the largest element of a non-empty x; NaN elements after the
// first are passed over.
func Max(x []float32) float32 {
	if len(x) == 0 {
		panic("simd: Max of an empty slice")
	}
	return float32(C.simd_max(C.int(lvl()), fp(x), C.long(len(x))))
}

// ExpShifted sets dst[j] = e^(x[j]·a − b) for the len(dst) elements and
// returns their sum in float64; dst may be x. The exponents must be at
// most 0 (a row shifted by its maximum), or NaN, which carries through;
// below −87.33654 the result is 0.
func ExpShifted(dst, x []float32, a, b float32) float64 {
	checkLen("ExpShifted", len(dst), len(x))
	return float64(C.simd_expsum(C.int(lvl()), fp(dst), fp(x), C.long(len(dst)), C.float(a), C.float(b)))
}

// ExpSum is Σ e^(x[j]·a − b) over x, with ExpShifted's exponentials.
func ExpSum(x []float32, a, b float32) float64 {
	return float64(C.simd_expsum(C.int(lvl()), nil, fp(x), C.long(len(x)), C.float(a), C.float(b)))
}

// checkRows checks rows of ld elements, row r using its first n0+r.
func checkRows(op string, x []float32, rows, ld, n0 int) {
	if rows < 0 || n0 < 1 || n0+rows-1 > ld || len(x) < rows*ld {
		panic(fmt.Sprintf("simd: %s: %d rows of %d from %d in %d elements", op, rows, ld, n0, len(x)))
	}
}

// SoftmaxCausal turns each of the rows (ld apart) of p into the softmax of
// sc times its first n0+r elements (row r) and zeroes the rest of it.
func SoftmaxCausal(p []float32, rows, ld, n0 int, sc float32) {
	if rows == 0 {
		return
	}
	checkRows("SoftmaxCausal", p, rows, ld, n0)
	C.simd_softmax_causal(C.int(lvl()), fp(p), C.long(rows), C.long(ld), C.long(n0), C.float(sc))
}

// SoftmaxCausalBackward takes rows of raw scores s and of the gradient dp
// of their probabilities (row r: its first n0+r of ld) and leaves in s the
// softmax of sc·s and in dp the gradient of the raw scores,
// sc·p·(dp − Σ p·dp), the dot product in float64; both zero past n0+r.
func SoftmaxCausalBackward(s, dp []float32, rows, ld, n0 int, sc float32) {
	if rows == 0 {
		return
	}
	checkRows("SoftmaxCausalBackward", s, rows, ld, n0)
	checkRows("SoftmaxCausalBackward", dp, rows, ld, n0)
	C.simd_softmax_causal_backward(C.int(lvl()), fp(s), fp(dp), C.long(rows), C.long(ld), C.long(n0), C.float(sc))
}

// LogSumExp sets lse[r] to log Σ e^x over row r of the rows×cols matrix x,
// as max + log Σ e^(x − max) in float64.
func LogSumExp(lse []float64, x []float32, rows, cols int) {
	if rows == 0 {
		return
	}
	if cols < 1 || len(lse) < rows || len(x) < rows*cols {
		panic(fmt.Sprintf("simd: LogSumExp: %d rows of %d, %d outputs, %d elements", rows, cols, len(lse), len(x)))
	}
	C.simd_logsumexp(C.int(lvl()), (*C.double)(unsafe.Pointer(&lse[0])), fp(x), C.long(rows), C.long(cols))
}

// SoftmaxScaled sets out = −g·softmax(in); out may be in.
func SoftmaxScaled(out, in []float32, g float32) {
	if len(out) == 0 {
		panic("simd: SoftmaxScaled of an empty row")
	}
	checkLen("SoftmaxScaled", len(out), len(in))
	C.simd_softmax_scaled(C.int(lvl()), fp(out), fp(in), C.long(len(out)), C.float(g))
}

// SwiGLU sets d = silu(g)·u over len(d) elements.
func SwiGLU(d, g, u []float32) {
	checkLen("SwiGLU", len(d), len(g), len(u))
	C.simd_swiglu(C.int(lvl()), fp(d), fp(g), fp(u), C.long(len(d)))
}

// SwiGLUBackward sets, with s = sigmoid(g), dg = dy·u·s·(1 + g·(1−s)) and
// du = dy·g·s over len(dy) elements; the outputs may be inputs.
func SwiGLUBackward(dg, du, dy, g, u []float32) {
	checkLen("SwiGLUBackward", len(dy), len(dg), len(du), len(g), len(u))
	C.simd_swiglu_backward(C.int(lvl()), fp(dg), fp(du), fp(dy), fp(g), fp(u), C.long(len(dy)))
}

// RMSNorm sets each row of the rows×cols out to x·w/sqrt(mean(x²)+eps),
// the mean and x/sqrt(…) in float64.
func RMSNorm(out, x, w []float32, rows, cols int, eps float32) {
	if rows == 0 || cols == 0 {
		return
	}
	checkLen("RMSNorm", rows*cols, len(out), len(x))
	checkLen("RMSNorm", cols, len(w))
	C.simd_rmsnorm(C.int(lvl()), fp(out), fp(x), fp(w), C.long(rows), C.long(cols), C.float(eps))
}

// AdamWParams are AdamW's per-step factors, as kernels/cpu's AdamW computes
// them (in float64, rounded to float32 once).
type AdamWParams struct {
	Decay   float32 // 1 − lr·wd
	LerpW   float32 // 1 − β1
	LerpLow bool    // 1 − β1 < ½: m = fma(1−β1, g − m, m), else fma(−β1, g − m, g)
	W2      float32 // 1 − β2
	Beta2   float32
	NegStep float32 // −lr/(1 − β1^step)
	Bc2Sqrt float32 // sqrt(1 − β2^step)
	Eps     float32
}

// AdamW updates p, m and v over len(p) elements with gradient g: m and v by
// single-rounded FMAs, p = p·decay + (negStep·m)/(sqrt(v)/bc2Sqrt + eps)
// unfused, the operations and roundings of kernels/cpu's Go loop.
func AdamW(p, g, m, v []float32, a AdamWParams) {
	checkLen("AdamW", len(p), len(g), len(m), len(v))
	low := 0
	if a.LerpLow {
		low = 1
	}
	C.simd_adamw(C.int(lvl()), fp(p), fp(g), fp(m), fp(v), C.long(len(p)), C.float(a.Decay), C.float(a.LerpW), C.int(low),
		C.float(a.W2), C.float(a.Beta2), C.float(a.NegStep), C.float(a.Bc2Sqrt), C.float(a.Eps))
}
