package cpu

import (
	"math"
	"testing"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/kernelstest"
)

func TestGradConformance(t *testing.T) {
	kernelstest.RunGrad(t, New(), "../testdata")
}

// TestGradConformanceParallel reruns the backward suite with every kernel
// split across goroutines however small its input.
func TestGradConformanceParallel(t *testing.T) {
	old := minParallelWork
	minParallelWork = 1
	defer func() { minParallelWork = old }()
	if workers(4, 1) < 2 {
		t.Skip("one CPU: nothing runs in parallel")
	}
	kernelstest.RunGrad(t, New(), "../testdata")
}

func TestAdamWStep(t *testing.T) {
	b := New()
	defer func() {
		if recover() == nil {
			t.Fatal("step 0: no panic")
		}
	}()
	b.AdamW(b.New(2), b.New(2), b.New(2), b.New(2), kernels.AdamWParams{LR: 1}, 0)
}

// TestExpShifted compares expShifted with math.Exp across the range a
// shifted softmax meets, in ulps of the float32 result.
func TestExpShifted(t *testing.T) {
	const n = 1 << 20
	x := make([]float32, n+4)
	for i := range n {
		x[i] = -87.3 * float32(i) / n
	}
	x[n], x[n+1], x[n+2], x[n+3] = -87.4, float32(math.Inf(-1)), float32(math.NaN()), 0
	got := make([]float32, len(x))
	sum := expShifted(got, x, 1, 0)
	var want float64
	worst := 0.0
	for i, v := range x[:n] {
		e := math.Exp(float64(v))
		want += float64(got[i])
		ulp := float64(math.Nextafter32(float32(e), float32(math.Inf(1))) - float32(e))
		worst = max(worst, math.Abs(float64(got[i])-e)/ulp)
	}
	if worst > 3 {
		t.Errorf("largest error %.2f ulp, want at most 3", worst)
	}
	if got[n] != 0 || got[n+1] != 0 || !math.IsNaN(float64(got[n+2])) || got[n+3] != 1 {
		t.Errorf("e^-87.4, e^-Inf, e^NaN, e^0 = %v", got[n:])
	}
	if !math.IsNaN(sum) {
		t.Errorf("sum with a NaN = %v", sum)
	}
	if s := expShifted(got[:n], x[:n], 1, 0); math.Abs(s-want) > 1e-12*want {
		t.Errorf("sum %v, want %v", s, want)
	}
	// The scale and shift: e^(2·(−1) − (−3)) = e.
	if expShifted(got[:1], []float32{-1}, 2, -3); math.Abs(float64(got[0])-math.E) > 3e-7 {
		t.Errorf("e^(2·−1+3) = %v", got[0])
	}
	t.Logf("largest error %.2f ulp", worst)
}
