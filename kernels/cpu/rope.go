package cpu

import (
	"fmt"
	"math"

	"github.com/frognano/frognano/kernels"
)

// RoPE rotates each head of row i to position pos[i], half-rotation form.
//
// Rounding follows Hugging Face: the inverse frequencies theta^(-2j/headDim)
// and the angles pos·freq are float32; sine and cosine of the float32 angle
// are taken in float64 and rounded.
func (Backend) RoPE(dst, x kernels.Tensor, pos []int32, headDim int, theta float32) {
	d, xs := host(dst), host(x)
	mustSameLen("RoPE", d, xs)
	cols := xs.Cols()
	if headDim <= 0 || headDim%2 != 0 || cols%headDim != 0 {
		panic(fmt.Sprintf("cpu: RoPE: head dimension %d for rows of %d", headDim, cols))
	}
	if len(pos) != xs.Rows() {
		panic(fmt.Sprintf("cpu: RoPE: %d positions for %d rows", len(pos), xs.Rows()))
	}
	half := headDim / 2
	invFreq := make([]float32, half)
	for j := range invFreq {
		invFreq[j] = float32(1 / math.Pow(float64(theta), float64(2*j)/float64(headDim)))
	}
	forRows(len(pos), 2*costExp*half+3*cols, func(lo, hi int) {
		cos, sin := make([]float32, half), make([]float32, half)
		for r := lo; r < hi; r++ {
			if pos[r] < 0 {
				panic(fmt.Sprintf("cpu: RoPE: negative position %d", pos[r]))
			}
			p := float32(pos[r])
			for j, f := range invFreq {
				s, c := math.Sincos(float64(p * f))
				sin[j], cos[j] = float32(s), float32(c)
			}
			in, out := xs.Row(r), d.Row(r)
			for h := 0; h < cols; h += headDim {
				x1, x2 := in[h:h+half], in[h+half:h+headDim]
				y1, y2 := out[h:h+half], out[h+half:h+headDim]
				for j := range half {
					a, b := x1[j], x2[j]
					y1[j] = a*cos[j] - b*sin[j]
					y2[j] = b*cos[j] + a*sin[j]
				}
			}
		}
	})
}
