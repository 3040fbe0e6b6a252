package cpu

import (
	"fmt"
	"math"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/cpu/simd"
	"github.com/frognano/frognano/kernels/tensor"
)

// TokenLogProbs sets dst[i] = log softmax(logits[i])[targets[i]]: the
// row's maximum, then Σ exp(x − max) with float32 exponentials
// (expShifted) summed in float64, rows split across the cores; with a
// vector level on, package simd's LogSumExp does the rows.
func (Backend) TokenLogProbs(dst []float32, logits kernels.Tensor, targets []int32) {
	x := host(logits)
	mustTargets("TokenLogProbs", x, targets)
	if len(dst) != len(targets) {
		panic(fmt.Sprintf("cpu: TokenLogProbs: %d outputs for %d rows", len(dst), len(targets)))
	}
	if simd.On() {
		cols, xd := x.Cols(), x.Data()
		forRows(len(targets), costExp*cols, func(lo, hi int) {
			lse := make([]float64, hi-lo)
			simd.LogSumExp(lse, xd[lo*cols:hi*cols], hi-lo, cols)
			for r := lo; r < hi; r++ {
				dst[r] = float32(float64(xd[r*cols+int(targets[r])]) - lse[r-lo])
			}
		})
		return
	}
	forRows(len(targets), costExp*x.Cols(), func(lo, hi int) {
		var buf [1024]float32 // the exponentials, a piece at a time, in L1
		for r := lo; r < hi; r++ {
			in := x.Row(r)
			m := rowMax(in)
			var sum float64
			for c := 0; c < len(in); c += len(buf) {
				piece := in[c:min(c+len(buf), len(in))]
				sum += expShifted(buf[:len(piece)], piece, 1, m)
			}
			dst[r] = float32(float64(in[targets[r]]-m) - math.Log(sum))
		}
	})
}

// TokenLogProbsBackward sets dlogits[i] = dlogp[i]·(onehot(targets[i]) −
// softmax(logits[i])), in three passes over each row: its maximum, the
// exponentials written into dlogits with their float64 sum, and the
// scaling; so dlogits may be logits. A row whose dlogp is 0 (a token left
// out of the loss) is set to zero without reading its logits.
func (Backend) TokenLogProbsBackward(dlogits, logits kernels.Tensor, targets []int32, dlogp []float32) {
	d, x := host(dlogits), host(logits)
	mustTargets("TokenLogProbsBackward", x, targets)
	mustSameLen("TokenLogProbsBackward", d, x)
	if len(dlogp) != len(targets) {
		panic(fmt.Sprintf("cpu: TokenLogProbsBackward: %d gradients for %d rows", len(dlogp), len(targets)))
	}
	if !sameData(d, x) {
		mustNotOverlap("TokenLogProbsBackward", d, x)
	}
	forRows(len(targets), costExp*x.Cols(), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			in, out := x.Row(r), d.Row(r)
			g := dlogp[r]
			if g == 0 {
				clear(out)
				continue
			}
			if simd.On() {
				simd.SoftmaxScaled(out, in, g)
			} else {
				m := rowMax(in)
				sum := expShifted(out, in, 1, m)
				scaleSlice(out, float32(-float64(g)/sum))
			}
			out[targets[r]] += g
		}
	})
}

// mustTargets checks one target per row of logits, each inside the row.
func mustTargets(op string, x *tensor.Tensor, targets []int32) {
	if x.Rows() != len(targets) {
		panic(fmt.Sprintf("cpu: %s: %d targets for %d rows", op, len(targets), x.Rows()))
	}
	for i, id := range targets {
		if id < 0 || int(id) >= x.Cols() {
			panic(fmt.Sprintf("cpu: %s: target %d at %d outside rows of %d", op, id, i, x.Cols()))
		}
	}
}

// sameData reports whether a and b are the same elements.
func sameData(a, b *tensor.Tensor) bool {
	x, y := a.Data(), b.Data()
	return len(x) == len(y) && (len(x) == 0 || &x[0] == &y[0])
}

// rowMax is the largest element of a non-empty row, ignoring NaN (which
// the exponentials then carry into every result).
func rowMax(x []float32) float32 {
	m0, m1, m2, m3 := x[0], x[0], x[0], x[0]
	for y := x; len(y) >= 4; y = y[4:] {
		if y[0] > m0 {
			m0 = y[0]
		}
		if y[1] > m1 {
			m1 = y[1]
		}
		if y[2] > m2 {
			m2 = y[2]
		}
		if y[3] > m3 {
			m3 = y[3]
		}
	}
	for _, v := range x[len(x)&^3:] {
		m0 = max(m0, v)
	}
	return max(m0, m1, m2, m3)
}

// scaleSlice sets x *= a.
func scaleSlice(x []float32, a float32) {
	for i := range x {
		x[i] *= a
	}
}
