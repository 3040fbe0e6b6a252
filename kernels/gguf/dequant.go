package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Dequantize expands len(dst) elements of type t from src into dst, following
// ggml's reference dequantisation (dequantize_row_* in ggml-quants.c) block
// for block. len(dst) must be a multiple of the type's block size and src must
// hold exactly the corresponding bytes.
//
// Products are rounded to float32 before an add (explicit conversions stop the
// compiler fusing them into FMAs), so results are bit-identical to ggml's
// scalar code and to the gguf Python package.
func Dequantize(t TensorType, src []byte, dst []float32) error {
	if !t.CanDequantize() {
		return fmt.Errorf("%w: cannot dequantise %s; supported: %s", ErrUnsupportedType, t, DequantizableTypes())
	}
	bs := t.BlockSize()
	if len(dst)%bs != 0 {
		return fmt.Errorf("gguf: %d %s elements is not a multiple of the block size %d", len(dst), t, bs)
	}
	if want := t.RowBytes(len(dst)); len(src) != want {
		return fmt.Errorf("gguf: %d %s elements need %d bytes, got %d", len(dst), t, want, len(src))
	}
	switch t {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case F16:
		for i := range dst {
			dst[i] = f16Table[binary.LittleEndian.Uint16(src[2*i:])]
		}
	case BF16:
		for i := range dst {
			dst[i] = BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case Q8_0:
		dequantQ8_0(src, dst)
	case Q4_0:
		dequantQ4_0(src, dst)
	case Q4_1:
		dequantQ4_1(src, dst)
	case Q5_0:
		dequantQ5_0(src, dst)
	case Q5_1:
		dequantQ5_1(src, dst)
	case Q4_K:
		dequantQ4_K(src, dst)
	case Q6_K:
		dequantQ6_K(src, dst)
	}
	return nil
}

func f16At(b []byte) float32 { return f16Table[uint16(b[0])|uint16(b[1])<<8] }

// Q8_0: {f16 d; int8 qs[32]}; x = qs*d.
func dequantQ8_0(src []byte, dst []float32) {
	for ; len(dst) >= 32; dst, src = dst[32:], src[34:] {
		d := f16At(src)
		qs := src[2:34]
		y := dst[:32]
		for j := range y {
			y[j] = float32(int8(qs[j])) * d
		}
	}
}

// Q4_0: {f16 d; u8 qs[16]}; low nibbles are elements 0..15, high 16..31;
// x = (q-8)*d.
func dequantQ4_0(src []byte, dst []float32) {
	for ; len(dst) >= 32; dst, src = dst[32:], src[18:] {
		d := f16At(src)
		qs := src[2:18]
		y := dst[:32]
		for j := range 16 {
			y[j] = float32(int(qs[j]&0x0f)-8) * d
			y[j+16] = float32(int(qs[j]>>4)-8) * d
		}
	}
}

// Q4_1: {f16 d; f16 m; u8 qs[16]}; x = q*d + m.
func dequantQ4_1(src []byte, dst []float32) {
	for ; len(dst) >= 32; dst, src = dst[32:], src[20:] {
		d := f16At(src)
		m := f16At(src[2:])
		qs := src[4:20]
		y := dst[:32]
		for j := range 16 {
			y[j] = float32(float32(qs[j]&0x0f)*d) + m
			y[j+16] = float32(float32(qs[j]>>4)*d) + m
		}
	}
}

// Q5_0: {f16 d; u8 qh[4]; u8 qs[16]}; element j's fifth bit is bit j of the
// little-endian uint32 qh; low nibbles are elements 0..15, high 16..31;
// x = (q-16)*d.
func dequantQ5_0(src []byte, dst []float32) {
	for ; len(dst) >= 32; dst, src = dst[32:], src[22:] {
		d := f16At(src)
		qh := binary.LittleEndian.Uint32(src[2:6])
		qs := src[6:22]
		y := dst[:32]
		for j := range 16 {
			x0 := int(qs[j]&0x0f|byte(qh>>j&1)<<4) - 16
			x1 := int(qs[j]>>4|byte(qh>>(j+16)&1)<<4) - 16
			y[j] = float32(x0) * d
			y[j+16] = float32(x1) * d
		}
	}
}

// Q5_1: {f16 d; f16 m; u8 qh[4]; u8 qs[16]}; as Q5_0 without the offset,
// x = q*d + m.
func dequantQ5_1(src []byte, dst []float32) {
	for ; len(dst) >= 32; dst, src = dst[32:], src[24:] {
		d := f16At(src)
		m := f16At(src[2:])
		qh := binary.LittleEndian.Uint32(src[4:8])
		qs := src[8:24]
		y := dst[:32]
		for j := range 16 {
			x0 := qs[j]&0x0f | byte(qh>>j&1)<<4
			x1 := qs[j]>>4 | byte(qh>>(j+16)&1)<<4
			y[j] = float32(float32(x0)*d) + m
			y[j+16] = float32(float32(x1)*d) + m
		}
	}
}

// scaleMinK4 unpacks the j-th 6-bit (scale, min) pair of a Q4_K/Q5_K block
// (get_scale_min_k4 in ggml).
func scaleMinK4(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return (q[j+4] & 0x0f) | ((q[j-4] >> 6) << 4), (q[j+4] >> 4) | ((q[j] >> 6) << 4)
}

// Q4_K: {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]} over 256 elements in 8
// sub-blocks of 32; x = (d*sc)*q - (dmin*m).
func dequantQ4_K(src []byte, dst []float32) {
	const blockBytes = 2 + 2 + 12 + QK_K/2
	for ; len(dst) >= QK_K; dst, src = dst[QK_K:], src[blockBytes:] {
		d := f16At(src)
		dmin := f16At(src[2:])
		scales := src[4:16]
		q := src[16:blockBytes]
		y := dst[:QK_K]
		for j, is := 0, 0; j < QK_K; j, is = j+64, is+2 {
			sc, m := scaleMinK4(is, scales)
			d1, m1 := float32(d*float32(sc)), float32(dmin*float32(m))
			sc, m = scaleMinK4(is+1, scales)
			d2, m2 := float32(d*float32(sc)), float32(dmin*float32(m))
			qq := q[j/2 : j/2+32]
			for l := range 32 {
				y[j+l] = float32(d1*float32(qq[l]&0x0f)) - m1
				y[j+32+l] = float32(d2*float32(qq[l]>>4)) - m2
			}
		}
	}
}

// Q6_K: {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d} over 256 elements;
// x = (d*scale)*(q-32) with 6-bit q split over ql (low 4 bits) and qh (high 2).
func dequantQ6_K(src []byte, dst []float32) {
	const blockBytes = QK_K/2 + QK_K/4 + QK_K/16 + 2
	for ; len(dst) >= QK_K; dst, src = dst[QK_K:], src[blockBytes:] {
		ql := src[:QK_K/2]
		qh := src[QK_K/2 : QK_K/2+QK_K/4]
		sc := src[QK_K/2+QK_K/4 : QK_K/2+QK_K/4+QK_K/16]
		d := f16At(src[blockBytes-2:])
		y := dst[:QK_K]
		for n := 0; n < QK_K; n += 128 {
			l0, h0, s0 := ql[n/2:], qh[n/4:], sc[n/16:]
			for l := range 32 {
				is := l / 16
				q1 := int((l0[l]&0x0f)|((h0[l]>>0)&3)<<4) - 32
				q2 := int((l0[l+32]&0x0f)|((h0[l]>>2)&3)<<4) - 32
				q3 := int((l0[l]>>4)|((h0[l]>>4)&3)<<4) - 32
				q4 := int((l0[l+32]>>4)|((h0[l]>>6)&3)<<4) - 32
				y[n+l] = float32(d*float32(int8(s0[is]))) * float32(q1)
				y[n+l+32] = float32(d*float32(int8(s0[is+2]))) * float32(q2)
				y[n+l+64] = float32(d*float32(int8(s0[is+4]))) * float32(q3)
				y[n+l+96] = float32(d*float32(int8(s0[is+6]))) * float32(q4)
			}
		}
	}
}
