package learner

import (
	"encoding/binary"
	"math"
	"testing"
)

// TestEncodeF32IsLittleEndian: the fast copy writes the bytes the
// element-by-element encoding writes, and decoding gives back every value
// (NaN payloads, infinities, negative zero, subnormals included).
func TestEncodeF32IsLittleEndian(t *testing.T) {
	x := []float32{0, float32(math.Copysign(0, -1)), 1, -2.5, 3.4e38, 1e-45, float32(math.Inf(1)), float32(math.Inf(-1)),
		math.Float32frombits(0x7fc00001), math.Float32frombits(0xffa00003), 0.1, -7e-30}
	b := encodeF32(x)
	for i, v := range x {
		if got := binary.LittleEndian.Uint32(b[4*i:]); got != math.Float32bits(v) {
			t.Fatalf("value %d: bytes %#x, want %#x", i, got, math.Float32bits(v))
		}
	}
	y := decodeF32(b)
	for i := range x {
		if math.Float32bits(y[i]) != math.Float32bits(x[i]) {
			t.Fatalf("value %d: decoded %#x, want %#x", i, math.Float32bits(y[i]), math.Float32bits(x[i]))
		}
	}
	if len(encodeF32(nil)) != 0 || len(decodeF32(nil)) != 0 {
		t.Fatal("empty")
	}
}

func BenchmarkEncodeF32(b *testing.B) {
	x := make([]float32, 16<<20)
	for i := range x {
		x[i] = float32(i)
	}
	b.SetBytes(4 << 24)
	for _, c := range []struct {
		name string
		fast bool
	}{{"copy", true}, {"elementwise", false}} {
		b.Run(c.name, func(b *testing.B) {
			saved := littleEndian
			littleEndian = c.fast && saved
			defer func() { littleEndian = saved }()
			for range b.N {
				_ = encodeF32(x)
			}
		})
	}
}
