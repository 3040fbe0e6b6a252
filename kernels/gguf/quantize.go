package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Quantize encodes src as type t (F32, F16, BF16, Q8_0, Q4_0 or Q4_1) and
// returns the bytes, using ggml's reference quantisers (quantize_row_*_ref),
// so a checkpoint can be exported to GGUF. len(src) must be a multiple of the
// block size.
func Quantize(t TensorType, src []float32) ([]byte, error) {
	bs := t.BlockSize()
	if bs == 0 || len(src)%bs != 0 {
		return nil, fmt.Errorf("gguf: %d elements is not a multiple of the %s block size %d", len(src), t, bs)
	}
	out := make([]byte, t.RowBytes(len(src)))
	le := binary.LittleEndian
	switch t {
	case F32:
		for i, v := range src {
			le.PutUint32(out[4*i:], math.Float32bits(v))
		}
	case F16:
		for i, v := range src {
			le.PutUint16(out[2*i:], F32ToF16(v))
		}
	case BF16:
		for i, v := range src {
			le.PutUint16(out[2*i:], F32ToBF16(v))
		}
	case Q8_0:
		for b := 0; b < len(src)/32; b++ {
			x, y := src[32*b:32*b+32], out[34*b:34*b+34]
			var amax float32
			for _, v := range x {
				amax = max(amax, float32(math.Abs(float64(v))))
			}
			d := amax / 127
			var id float32
			if d != 0 {
				id = 1 / d
			}
			le.PutUint16(y, F32ToF16(d))
			for j, v := range x {
				y[2+j] = byte(int8(math.Round(float64(float32(v * id)))))
			}
		}
	case Q4_0:
		for b := 0; b < len(src)/32; b++ {
			x, y := src[32*b:32*b+32], out[18*b:18*b+18]
			var amax, mx float32
			for _, v := range x {
				if a := float32(math.Abs(float64(v))); a > amax {
					amax, mx = a, v
				}
			}
			d := mx / -8
			var id float32
			if d != 0 {
				id = 1 / d
			}
			le.PutUint16(y, F32ToF16(d))
			for j := range 16 {
				q0 := min(15, int8(float32(x[j]*id)+8.5))
				q1 := min(15, int8(float32(x[j+16]*id)+8.5))
				y[2+j] = byte(q0) | byte(q1)<<4
			}
		}
	case Q4_1:
		for b := 0; b < len(src)/32; b++ {
			x, y := src[32*b:32*b+32], out[20*b:20*b+20]
			lo, hi := x[0], x[0]
			for _, v := range x {
				lo, hi = min(lo, v), max(hi, v)
			}
			d := (hi - lo) / 15
			var id float32
			if d != 0 {
				id = 1 / d
			}
			le.PutUint16(y, F32ToF16(d))
			le.PutUint16(y[2:], F32ToF16(lo))
			for j := range 16 {
				q0 := min(15, int8(float32((x[j]-lo)*id)+0.5))
				q1 := min(15, int8(float32((x[j+16]-lo)*id)+0.5))
				y[4+j] = byte(q0) | byte(q1)<<4
			}
		}
	default:
		return nil, fmt.Errorf("%w: cannot quantise to %s; supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1", ErrUnsupportedType, t)
	}
	return out, nil
}
