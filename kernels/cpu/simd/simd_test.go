package simd

import (
	"math"
	"testing"
)

// vector runs fn under each vector level this machine runs.
func vector(t *testing.T, fn func(t *testing.T)) {
	old := Current()
	defer SetLevel(old)
	if Best == Go {
		t.Skip("no vector level on this machine or build")
	}
	for l := AVX2; l <= Best; l++ {
		SetLevel(l)
		t.Run(l.String(), fn)
	}
}

// TestExpShifted holds the vector exponential to float64's math.Exp within
// 2 ulp over its whole domain, [−87.33654, 0] densely and the edges: 0
// below the normal results, NaN carried through, every tail length.
func TestExpShifted(t *testing.T) {
	var xs []float32
	for y := -87.33654; y <= 0; y += 0.0013 {
		xs = append(xs, float32(y))
	}
	xs = append(xs, 0, float32(math.Copysign(0, -1)), -87.33654, -87.3366, -88, -100, -1e30, float32(math.Inf(-1)), float32(math.NaN()), -1e-30, -0.5, -0.34657359)
	vector(t, func(t *testing.T) {
		for _, n := range []int{len(xs), len(xs) - 1, 33, 17, 16, 15, 9, 8, 7, 1} {
			x := xs[len(xs)-n:]
			dst := make([]float32, n)
			sum := ExpShifted(dst, x, 1, 0)
			var want float64
			for j, v := range x {
				e := math.Exp(float64(v))
				switch {
				case math.IsNaN(float64(v)):
					if !math.IsNaN(float64(dst[j])) {
						t.Fatalf("e^NaN = %g", dst[j])
					}
					continue
				case v < -87.33654:
					e = 0
				}
				want += float64(float32(e))
				if ulp := math.Abs(float64(dst[j])-e) / ulpOf(float32(e)); ulp > 2 {
					t.Fatalf("e^%g = %.9g, want %.9g (%.2f ulp)", v, dst[j], e, ulp)
				}
			}
			if !math.IsNaN(sum) && math.Abs(sum-want) > 1e-6*want+1e-40 {
				t.Fatalf("n=%d: sum %g, want %g", n, sum, want)
			}
			if got := ExpSum(x, 1, 0); got != sum && !(math.IsNaN(got) && math.IsNaN(sum)) {
				t.Fatalf("ExpSum %g, ExpShifted's sum %g", got, sum)
			}
		}
		// x·a − b: the shift and the scale.
		x := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9}
		dst := make([]float32, len(x))
		ExpShifted(dst, x, 0.5, 4.5)
		for j, v := range x {
			if e := math.Exp(float64(v)*0.5 - 4.5); math.Abs(float64(dst[j])-e) > 2*ulpOf(float32(e)) {
				t.Fatalf("e^(%g/2 − 4.5) = %g, want %g", v, dst[j], e)
			}
		}
	})
}

func ulpOf(x float32) float64 {
	if x == 0 {
		return float64(math.SmallestNonzeroFloat32)
	}
	return float64(math.Nextafter32(x, float32(math.Inf(1))) - x)
}

func TestMax(t *testing.T) {
	vector(t, func(t *testing.T) {
		for n := 1; n <= 40; n++ {
			for at := range n {
				x := make([]float32, n)
				for i := range x {
					x[i] = -float32(i + 1)
				}
				x[at] = 7
				if at > 1 {
					x[at-1] = float32(math.NaN()) // passed over after the first
				}
				if m := Max(x); m != 7 {
					t.Fatalf("n=%d at %d: Max %g, want 7", n, at, m)
				}
			}
		}
	})
}

func TestLevels(t *testing.T) {
	if got := initialLevel("go"); got != Go {
		t.Fatalf("FROGNANO_SIMD=go: %v", got)
	}
	if got := initialLevel(""); got != Best {
		t.Fatalf("FROGNANO_SIMD unset: %v, want %v", got, Best)
	}
	if got := initialLevel("avx9000"); got != Best {
		t.Fatalf("FROGNANO_SIMD=avx9000: %v, want %v", got, Best)
	}
	old := SetLevel(Level(99))
	defer SetLevel(old)
	if Current() != Best {
		t.Fatalf("SetLevel(99) gave %v on a machine whose best is %v", Current(), Best)
	}
	if ls := Levels(); ls[0] != Go || ls[len(ls)-1] != Best {
		t.Fatalf("Levels() = %v", ls)
	}
	SetLevel(Go)
	defer func() {
		if recover() == nil {
			t.Fatal("a kernel ran with no vector level")
		}
	}()
	Max([]float32{1})
}
