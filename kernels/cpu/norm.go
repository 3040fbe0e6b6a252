package cpu

import (
	"fmt"
	"math"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/cpu/simd"
	"github.com/frognano/frognano/kernels/tensor"
)

// RMSNorm sets each row to x/sqrt(mean(x²)+eps)·weight. The mean is
// accumulated in float64; package simd's vector kernel does the rows when
// a vector level is on.
func (Backend) RMSNorm(dst, x, weight kernels.Tensor, eps float32) {
	d, xs, w := host(dst), host(x), host(weight)
	mustSameLen("RMSNorm", d, xs)
	cols := xs.Cols()
	if w.Len() != cols {
		panic(fmt.Sprintf("cpu: RMSNorm: weight has shape %v for rows of %d", w.Shape(), cols))
	}
	wd := w.Data()
	forRows(xs.Rows(), 2*cols, func(lo, hi int) {
		if simd.On() {
			simd.RMSNorm(d.Data()[lo*cols:hi*cols], xs.Data()[lo*cols:hi*cols], wd, hi-lo, cols, eps)
			return
		}
		for r := lo; r < hi; r++ {
			in, out := xs.Row(r), d.Row(r)
			var ss float64
			for _, v := range in {
				ss += float64(v) * float64(v)
			}
			scale := 1 / math.Sqrt(ss/float64(cols)+float64(eps))
			for i, v := range in {
				out[i] = float32(float64(v)*scale) * wd[i]
			}
		}
	})
}

// Softmax normalises each row to probabilities.
func (Backend) Softmax(dst, x kernels.Tensor) { softmaxRows("Softmax", host(dst), host(x), false) }

// LogSoftmax sets each row to x - logsumexp(x).
func (Backend) LogSoftmax(dst, x kernels.Tensor) { softmaxRows("LogSoftmax", host(dst), host(x), true) }

func softmaxRows(op string, d, xs *tensor.Tensor, log bool) {
	mustSameLen(op, d, xs)
	cols := xs.Cols()
	forRows(xs.Rows(), costExp*cols, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			in, out := xs.Row(r), d.Row(r)
			if len(in) == 0 {
				continue
			}
			mx := in[0]
			for _, v := range in[1:] {
				mx = max(mx, v)
			}
			m := float64(mx)
			var sum float64
			if log {
				for _, v := range in {
					sum += math.Exp(float64(v) - m)
				}
				lse := m + math.Log(sum)
				for i, v := range in {
					out[i] = float32(float64(v) - lse)
				}
				continue
			}
			for i, v := range in {
				e := math.Exp(float64(v) - m)
				sum += e
				out[i] = float32(e)
			}
			inv := float32(1 / sum)
			for i := range out {
				out[i] *= inv
			}
		}
	})
}
