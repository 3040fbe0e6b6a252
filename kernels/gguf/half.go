package gguf

import "math"

// f16Table maps every IEEE half-precision bit pattern to its float32 value;
// ggml dequantisation does the same lookup.
var f16Table = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = f16ToF32Slow(uint16(i))
	}
	return &t
}()

// F16ToF32 converts an IEEE 754 half-precision value to float32 (exactly).
func F16ToF32(h uint16) float32 { return f16Table[h] }

func f16ToF32Slow(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch exp {
	case 0:
		// zero or subnormal: mant * 2^-24, exact in float32
		f := float32(mant) * (1.0 / (1 << 24))
		return math.Float32frombits(sign | math.Float32bits(f))
	case 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

// F32ToF16 converts float32 to half precision, rounding to nearest even, as
// numpy's astype(float16) and ggml's FP32_TO_FP16 do.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff { // inf or nan
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		// subnormal half: shift the implicit-one mantissa into place
		m := mant | 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		rest := m & (1<<shift - 1)
		hm := m >> shift
		if rest > half || (rest == half && hm&1 == 1) {
			hm++
		}
		return sign | uint16(hm)
	}
	hm := mant >> 13
	rest := mant & 0x1fff
	h := uint32(e)<<10 | hm
	if rest > 0x1000 || (rest == 0x1000 && hm&1 == 1) {
		h++ // may carry into the exponent, which is the right answer
	}
	return sign | uint16(h)
}

// BF16ToF32 converts a bfloat16 value to float32 (exactly).
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 converts float32 to bfloat16 rounding to nearest even, with NaNs
// kept quiet, as ggml_compute_fp32_to_bf16 does.
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 64
	}
	return uint16((u + (0x7fff + (u>>16)&1)) >> 16)
}
