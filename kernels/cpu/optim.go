package cpu

import (
	"fmt"
	"math"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/cpu/simd"
)

// AdamW updates param, m and v in place, element by element in float32, in
// the order and with the roundings of torch.optim.AdamW's single-tensor
// path (torch 2.x, the default for CPU tensors), whose vectorized kernels
// fuse the moment updates into FMAs:
//
//	p *= 1 − lr·wd                         (decoupled decay, before the moments)
//	m  = fma(1−β1, g − m, m)               (lerp; fma(−β1, g − m, g) when β1 ≤ ½)
//	v  = fma((1−β2)·g, g, v·β2)
//	p += (−lr/(1−β1^step) · m) / (sqrt(v)/sqrt(1−β2^step) + eps)
//
// The scalar factors are computed in float64, as Python does, and rounded
// to float32 once, as torch does when it applies them to float32 tensors.
// m and v then equal torch's bit for bit; p differs by an ulp or two where
// torch's vectorized sqrt is not correctly rounded. The decay uses the old
// parameter, so the update is the interface's formula
// p −= lr·(m̂/(sqrt(v̂)+eps) + wd·p) up to float32 rounding. Package simd's
// vector kernel does the same operations, with the FMA instructions
// (rounded once, where fma32 rounds through float64) and the correctly
// rounded sqrt.
func (Backend) AdamW(param, grad, m, v kernels.Tensor, o kernels.AdamWParams, step int) {
	p, g, ms, vs := host(param), host(grad), host(m), host(v)
	mustSameLen("AdamW", p, g, ms, vs)
	if step < 1 {
		panic(fmt.Sprintf("cpu: AdamW: step %d, want 1 or more", step))
	}
	lr, b1, b2 := float64(o.LR), float64(o.Beta1), float64(o.Beta2)
	decay := float32(1 - lr*float64(o.WeightDecay))
	w1 := 1 - b1
	lerpW, lerpLow := float32(w1), w1 < 0.5
	beta2, w2 := float32(b2), float32(1-b2)
	bc1 := 1 - math.Pow(b1, float64(step))
	bc2 := 1 - math.Pow(b2, float64(step))
	negStep := float32(-(lr / bc1))
	bc2Sqrt := float32(math.Sqrt(bc2))
	eps := o.Eps
	pd, gd, md, vd := p.Data(), g.Data(), ms.Data(), vs.Data()
	forRows(len(pd), 8, func(lo, hi int) {
		pd, gd, md, vd := pd[lo:hi], gd[lo:hi], md[lo:hi], vd[lo:hi]
		if simd.On() {
			simd.AdamW(pd, gd, md, vd, simd.AdamWParams{Decay: decay, LerpW: lerpW, LerpLow: lerpLow,
				W2: w2, Beta2: beta2, NegStep: negStep, Bc2Sqrt: bc2Sqrt, Eps: eps})
			return
		}
		for i := range pd {
			gi, mi := gd[i], md[i]
			if lerpLow {
				mi = fma32(lerpW, gi-mi, mi)
			} else {
				mi = fma32(lerpW-1, gi-mi, gi)
			}
			vi := fma32(w2*gi, gi, vd[i]*beta2)
			md[i], vd[i] = mi, vi
			denom := float32(math.Sqrt(float64(vi)))/bc2Sqrt + eps
			pd[i] = float32(pd[i]*decay) + float32(negStep*mi)/denom // no FMA here, as in torch
		}
	})
}

// fma32 is a·b + c rounded once to float32 (but for double rounding through
// float64, which the exact float64 product makes vanishingly rare).
func fma32(a, b, c float32) float32 {
	return float32(float64(a)*float64(b) + float64(c))
}
