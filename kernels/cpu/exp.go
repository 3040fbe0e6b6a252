package cpu

import "math"

// exp32 is e^x in float32 to within 3 ulp, several times faster than
// math.Exp: x = n·ln2 + r with |r| ≤ ln2/2, e^r by a degree-6 polynomial
// (Taylor coefficients, whose truncation error at ln2/2 is below 2⁻²⁵),
// and 2ⁿ put into the exponent bits. Attention's softmax and SwiGLU take an
// exponential per element, which with math.Exp cost as much as the matrix
// products of a long prefill.
func exp32(x float32) float32 {
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693359375 // exact in float32, so n·ln2hi is exact
		ln2lo = -2.12194440e-4
	)
	switch {
	case x > 88.72283935: // ln(MaxFloat32)
		return float32(math.Inf(1))
	case x < -87.33654: // below the smallest normal result
		return 0
	case x != x:
		return x
	}
	// Adding 1.5·2²³ rounds x·log2e to an integer in the low mantissa bits.
	t := x*log2e + 12582912
	n := t - 12582912
	r := x - n*ln2hi
	r -= n * ln2lo
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720))))))
	e := int32(math.Float32bits(t)&0x7fffff) - 0x400000 // n as an integer
	if e > 127 {                                        // e^x just below MaxFloat32: 2ⁿ itself overflows
		return 2 * p * math.Float32frombits(uint32(e+126)<<23)
	}
	return p * math.Float32frombits(uint32(e+127)<<23)
}
