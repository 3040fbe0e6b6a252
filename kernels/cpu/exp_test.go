package cpu

import (
	"math"
	"testing"
)

// TestExp32 sweeps the float32 range exp32 returns normal numbers for, and
// the edges around it, against math.Exp.
func TestExp32(t *testing.T) {
	var worst float64
	check := func(x float32) {
		got, want := float64(exp32(x)), math.Exp(float64(x))
		if want < 0x1p-126 { // flushed to zero below the normal range
			if got != 0 && math.Abs(got-want) > 0x1p-126 {
				t.Fatalf("exp32(%v) = %v, want 0 or %v", x, got, want)
			}
			return
		}
		if want > math.MaxFloat32*0.9999 {
			if !math.IsInf(got, 1) && got < math.MaxFloat32*0.999 {
				t.Fatalf("exp32(%v) = %v, want +Inf", x, got)
			}
			return
		}
		ulp := float64(math.Nextafter32(float32(want), float32(math.Inf(1)))) - float64(float32(want))
		if e := math.Abs(got-want) / ulp; e > worst {
			worst = e
		}
	}
	for x := float32(-90); x < 90; x += 0.000731 {
		check(x)
	}
	for _, x := range []float32{0, -0, 1, -1, 1e-30, -1e-30, 88.7, 88.73, -87.3, -87.4, -100, 100} {
		check(x)
	}
	if worst > 3 {
		t.Errorf("largest error %.2f ulp, want ≤ 3", worst)
	}
	t.Logf("largest error %.2f ulp", worst)
	if exp32(float32(math.Inf(-1))) != 0 || !math.IsInf(float64(exp32(float32(math.Inf(1)))), 1) || !math.IsNaN(float64(exp32(float32(math.NaN())))) {
		t.Error("exp32 of ±Inf or NaN")
	}
}

func BenchmarkExp32(b *testing.B) {
	x := make([]float32, 4096)
	for i := range x {
		x[i] = float32(i)/512 - 4
	}
	b.SetBytes(4 * int64(len(x)))
	for range b.N {
		for i, v := range x {
			x[i] = exp32(v) - exp32(v) + v
		}
	}
}

func BenchmarkMathExp(b *testing.B) {
	x := make([]float32, 4096)
	for i := range x {
		x[i] = float32(i)/512 - 4
	}
	b.SetBytes(4 * int64(len(x)))
	for range b.N {
		for i, v := range x {
			x[i] = float32(math.Exp(float64(v))-math.Exp(float64(v))) + v
		}
	}
}
