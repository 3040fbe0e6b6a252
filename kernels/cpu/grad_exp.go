package cpu

import "math"

// exp2Frac holds 2^(j/64) for j < 64, rounded to float32.
var exp2Frac = func() (t [64]float32) {
	for j := range t {
		t[j] = float32(math.Exp2(float64(j) / 64))
	}
	return t
}()

// exp2FracBits holds the bits of exp2Frac: adding n to the exponent field
// multiplies by 2ⁿ while the result stays normal.
var exp2FracBits = func() (t [64]uint32) {
	for j, x := range exp2Frac {
		t[j] = math.Float32bits(x)
	}
	return t
}()

// expShifted sets dst[j] = e^(x[j]·a − b) and returns Σ dst in float64. It
// serves the softmax of a row shifted by its maximum, so every exponent is
// at most 0 (or NaN, which carries through), and it is the costliest loop
// of the loss head and of attention's backward, an exponential per
// element. Hence a shorter method than exp32's, written out in the loop:
// y = (64n + j)·ln2/64 + r with |r| ≤ ln2/128, e^y = 2ⁿ · 2^(j/64) · e^r
// with the middle factor from a table and e^r by a cubic (truncation error
// below 2⁻³⁴); within 3 ulp of e^y. dst may be x.
func expShifted(dst, x []float32, a, b float32) float64 {
	const (
		toK    = 64 / math.Ln2
		ln2Hi  = 0.010833740234375 // ln2/64 to 11 bits, so k·ln2Hi is exact
		ln2Lo  = math.Ln2/64 - ln2Hi
		round  = 12582912  // 1.5·2²³: adding it rounds to an integer
		minArg = -87.33654 // below it e^y is not a normal float32
	)
	x = x[:len(dst)]
	tab := &exp2FracBits
	var s0, s1 float64
	for j, v := range x {
		y := v*a - b
		var p float32
		if y >= minArg {
			t := y*toK + round
			k := int32(math.Float32bits(t)&0x7fffff) - 0x400000 // round(y·64/ln2)
			kf := t - round
			r := y - kf*ln2Hi - kf*ln2Lo
			p = 1 + r*(1+r*(1.0/2+r*(1.0/6)))
			p *= math.Float32frombits(tab[k&63] + uint32(k>>6)<<23)
		} else if y != y {
			p = y
		}
		dst[j] = p
		s0, s1 = s1, s0+float64(p) // two chains of additions
	}
	return s0 + s1
}

// expNeg is e^y for −87.33654 ≤ y ≤ 0 (the normal results) or NaN, by
// expShifted's method, small enough to inline; the caller clamps y.
func expNeg(y float32) float32 {
	const toK, ln2Hi, round = 64 / math.Ln2, 0.010833740234375, 12582912
	t := y*toK + round
	k := int32(math.Float32bits(t)&0x7fffff) - 0x400000
	kf := t - round
	r := y - kf*ln2Hi - kf*(math.Ln2/64-ln2Hi)
	return (1 + r*(1+r*(1.0/2+r*(1.0/6)))) * math.Float32frombits(exp2FracBits[k&63]+uint32(k>>6)<<23)
}
